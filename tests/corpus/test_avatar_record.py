"""A meshgs checkpoint's avatar record, re-saved with damaged tensors (issue 52: the avatar run folder that
``splatforge view`` opens): every damage is one line naming the field (AvatarInputError), never an IndexError
from the skinning code or a segmentation fault in the binding kernel. The viewer path itself (a trained meshgs
run through ``viewer.scene.load_scene``) was fuzzed with the same edits outside the suite (docs/fuzzing.md)."""

from __future__ import annotations

import pytest
import torch

from recon.avatar.avatar_data import AvatarData
from recon.avatar.skin_file import AvatarInputError, Skin
from recon.avatar.skinning import Skeleton
from recon.avatar.state_checks import check_bindings


def _avatar() -> AvatarData:
    """A tetrahedron on a 3-joint chain, 2 captured poses."""
    vertices = torch.tensor([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
    faces = torch.tensor([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
    skeleton = Skeleton(torch.tensor([-1, 0, 1]), torch.tensor([[0.0, 0, 0], [0, 0.5, 0], [0, 1, 0]]), ["a", "b", "c"])
    weights = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0, 1, 0], [0, 0.2, 0.8]])
    rotations = torch.zeros(2, 3, 4)
    rotations[..., 0] = 1
    return AvatarData(vertices, faces, Skin(skeleton, weights), rotations, torch.zeros(2, 3), ["p0", "p1"],
                      torch.tensor([False, True]))


def _set(key, value):
    return lambda s: s.__setitem__(key, value(s[key]))


def _element(key, index, value):
    def edit(s):
        s[key] = s[key].clone()
        s[key][index] = value
    return edit


DAMAGES = {
    "face-past-the-vertices": (_element("faces", (1, 2), 4), r"faces index vertices outside 0\.\.3 \(the first: 4\)"),
    "face-negative": (_element("faces", (0, 0), -1), r"faces index vertices outside"),
    "faces-float": (_set("faces", lambda f: f.float()), r"faces is float32 \[4, 3\], expected integer"),
    "vertex-nan": (_element("rest_vertices", (2, 1), float("nan")), r"rest_vertices holds 1 NaN"),
    "weights-a-row-short": (_set("weights", lambda w: w[:-1]), r"weights is float32 \[3, 3\], expected float \[4, 3\]"),
    "weights-a-zero-row": (_element("weights", 0, 0.0), r"weights hold negative values or a vertex with no influence"),
    "parent-after-its-child": (_element("parents", 1, 2), r"parents \[-1, 2, 1\] are not a skeleton"),
    "parent-past-the-joints": (_element("parents", 2, 9), r"parents \[-1, 0, 9\] are not a skeleton"),
    "joint-names-short": (_set("joint_names", lambda n: n[:2]), r"joint_names must be 3 names"),
    "rotations-of-2-joints": (_set("rotations", lambda r: r[:, :2]), r"rotations is float32 \[2, 2, 4\]"),
    "rotation-zero": (_element("rotations", (1, 1), 0.0), r"zero quaternion"),
    "translations-one-short": (_set("translations", lambda t: t[:1]), r"translations is float32 \[1, 3\]"),
    "unseen-a-list": (_set("unseen", lambda u: u.tolist()), r"unseen is a list, not a tensor"),
    "weights-missing": (lambda s: s.pop("weights"), r"lacks 'weights'"),
}


def test_the_good_record_round_trips():
    avatar = AvatarData.from_state(_avatar().state())
    assert torch.equal(avatar.faces, _avatar().faces) and avatar.skin.num_joints == 3


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_avatar_record_is_one_line_naming_the_field(damage):
    edit, error = DAMAGES[damage]
    state = _avatar().state()
    edit(state)
    with pytest.raises(AvatarInputError, match=error) as exc:
        AvatarData.from_state(state)
    assert "\n" not in str(exc.value) and str(exc.value).startswith("checkpoint: ")


def test_gaussians_bound_to_missing_triangles_are_refused():
    params = {"quats": torch.zeros(3, 4), "offsets": torch.zeros(3)}
    check_bindings(torch.tensor([0, 3, 1]), params, 4)
    with pytest.raises(AvatarInputError, match=r"face_ids bind Gaussians to triangles outside 0\.\.3"):
        check_bindings(torch.tensor([0, 4, 1]), params, 4)
    with pytest.raises(AvatarInputError, match=r"parameters offsets do not have one row per Gaussian"):
        check_bindings(torch.tensor([0, 1, 1]), {**params, "offsets": torch.zeros(2)}, 4)

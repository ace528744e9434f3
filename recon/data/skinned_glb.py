"""Read a rigged binary glTF (.glb) as an avatar template, or its animation as a clip of poses: the file's checks
here, the skin in :mod:`recon.avatar.gltf_skin`, the animation in :mod:`recon.avatar.gltf_animation`.

The container and every accessor go through the splat GLB reader's helpers (:func:`recon.export.glb.parse_glb`,
:func:`recon.export.glb.read_accessor`: chunk lengths against the file, accessor bounds against the BIN chunk,
strides, component types), the file through :func:`recon.core.limits.read_bytes_limited`. Only embedded
buffers (a .glb) are read; a .gltf with external buffers is refused with a one-line hint. Every problem is
one line naming the file (:class:`recon.avatar.skin_file.AvatarInputError`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from recon.avatar.gltf_animation import animation_poses
from recon.avatar.gltf_skin import GltfSkin, skinned_mesh
from recon.avatar.skinning import Skeleton
from recon.avatar.skin_file import AvatarInputError
from recon.core.limits import read_bytes_limited, with_path
from recon.export.glb import parse_glb, read_accessor
from recon.export.splats import SplatFileError

MAX_GLB_BYTES = 1 << 30


def is_glb_path(path) -> bool:
    """True for a path ending in .glb or .gltf (either case)."""
    return Path(path).suffix.lower() in (".glb", ".gltf")


def read_skinned_glb(path) -> GltfSkin:
    """The skinned mesh of the GLB at ``path`` (:func:`recon.avatar.gltf_skin.skinned_mesh`): vertices,
    faces, skin; AvatarInputError naming the file for anything wrong."""
    return _read_glb(Path(path), "skinned GLB", skinned_mesh)


def read_glb_animation(path, skeleton: Skeleton, fps: float, choice: str | None = None
                       ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The poses of ``skeleton`` (an avatar's), one per frame at ``fps``, of the GLB's animation ``choice``
    (name or index; None: the first), joints matched by name
    (:func:`recon.avatar.gltf_animation.animation_poses`); AvatarInputError naming the file for anything
    wrong."""
    return _read_glb(Path(path), "animation GLB",
                     lambda p, doc, accessor: animation_poses(p, doc, accessor, skeleton, fps, choice))


def _read_glb(path: Path, what: str, parse):
    """``parse(path, doc, accessor)`` of the GLB at ``path`` (container and accessors checked as the splat GLB
    reader does); a .gltf is refused with a hint."""
    if path.suffix.lower() == ".gltf":
        raise AvatarInputError(f"{path}: a .gltf with separate buffers is not read; save the rig as one binary "
                               f".glb (Blender: glTF Binary)")
    raw = read_bytes_limited(path, MAX_GLB_BYTES, what, with_path(AvatarInputError))
    try:
        doc, binary = parse_glb(path, raw)
        return parse(path, doc, lambda index: read_accessor(path, doc, binary, index))
    except SplatFileError as err:  # the container and accessor checks of the splat GLB reader
        raise AvatarInputError(str(err)) from None

"""The avatar a dataset holds and a meshgs model keeps: template mesh, skin and the captured poses.

Each captured pose k has a normalised time ``pose_times[k] = k / (P - 1)`` (0 for one pose): a frame of the
dataset carries its pose's time in :attr:`recon.data.scene.Frame.time`, the way 4D datasets hand a frame's
time to the model, and the model looks the pose up by it (:meth:`AvatarData.pose_index`). Times between
two poses give their interpolation (:meth:`AvatarData.pose_at`: animation playback).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch import Tensor

from recon.avatar.pose_time import pose_at_time
from recon.avatar.skin_file import AvatarInputError, Skin
from recon.avatar.skinning import Skeleton, pose_vertices

TIME_MATCH = 1e-6  # a render time names a pose when it is this close to the pose's time


def pose_times(count: int) -> np.ndarray:
    """[count] float64 normalised times of ``count`` poses: k / (count - 1) (0 for one pose)."""
    return np.arange(count) / max(count - 1, 1)


@dataclass
class AvatarData:
    """A skinned template and its poses.

    Attributes:
        rest_vertices: [V, 3] float32 rest-pose (template) vertices, world units.
        faces: [F, 3] int64 triangles (counter-clockwise seen from outside).
        skin: skeleton and weights [V, J].
        rotations: [P, J, 4] float32 wxyz joint rotations of the captured poses.
        translations: [P, 3] float32 root translations.
        names: P pose names; unseen: [P] bool, True for poses held out of training.
    """

    rest_vertices: Tensor
    faces: Tensor
    skin: Skin
    rotations: Tensor
    translations: Tensor
    names: list[str]
    unseen: Tensor

    @property
    def times(self) -> np.ndarray:
        return pose_times(len(self.names))

    def pose_index(self, t: float) -> int:
        """The pose whose time is ``t``; ValueError when none is."""
        times = self.times
        k = int(np.argmin(np.abs(times - float(t))))
        if abs(times[k] - float(t)) > TIME_MATCH:
            raise ValueError(f"no captured pose at time {t} (the {len(times)} poses are at k / {max(len(times) - 1, 1)})")
        return k

    def posed_vertices(self, rotations: Tensor, translation: Tensor | None = None) -> Tensor:
        """[V, 3] the template under ``rotations`` [J, 4] (and ``translation`` [3])."""
        dev = self.rest_vertices.device
        return pose_vertices(self.skin.skeleton, self.rest_vertices, self.skin.weights.to(dev), rotations.to(dev),
                             None if translation is None else translation.to(dev))

    def pose_at(self, t: float) -> tuple[Tensor, Tensor]:
        """([J, 4], [3]) the pose at normalised time ``t`` in [0, 1]: captured pose k at ``k / (P - 1)``,
        slerped / lerped between them (:func:`recon.avatar.pose_time.pose_at_time`; UsageError outside [0, 1])."""
        return pose_at_time(self.rotations, self.translations, t)

    def vertices_at(self, t: float | None) -> Tensor:
        """[V, 3] the template in the pose at time ``t`` (:meth:`pose_at`; None: the rest pose)."""
        if t is None:
            return self.rest_vertices
        return self.posed_vertices(*self.pose_at(t))

    def state(self) -> dict:
        """Plain tensors and lists (a checkpoint's ``avatar`` entry)."""
        sk = self.skin.skeleton
        return {"rest_vertices": self.rest_vertices.cpu(), "faces": self.faces.cpu(), "weights": self.skin.weights.cpu(),
                "parents": sk.parents.cpu(), "rest_positions": sk.rest_positions.cpu(), "joint_names": list(sk.names),
                "rotations": self.rotations.cpu(), "translations": self.translations.cpu(), "names": list(self.names),
                "unseen": self.unseen.cpu()}

    @classmethod
    def from_state(cls, state: dict) -> "AvatarData":
        from recon.avatar.state_checks import check_avatar_state

        check_avatar_state(state)  # shapes, index ranges, skeleton order, finite values (a re-saved checkpoint)
        try:
            skin = Skin(Skeleton(state["parents"], state["rest_positions"], list(state["joint_names"])),
                        state["weights"])
            return cls(state["rest_vertices"], state["faces"], skin, state["rotations"], state["translations"],
                       list(state["names"]), state["unseen"])
        except (KeyError, TypeError) as err:
            raise AvatarInputError(f"checkpoint: the avatar entry lacks {err}") from None

    def to(self, device) -> "AvatarData":
        skin = Skin(self.skin.skeleton, self.skin.weights.to(device))
        return AvatarData(self.rest_vertices.to(device), self.faces.to(device), skin, self.rotations,
                          self.translations, self.names, self.unseen)

"""The export record of an avatar (a meshgs model): skinned template, skeleton, an animation and the
Gaussians in triangle-local form, as plain numpy arrays (float32 unless noted), in the model's world frame.

What :meth:`recon.models.meshgs.MeshGaussians.to_avatar_record` gives and
:mod:`recon.export.avatar_glb` writes (spec: recon/export/AVATAR_GLB.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AvatarRecord:
    """Attributes:
        vertices: [V, 3] rest-pose template; faces: [F, 3] int64.
        joints: [V, 4] int64 and weights: [V, 4] (the 4 largest influences per vertex, rows summing to 1).
        parents: [J] int64 (-1 for the root, parents first); rest_positions: [J, 3]; joint_names: J names.
        rotations: [P, J, 4] wxyz joint rotations of the animation's keyframes; translations: [P, 3] root
            translations; fps: keyframes per second.
        face_ids: [N] int64; bary: [N, 3]; offsets: [N] (triangle sizes); quats: [N, 4] wxyz local;
            log_scales: [N, 3] (log of triangle sizes); logit_opacities: [N]; sh: [N, K, 3].
        pose_mlp: None, or the pose-dependent correction (recon/avatar/pose_mlp.py) as the GLB holds it:
            ``{"frequencies", "max_offset", "bary_shift", "scale_shift", "raw_offsets": [N],
            "layers": [(name, weight [out, in], bias [out] or None)]}`` (names pose.0, pose.2, gauss.0,
            gauss.2, head; spec: recon/export/AVATAR_GLB.md).
    """

    vertices: np.ndarray
    faces: np.ndarray
    joints: np.ndarray
    weights: np.ndarray
    parents: np.ndarray
    rest_positions: np.ndarray
    joint_names: list
    rotations: np.ndarray
    translations: np.ndarray
    fps: float
    face_ids: np.ndarray
    bary: np.ndarray
    offsets: np.ndarray
    quats: np.ndarray
    log_scales: np.ndarray
    logit_opacities: np.ndarray
    sh: np.ndarray
    pose_mlp: dict | None = None

    def __len__(self) -> int:
        return int(self.face_ids.shape[0])

    def keep(self, index: np.ndarray) -> "AvatarRecord":
        """The record with only the Gaussians ``index`` (the template and animation unchanged)."""
        from dataclasses import replace

        mlp = None if self.pose_mlp is None else {**self.pose_mlp, "raw_offsets": self.pose_mlp["raw_offsets"][index]}
        return replace(self, pose_mlp=mlp, **{n: getattr(self, n)[index] for n in
                                              ("face_ids", "bary", "offsets", "quats", "log_scales",
                                               "logit_opacities", "sh")})


def cap_per_triangle(record: AvatarRecord, cap: int) -> AvatarRecord:
    """The record keeping at most ``cap`` Gaussians per triangle, the most opaque ones (a device budget)."""
    if cap < 1:
        raise ValueError(f"cap_per_triangle: cap must be >= 1, got {cap}")
    order = np.lexsort((-record.logit_opacities, record.face_ids))  # by triangle, most opaque first
    faces = record.face_ids[order]
    first = np.searchsorted(faces, faces, side="left")
    rank = np.arange(len(faces)) - first
    return record.keep(np.sort(order[rank < cap]))

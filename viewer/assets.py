"""Inserted mesh assets in the viewer (``splatforge view RUN --asset ...``): loading them as
:class:`recon.hybrid.assets.PlacedAsset` records, the scene's ground frame, and the conversions between a
:class:`recon.hybrid.assets.Pose` and viser's transform gizmo.

Frames. A pose places the asset file's vertices ``v`` in the world as (recon/hybrid/assets.py)

    world = t + s * F @ Rz(yaw) @ Ry(pitch) @ Rx(roll) @ A @ v

with ``F`` [3, 3] the ground frame (columns e1, e2, up) and ``A`` the file's Y-up axes to ground axes. The
viewer shows an asset as a transform gizmo (viser scene node ``/assets/NN_name``) at ``position = t`` with
rotation ``R = F @ Rz Ry Rx @ A`` (a proper rotation: ``F`` is right-handed and ``A`` a rotation), and the
asset's mesh parts as children of that node, in the file frame, scaled by ``s``. Moving the gizmo changes
``t`` and ``R``; :func:`pose_from_gizmo` recovers yaw, pitch and roll from ``F^T R A^T`` (ZYX Euler angles),
so the read-out is the ``--pose`` string ``splatforge insert`` takes (:func:`format_pose`).

The ground frame (:func:`scene_frame`) is the one ``splatforge insert`` uses: ``up`` from the run's training
cameras (:func:`recon.distributed.partition.up_axis`), ``(e1, e2)`` from
:func:`recon.distributed.partition.ground_frame`; a splat file without cameras uses the viewer's up (-y).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from recon.hybrid.assets import (Y_UP_TO_GROUND, AssetError, Light, MeshAsset, PlacedAsset, Pose, load_mesh,
                                 parse_light, parse_material, parse_pose, rotation_zyx)

DEFAULT_LIGHT = "sun:45,60"  # the viewer's light when no --light is given (shadows need one)
DEFAULT_SIZE = 0.3  # an asset without --pose is scaled to this fraction of the scene's radius


def scene_frame(cameras: Sequence, up: np.ndarray | None = None) -> np.ndarray:
    """[3, 3] ground frame (columns e1, e2, up) from training cameras (objects with ``.camera``); from ``up``
    (default -y, the OpenCV world's up) when there are none."""
    from recon.distributed.partition import ground_frame, up_axis

    if cameras:
        up = up_axis(list(cameras))
    up = np.asarray([0.0, -1.0, 0.0] if up is None else up, np.float64)
    up = up / np.linalg.norm(up)
    e1, e2 = ground_frame(up)
    return np.stack([e1, e2, up], axis=1)


def euler_zyx(m: np.ndarray) -> tuple[float, float, float]:
    """(yaw, pitch, roll) in degrees with ``m`` = Rz(yaw) @ Ry(pitch) @ Rx(roll) (:func:`rotation_zyx`);
    pitch in [-90, 90]; at pitch +-90 (gimbal lock) roll is 0."""
    pitch = math.asin(float(np.clip(-m[2, 0], -1.0, 1.0)))
    if abs(math.cos(pitch)) < 1e-9:
        return math.degrees(math.atan2(-m[0, 1], m[1, 1])), math.degrees(pitch), 0.0
    return (math.degrees(math.atan2(m[1, 0], m[0, 0])), math.degrees(pitch),
            math.degrees(math.atan2(m[2, 1], m[2, 2])))


def gizmo_rotation(pose: Pose, frame: np.ndarray) -> np.ndarray:
    """[3, 3] the rotation file frame -> world of ``pose`` (no scale): F @ Rz Ry Rx @ A."""
    return frame @ rotation_zyx(pose.yaw, pose.pitch, pose.roll) @ Y_UP_TO_GROUND


def pose_to_gizmo(pose: Pose, frame: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(wxyz [4], position [3]) of the viser gizmo showing ``pose`` in ground frame ``frame``."""
    import viser.transforms as vtf

    return vtf.SO3.from_matrix(gizmo_rotation(pose, frame)).wxyz, np.asarray(pose.translation, np.float64)


def pose_from_gizmo(wxyz, position, scale: float, frame: np.ndarray) -> Pose:
    """The :class:`Pose` of a gizmo at ``wxyz`` / ``position`` (world) carrying an asset scaled by ``scale``."""
    import viser.transforms as vtf

    r = vtf.SO3(np.asarray(wxyz, np.float64)).as_matrix()
    yaw, pitch, roll = euler_zyx(frame.T @ r @ Y_UP_TO_GROUND.T)
    return Pose(tuple(float(v) for v in position), yaw, pitch, roll, float(scale))


def format_pose(pose: Pose, digits: int = 4) -> str:
    """``"x,y,z,yaw,pitch,roll,s"`` as ``--pose`` takes it (:func:`recon.hybrid.assets.parse_pose`): positions
    and scale to ``digits`` significant digits, angles to 0.1 degree; -0 written as 0."""
    p = pose.as_list()

    def num(v: float, fmt: str) -> str:
        text = format(v, fmt)
        return text[1:] if text.startswith("-") and float(text) == 0.0 else text

    return ",".join([num(v, f".{digits}g") for v in p[:3]] + [num(v, ".1f") for v in p[3:6]]
                    + [num(p[6], f".{digits}g")])


def default_pose(centre: np.ndarray, radius: float, asset: MeshAsset) -> Pose:
    """A pose for an asset given without ``--pose``: at the scene's ``centre``, upright, scaled so its
    largest extent is DEFAULT_SIZE of the scene's ``radius``."""
    v = asset.vertices
    extent = float(np.max(v.max(0) - v.min(0)))
    scale = DEFAULT_SIZE * radius / max(extent, 1e-9)
    return Pose(tuple(float(c) for c in centre), 0.0, 0.0, 0.0, float(f"{scale:.4g}"))


def _per_asset(values: Sequence[str], n: int, flag: str) -> list[str | None]:
    """``values`` of a repeatable flag matched to ``n`` assets as ``splatforge insert`` does: none (all
    default) or one per asset, in --asset order."""
    if len(values) == 0:
        return [None] * n
    if len(values) != n:
        raise AssetError(f"{flag}: given {len(values)} time(s) for {n} --asset(s); give one {flag} per --asset, in "
                         f"the same order (or none)")
    return list(values)


def load_assets(paths: Sequence[str | Path], poses: Sequence[str] = (), materials: Sequence[str] = (),
                centre: np.ndarray | None = None, radius: float = 1.0, up: str = "y") -> list[PlacedAsset]:
    """Load ``--asset`` files (``up``: their up axis, "y" or "z") with their ``--pose`` / ``--material``
    strings (each given 0 or len(paths) times) into :class:`PlacedAsset` records; an asset without a pose gets
    :func:`default_pose` (at ``centre``). AssetError naming the file or the string when something cannot be
    used."""
    out = []
    for path, pose, material in zip(paths, _per_asset(poses, len(paths), "--pose"),
                                    _per_asset(materials, len(paths), "--material")):
        mesh = load_mesh(path, up)
        placed = parse_pose(pose) if pose is not None else default_pose(
            np.zeros(3) if centre is None else centre, radius, mesh)
        out.append(PlacedAsset(mesh, placed, parse_material(material or "diffuse")))
    return out


def load_lights(texts: Sequence[str], frame: np.ndarray) -> list[Light]:
    """``--light`` strings (:func:`recon.hybrid.assets.parse_light`); DEFAULT_LIGHT when none are given."""
    return [parse_light(t, frame) for t in (texts or (DEFAULT_LIGHT,))]


def browser_meshes(asset: MeshAsset) -> list:
    """The asset's parts as ``trimesh.Trimesh`` (file frame) for viser's ``add_mesh_trimesh``, carrying the
    same colour source the hybrid renderer shades with: the texture (with its uv), else vertex colours,
    else the material colour as vertex colours."""
    import trimesh
    from PIL import Image

    out = []
    for part in asset.parts:
        mesh = trimesh.Trimesh(vertices=part.vertices, faces=part.faces, process=False)
        if part.texture is not None and part.uv is not None:
            image = Image.fromarray((np.clip(part.texture * part.color[None, None], 0, 1) * 255 + 0.5)
                                    .astype(np.uint8))
            mesh.visual = trimesh.visual.TextureVisuals(uv=part.uv, image=image)
        else:
            colours = part.vertex_colors if part.vertex_colors is not None else np.broadcast_to(
                part.color, (len(part.vertices), 3))
            rgba = np.concatenate([np.clip(colours, 0, 1) * 255 + 0.5, np.full((len(colours), 1), 255.0)], 1)
            mesh.visual = trimesh.visual.ColorVisuals(mesh, vertex_colors=rgba.astype(np.uint8))
        out.append(mesh)
    return out


__all__ = ["DEFAULT_LIGHT", "browser_meshes", "default_pose", "euler_zyx", "format_pose", "gizmo_rotation",
           "load_assets", "load_lights", "pose_from_gizmo", "pose_to_gizmo", "scene_frame"]

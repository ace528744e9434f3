"""Mesh assets for insertion: geometry with its albedo source, a pose, a material; lights; keyframed paths.

Frames. An asset file is read in its own frame, taken as **Y-up** (glTF's convention, and most OBJ files';
``up="z"`` for Z-up files). A :class:`Pose` places it in the run's world through the scene's *ground frame*
``F = [e1, e2, up]`` (orthonormal columns, right-handed; ``up`` from the training cameras, see
:func:`recon.distributed.partition.up_axis`):

    world = translation + scale * F @ Rz(yaw) @ Ry(pitch) @ Rx(roll) @ A @ v

``A`` maps the file's axes onto ground coordinates (Y-up: x -> x, y -> z, z -> -y; Z-up: identity). Yaw
turns about the scene's up axis, pitch about e2, roll about e1; angles in degrees; ``translation`` in world
coordinates (what the viewer shows). The CLI string is ``"x,y,z,yaw,pitch,roll,s"`` (:func:`parse_pose`).

Albedo at a surface point (:meth:`MeshPart.albedo`): a texture sampled bilinearly at the interpolated uv
(wrapping; v = 0 is the image's bottom row, as in OBJ and glTF) times the material's colour factor, else
interpolated vertex colours, else the material's colour. Colours are linear [0, 1] floats as the scene's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from recon.core.errors import SplatforgeError, UsageError


class AssetError(SplatforgeError, ValueError):
    """A mesh asset, pose, material, light or asset path cannot be used as given."""


MATERIALS = ("diffuse", "mirror", "glass")
DEFAULT_IOR = 1.5
DEFAULT_COLOUR = (0.8, 0.8, 0.8)


# ------------------------------------------------------------------------------------------ geometry


@dataclass
class MeshPart:
    """One textured or coloured piece of an asset, in the asset's file frame.

    vertices [V, 3] float64; faces [F, 3] int32; uv [V, 2] float32 or None; texture [h, w, 3] float32 in
    [0, 1] or None; vertex_colors [V, 3] float32 or None; color [3] float32 (the material's base colour or
    factor)."""

    vertices: np.ndarray
    faces: np.ndarray
    uv: np.ndarray | None = None
    texture: np.ndarray | None = None
    vertex_colors: np.ndarray | None = None
    color: np.ndarray = field(default_factory=lambda: np.asarray(DEFAULT_COLOUR, np.float32))

    def albedo(self, faces: np.ndarray, bary: np.ndarray) -> np.ndarray:
        """[R, 3] float32 albedo at points given by face index [R] and barycentric (u, v) [R, 2] (open3d's
        ``primitive_uvs``: weights (1 - u - v, u, v) of the face's vertices 0, 1, 2)."""
        weights = np.stack([1.0 - bary[:, 0] - bary[:, 1], bary[:, 0], bary[:, 1]], axis=1)
        corners = self.faces[faces]  # [R, 3]
        if self.texture is not None and self.uv is not None:
            uv = np.einsum("rk,rkc->rc", weights, self.uv[corners])
            return sample_texture(self.texture, uv) * self.color[None]
        if self.vertex_colors is not None:
            return np.einsum("rk,rkc->rc", weights, self.vertex_colors[corners]).astype(np.float32)
        return np.broadcast_to(self.color, (len(faces), 3)).astype(np.float32)


def sample_texture(texture: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """[R, 3] bilinear, wrapping samples of ``texture`` [h, w, 3] at ``uv`` [R, 2] (u right, v up; texel
    centres at (i + 0.5) / w)."""
    h, w = texture.shape[:2]
    x = np.mod(uv[:, 0], 1.0) * w - 0.5
    y = (1.0 - np.mod(uv[:, 1], 1.0)) * h - 0.5
    x0, y0 = np.floor(x), np.floor(y)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    x0, y0 = x0.astype(np.int64) % w, y0.astype(np.int64) % h
    x1, y1 = (x0 + 1) % w, (y0 + 1) % h
    top = texture[y0, x0] * (1 - fx) + texture[y0, x1] * fx
    bottom = texture[y1, x0] * (1 - fx) + texture[y1, x1] * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


@dataclass
class MeshAsset:
    """A mesh file's parts, in its own frame (see the module docstring); ``name`` for messages."""

    name: str
    parts: list[MeshPart]

    @property
    def vertices(self) -> np.ndarray:
        """[V, 3] all parts' vertices (file frame)."""
        return np.concatenate([p.vertices for p in self.parts])

    @property
    def face_count(self) -> int:
        return sum(len(p.faces) for p in self.parts)


def _image_array(image) -> np.ndarray | None:
    """A PIL image (or None) as [h, w, 3] float32 in [0, 1]."""
    if image is None:
        return None
    arr = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
    return arr if arr.size else None


def _part_from_trimesh(mesh) -> MeshPart:
    """A :class:`MeshPart` from one ``trimesh.Trimesh`` (already in the asset's frame)."""
    import trimesh

    part = MeshPart(vertices=np.asarray(mesh.vertices, np.float64), faces=np.asarray(mesh.faces, np.int32))
    visual = mesh.visual
    if isinstance(visual, trimesh.visual.texture.TextureVisuals):
        material = visual.material
        colour = getattr(material, "main_color", None)
        factor = getattr(material, "baseColorFactor", None)
        if factor is not None:
            part.color = np.asarray(factor, np.float32)[:3] / (255.0 if np.asarray(factor).max() > 1 else 1.0)
        elif colour is not None:
            part.color = np.asarray(colour, np.float32)[:3] / 255.0
        texture = _image_array(getattr(material, "image", None))
        if texture is not None and visual.uv is not None and len(visual.uv) == len(part.vertices):
            part.texture, part.uv = texture, np.asarray(visual.uv, np.float32)
            if factor is None:
                part.color = np.ones(3, np.float32)  # an OBJ's Kd is not a factor on its texture
    elif isinstance(visual, trimesh.visual.color.ColorVisuals) and visual.kind == "vertex":
        part.vertex_colors = np.asarray(visual.vertex_colors, np.float32)[:, :3] / 255.0
    elif isinstance(visual, trimesh.visual.color.ColorVisuals) and visual.kind == "face":
        part.vertex_colors = np.asarray(visual.vertex_colors, np.float32)[:, :3] / 255.0
    return part


def load_mesh(path: str | Path, up: str = "y") -> MeshAsset:
    """Read an OBJ / PLY / GLB / glTF / OFF / STL file with trimesh into a :class:`MeshAsset` (scene-graph
    transforms applied; ``up="z"`` re-expresses a Z-up file as Y-up). AssetError when the file is missing,
    does not load, or holds no triangles."""
    import trimesh

    from recon.core.limits import require_indices, with_path

    path = Path(path)
    if up not in ("y", "z"):
        raise AssetError(f"asset up axis {up!r}: use 'y' (glTF, most OBJ files) or 'z'")
    if not path.is_file():
        raise AssetError(f"{path}: no such mesh file; give an OBJ, PLY or GLB file")
    from recon.export.mesh_checks import check_mesh_file

    check_mesh_file(path, lambda p, problem: AssetError(f"{p}: {problem}"))  # GLB chunks/accessors, OBJ indices, before trimesh
    try:
        loaded = trimesh.load(str(path), force="scene", process=False)
    except Exception as err:  # trimesh raises many types for bad files
        raise AssetError(f"{path}: not a mesh trimesh can read ({type(err).__name__}: {err}); "
                         "export it as OBJ, PLY or GLB") from None
    parts = []
    for node in loaded.graph.nodes_geometry:
        transform, geometry_name = loaded.graph[node]
        geometry = loaded.geometry.get(geometry_name)
        if not isinstance(geometry, trimesh.Trimesh) or len(geometry.faces) == 0:
            continue
        require_indices(geometry.faces, len(geometry.vertices), path, f"mesh {geometry_name!r}: faces",
                        with_path(AssetError))  # before visuals index vertices by them (trimesh does not check)
        if not np.isfinite(np.asarray(geometry.vertices)).all():  # before transforms spread the NaN
            bad = int((~np.isfinite(np.asarray(geometry.vertices)).all(axis=1)).sum())
            raise AssetError(f"{path}: mesh {geometry_name!r} has {bad:,} vertices with NaN or infinite "
                             f"coordinates; repair or re-export the mesh")
        mesh = geometry.copy()
        mesh.apply_transform(transform)
        parts.append(_part_from_trimesh(mesh))
    if not parts:
        raise AssetError(f"{path}: holds no triangles (a point cloud or an empty scene?); an asset needs faces")
    if up == "z":
        to_y_up = np.asarray([[1, 0, 0], [0, 0, 1], [0, -1, 0]], np.float64)  # z-up file -> y-up frame
        for part in parts:
            part.vertices = part.vertices @ to_y_up.T
    return MeshAsset(name=path.name, parts=parts)


# ------------------------------------------------------------------------------------------ poses


def rotation_zyx(yaw: float, pitch: float, roll: float) -> np.ndarray:
    """[3, 3] Rz(yaw) @ Ry(pitch) @ Rx(roll), angles in degrees."""
    a, b, c = (math.radians(v) for v in (yaw, pitch, roll))
    rz = np.array([[math.cos(a), -math.sin(a), 0], [math.sin(a), math.cos(a), 0], [0, 0, 1]])
    ry = np.array([[math.cos(b), 0, math.sin(b)], [0, 1, 0], [-math.sin(b), 0, math.cos(b)]])
    rx = np.array([[1, 0, 0], [0, math.cos(c), -math.sin(c)], [0, math.sin(c), math.cos(c)]])
    return rz @ ry @ rx


Y_UP_TO_GROUND = np.asarray([[1, 0, 0], [0, 0, -1], [0, 1, 0]], np.float64)
"""A: file axes (Y-up) -> ground coordinates (e1, e2, up): x -> x, y -> up, z -> -e2."""


@dataclass(frozen=True)
class Pose:
    """An asset's placement (module docstring): world translation [3], yaw / pitch / roll in degrees about
    the ground frame's up / e2 / e1 axes, uniform scale."""

    translation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw: float = 0.0
    pitch: float = 0.0
    roll: float = 0.0
    scale: float = 1.0

    def matrix(self, frame: np.ndarray) -> np.ndarray:
        """[4, 4] asset file frame -> world, given the ground frame ``frame`` [3, 3] (columns e1, e2, up)."""
        m = np.eye(4)
        m[:3, :3] = self.scale * frame @ rotation_zyx(self.yaw, self.pitch, self.roll) @ Y_UP_TO_GROUND
        m[:3, 3] = self.translation
        return m

    def as_list(self) -> list[float]:
        return [*self.translation, self.yaw, self.pitch, self.roll, self.scale]


def parse_pose(text: str) -> Pose:
    """``"x,y,z[,yaw,pitch,roll[,s]]"`` (3, 6 or 7 numbers; degrees) -> :class:`Pose`."""
    try:
        values = [float(v) for v in str(text).replace(" ", "").split(",") if v != ""]
    except ValueError:
        values = []
    if len(values) not in (3, 6, 7) or not all(math.isfinite(v) for v in values):
        raise AssetError(f"--pose {text!r}: expected 'x,y,z[,yaw,pitch,roll[,scale]]' (3, 6 or 7 finite numbers, "
                         "angles in degrees), e.g. '0,0,0.5,30,0,0,0.4'")
    if len(values) == 7 and values[6] <= 0:
        raise AssetError(f"--pose {text!r}: the scale (7th number) must be positive")
    values += [0.0] * (6 - len(values)) if len(values) < 6 else []
    return Pose(tuple(values[:3]), *values[3:6], *(values[6:7] or [1.0]))


# ------------------------------------------------------------------------------------------ materials


@dataclass(frozen=True)
class Material:
    """kind "diffuse" (Lambert with the asset's albedo), "mirror" (perfect reflection tinted by ``tint``)
    or "glass" (Snell refraction with index ``ior`` and Fresnel reflection, tinted by ``tint``)."""

    kind: str = "diffuse"
    ior: float = DEFAULT_IOR
    tint: tuple[float, float, float] = (1.0, 1.0, 1.0)


def parse_material(text: str) -> Material:
    """``"diffuse"``, ``"mirror"`` or ``"glass[:ior]"`` -> :class:`Material`."""
    kind, _, arg = str(text).strip().lower().partition(":")
    if kind not in MATERIALS:
        raise AssetError(f"--material {text!r}: use diffuse, mirror or glass[:ior] (e.g. glass:1.5)")
    if kind != "glass":
        if arg:
            raise AssetError(f"--material {text!r}: only glass takes an argument (its index of refraction)")
        return Material(kind)
    try:
        ior = float(arg) if arg else DEFAULT_IOR
    except ValueError:
        ior = float("nan")
    if not (math.isfinite(ior) and 1.0 <= ior <= 4.0):
        raise AssetError(f"--material {text!r}: the index of refraction must be a number in [1, 4] (glass 1.5)")
    return Material("glass", ior)


# ------------------------------------------------------------------------------------------ lights


@dataclass(frozen=True)
class Light:
    """kind "sun" (directional: ``direction`` [3] world unit vector *toward* the light) or "point"
    (``position`` [3] world); ``intensity`` scales ``color`` (linear RGB)."""

    kind: str
    direction: tuple[float, float, float] | None = None
    position: tuple[float, float, float] | None = None
    intensity: float = 1.0
    color: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def toward(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(unit directions [R, 3] from ``points`` [R, 3] toward the light, distances [R] (inf for a sun))."""
        if self.kind == "sun":
            d = np.broadcast_to(np.asarray(self.direction, np.float64), points.shape)
            return d, np.full(len(points), np.inf)
        v = np.asarray(self.position, np.float64)[None] - points
        dist = np.linalg.norm(v, axis=1)
        return v / np.maximum(dist, 1e-12)[:, None], dist


def sun_direction(azimuth: float, elevation: float, frame: np.ndarray) -> np.ndarray:
    """[3] world unit vector toward a sun at ``azimuth`` (degrees from e1 toward e2) and ``elevation``
    (degrees above the ground plane) in the ground frame ``frame`` [3, 3] (columns e1, e2, up)."""
    a, e = math.radians(azimuth), math.radians(elevation)
    return frame @ np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])


def parse_light(text: str, frame: np.ndarray) -> Light:
    """``"sun:azimuth,elevation[,intensity[,r,g,b]]"`` (degrees in the ground frame) or
    ``"point:x,y,z[,intensity[,r,g,b]]"`` (world position) -> :class:`Light`."""
    kind, _, arg = str(text).strip().lower().partition(":")
    usage = ("use 'sun:azimuth,elevation[,intensity[,r,g,b]]' (degrees) or 'point:x,y,z[,intensity[,r,g,b]]', "
             "e.g. sun:45,60 or point:0,0,3,5")
    try:
        values = [float(v) for v in arg.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise AssetError(f"--light {text!r}: {usage}") from None
    need = {"sun": 2, "point": 3}.get(kind)
    if need is None or len(values) not in (need, need + 1, need + 4) or not all(math.isfinite(v) for v in values):
        raise AssetError(f"--light {text!r}: {usage}")
    intensity = values[need] if len(values) > need else 1.0
    colour = tuple(values[need + 1:need + 4]) if len(values) == need + 4 else (1.0, 1.0, 1.0)
    if intensity < 0 or min(colour) < 0:
        raise AssetError(f"--light {text!r}: intensity and colour must not be negative")
    if kind == "sun":
        if not -90.0 <= values[1] <= 90.0:
            raise AssetError(f"--light {text!r}: the elevation must be in [-90, 90] degrees")
        d = sun_direction(values[0], values[1], frame)
        return Light("sun", direction=tuple(float(v) for v in d), intensity=intensity, color=colour)
    return Light("point", position=tuple(values[:3]), intensity=intensity, color=colour)


# ------------------------------------------------------------------------------------------ motion


@dataclass(frozen=True)
class AssetPath:
    """Keyframed poses: ``times`` [K] increasing (normalised frame time in [0, 1]) and their poses.
    Between keys, translation, angles and scale interpolate linearly (angles along the shorter way)."""

    times: tuple[float, ...]
    poses: tuple[Pose, ...]

    def at(self, time: float) -> Pose:
        """The pose at ``time`` (clamped to the first / last key)."""
        ts = self.times
        if time <= ts[0]:
            return self.poses[0]
        if time >= ts[-1]:
            return self.poses[-1]
        k = int(np.searchsorted(ts, time, side="right")) - 1
        w = (time - ts[k]) / (ts[k + 1] - ts[k])
        a, b = np.asarray(self.poses[k].as_list()), np.asarray(self.poses[k + 1].as_list())
        turn = (b[3:6] - a[3:6] + 180.0) % 360.0 - 180.0
        v = a + w * (b - a)
        v[3:6] = a[3:6] + w * turn
        return Pose(tuple(v[:3]), *v[3:6], v[6])


def load_asset_path(path: str | Path) -> AssetPath:
    """Read a keyframe file: JSON ``{"keyframes": [{"time": 0.0, "pose": "x,y,z,yaw,pitch,roll,s"}, ...]}``
    (or a bare list of such keys; ``pose`` may also be a list of 3, 6 or 7 numbers). Times are normalised to
    [0, 1] over the clip; at least one key. AssetError naming the file and the key otherwise."""
    from recon.core.limits import load_json

    path = Path(path)
    if not path.exists():
        raise AssetError(f"--asset-path {path}: no such file; write a JSON keyframe file "
                         "({\"keyframes\": [{\"time\": 0, \"pose\": \"x,y,z,yaw,pitch,roll,s\"}, ...]})")
    data = load_json(path, "keyframe file", lambda p, problem: AssetError(f"--asset-path {p}: {problem}"))
    keys = data.get("keyframes") if isinstance(data, dict) else data
    if not isinstance(keys, list) or not keys:
        raise AssetError(f"--asset-path {path}: expected a non-empty 'keyframes' list")
    times, poses = [], []
    for i, key in enumerate(keys):
        if not isinstance(key, dict) or "pose" not in key:
            raise AssetError(f"--asset-path {path}: keyframe {i} needs a 'pose' (and a 'time')")
        pose = key["pose"]
        text = ",".join(str(v) for v in pose) if isinstance(pose, (list, tuple)) else str(pose)
        try:
            poses.append(parse_pose(text))
        except AssetError as err:
            raise AssetError(f"--asset-path {path}: keyframe {i}: {err}") from None
        t = key.get("time", i / max(len(keys) - 1, 1))
        if not isinstance(t, (int, float)) or not math.isfinite(t):
            raise AssetError(f"--asset-path {path}: keyframe {i}: 'time' must be a number")
        times.append(float(t))
    if any(b <= a for a, b in zip(times, times[1:])):
        raise AssetError(f"--asset-path {path}: keyframe times must increase ({times})")
    return AssetPath(tuple(times), tuple(poses))


# ------------------------------------------------------------------------------------------ placed


@dataclass
class PlacedAsset:
    """An asset with its material and its pose over time (``path`` wins over ``pose`` when given)."""

    mesh: MeshAsset
    pose: Pose = Pose()
    material: Material = Material()
    path: AssetPath | None = None

    def pose_at(self, time: float | None) -> Pose:
        return self.path.at(0.0 if time is None else time) if self.path is not None else self.pose

    def world_vertices(self, frame: np.ndarray, time: float | None = None) -> list[np.ndarray]:
        """Per part, [V, 3] world vertices at ``time``."""
        m = self.pose_at(time).matrix(frame)
        return [p.vertices @ m[:3, :3].T + m[:3, 3] for p in self.mesh.parts]


def check_inside(assets: Sequence[PlacedAsset], frame: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 warn) -> None:
    """Call ``warn(message)`` for each asset whose world bounding box does not meet the box ``lo``..``hi``
    (the scene's bounds): it is likely placed by mistake where no camera of the run looks."""
    for a in assets:
        v = np.concatenate(a.world_vertices(frame))
        if np.any(v.max(axis=0) < lo) or np.any(v.min(axis=0) > hi):
            warn(f"asset {a.mesh.name} at {a.pose_at(None).as_list()[:3]} lies entirely outside the scene's bounds "
                 f"{np.round(lo, 3).tolist()} .. {np.round(hi, 3).tolist()}; check --pose (world coordinates)")


__all__ = ["AssetError", "AssetPath", "Light", "Material", "MeshAsset", "MeshPart", "PlacedAsset", "Pose",
           "UsageError", "check_inside", "load_asset_path", "load_mesh", "parse_light", "parse_material",
           "parse_pose", "rotation_zyx", "sample_texture", "sun_direction"]

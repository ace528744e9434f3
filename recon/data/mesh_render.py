"""Render a Blender-format dataset (like lego_400) from a (textured) mesh, with ground-truth depth and normals.

The core of ``scripts/make_mesh_dataset.py`` (its command line) and of ``splatforge mesh2splat``
(:mod:`recon.mesh2splat`, which renders each mesh of a folder this way before training on it).

Input: a mesh trimesh can load (OBJ with its MTL and texture PNG, PLY, GLB, ...). It must have triangles
and be edge-manifold (no edge shared by more than two faces); the error names the failed check.

Scene: the mesh is normalised (bounding-box centre to the origin, farthest vertex at distance 1); the map
from mesh to world coordinates is recorded as ``mesh_to_world`` (4x4, row-major, world = M @ [x, y, z, 1])
in both transforms files. Cameras look at the origin from a sphere of radius ``CAMERA_RADIUS`` (Fibonacci
points; the test split uses a rotated set, so no test view repeats a training view), with
``camera_angle_x`` = ``FOV_X`` (lego's).

Rendering (open3d ``RaycastingScene``): colour = texture at the interpolated UV (bilinear; the vertex colour
or a flat grey without one) x (AMBIENT + (1 - AMBIENT) x max(0, n . L)) with a fixed world light direction
L (view-independent Lambert, so every view agrees) and the interpolated vertex normal n. Colour and alpha
average ``--samples`` x ``--samples`` rays on a regular grid inside each pixel (default 4 x 4: a box
filter, as a camera pixel integrates light, so silhouettes are antialiased like lego_400's Blender
renders); depth and normal are those of the ray through the pixel centre. ``--samples 1`` is one ray
per pixel centre (hard, aliased silhouettes).

Output (``DIR``), as lego_400: ``transforms_train.json``, ``transforms_test.json`` with ``camera_angle_x``
and ``frames`` of ``file_path`` (``./train/r_0``, no extension) and ``transform_matrix`` (camera-to-world,
OpenGL/Blender axes: x right, y up, looking along -z). Per frame:

- ``r_K.png``: RGBA, 8 bit, straight (not premultiplied) colour; alpha = the share of the pixel's rays
  that hit the mesh (255: all of them; colour 0 where none does);
- ``r_K_depth.png``: 16-bit grey, camera z depth (along the optical axis, scene units) =
  value / ``depth_scale`` (recorded in the JSON, 10000: 0.1 mm-equivalent steps up to 6.5 units); 0 = no hit;
- ``r_K_normal.png``: 8-bit RGB, world-frame unit face normal n encoded as round((n + 1) / 2 x 255);
  (0, 0, 0) where there is no hit (alpha tells).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import SplatforgeError
from recon.core.open3d_import import open3d

FOV_X = 0.6911112070083618  # lego_400's camera_angle_x
CAMERA_RADIUS = 1.15 / math.sin(FOV_X / 2)  # the unit sphere fills the view with a 15% margin
DEPTH_SCALE = 10000.0
AMBIENT = 0.35
LIGHT = np.array([0.4, 0.3, 0.87]) / np.linalg.norm([0.4, 0.3, 0.87])
DEFAULT_SAMPLES = 4  # 4 x 4 rays per pixel for colour and alpha (see the module docstring)
RAYS_PER_CALL = 1 << 19  # pixel_samples' rays per open3d call (about 60 MB of hits and colours)
MIN_EXTENT, MAX_EXTENT = 1e-6, 1e6  # check_scale's bounds on a mesh's bounding-box side (file units)


class MeshInputError(SplatforgeError, ValueError):
    """The input mesh cannot be rendered (empty, non-manifold, unreadable)."""


# ------------------------------------------------------------------------------ input

def load_mesh(path: Path):
    """The mesh at ``path`` as one ``trimesh.Trimesh`` (scenes are concatenated, repeated faces dropped:
    :func:`drop_duplicate_faces`); MeshInputError when it cannot be read, holds no triangle, or is not
    edge-manifold."""
    import trimesh

    from recon.core.limits import require_indices, with_path

    if not path.is_file():
        raise MeshInputError(f"{path}: no such mesh file")
    from recon.export.mesh_checks import check_mesh_file

    # the chunk lengths, before trimesh allocates what they declare
    check_mesh_file(path, lambda p, problem: MeshInputError(f"{p}: not a readable mesh ({problem})"))
    try:
        loaded = trimesh.load(path, process=False)
    except Exception as err:  # trimesh raises many types for bad files
        raise MeshInputError(f"{path}: not a readable mesh ({err})") from err
    if isinstance(loaded, trimesh.Scene):
        geoms = [g for g in loaded.geometry.values() if isinstance(g, trimesh.Trimesh)]
        for g in geoms:  # before concatenating or indexing by them (trimesh does not check)
            require_indices(g.faces, len(g.vertices), path, "faces", with_path(MeshInputError))
        loaded = trimesh.util.concatenate(geoms) if geoms else None
    elif isinstance(loaded, trimesh.Trimesh):
        require_indices(loaded.faces, len(loaded.vertices), path, "faces", with_path(MeshInputError))
    if isinstance(loaded, trimesh.Trimesh) and len(loaded.faces):
        loaded = drop_duplicate_faces(loaded)
    check_mesh(loaded, path)
    return loaded


def drop_duplicate_faces(mesh):
    """``mesh`` without repeated triangles: a face whose three vertex positions an earlier face already has
    (in any order, so either orientation) is dropped, visuals kept in step (``update_faces``). Scans carry
    such copies (the Stanford dragon's vrip meshes: 1,052 of 47,794 faces at res3); they add nothing to the
    surface, but would fail the edge-manifold check and count twice in area samples. The number dropped
    is in ``metadata["duplicate_faces_dropped"]`` (make_dataset reports it)."""
    key = np.sort(_welded_faces(mesh), axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    keep = np.zeros(len(mesh.faces), bool)
    keep[first] = True
    dropped = int((~keep).sum())
    if dropped:
        mesh = mesh.copy()
        mesh.update_faces(keep)
    mesh.metadata["duplicate_faces_dropped"] = dropped
    return mesh


def check_mesh(mesh, path) -> None:
    """MeshInputError naming the failed check: triangles present, finite vertices, edge-manifold."""
    import trimesh

    if not isinstance(mesh, trimesh.Trimesh) or len(mesh.faces) == 0:
        raise MeshInputError(f"{path}: empty mesh (check 'has triangles' failed: no faces)")
    if not np.isfinite(mesh.vertices).all():
        raise MeshInputError(f"{path}: check 'finite vertices' failed (NaN or Inf coordinates)")
    area = mesh.area_faces
    if not area.sum() > 0:
        raise MeshInputError(f"{path}: empty mesh (check 'has area' failed: all faces are degenerate)")
    edges = _welded_edges(mesh)
    _, counts = np.unique(edges, axis=0, return_counts=True)
    if (counts > 2).any():
        raise MeshInputError(f"{path}: non-manifold mesh (check 'each edge in at most two faces' failed for "
                             f"{int((counts > 2).sum())} edges); repair it first (e.g. MeshLab's 'Repair non "
                             f"Manifold Edges') or use another mesh")


def _welded_faces(mesh) -> np.ndarray:
    """[F, 3] faces as indices of distinct vertex positions (UV seams split vertices in OBJ files;
    topology is about positions)."""
    _, inverse = np.unique(mesh.vertices.round(9), axis=0, return_inverse=True)
    return inverse.reshape(-1)[mesh.faces]


def _welded_edges(mesh) -> np.ndarray:
    """[3F, 2] sorted edges of :func:`_welded_faces`."""
    f = _welded_faces(mesh)
    e = np.concatenate([f[:, [0, 1]], f[:, [1, 2]], f[:, [2, 0]]])
    return np.sort(e, axis=1)


def normalisation(vertices: np.ndarray) -> np.ndarray:
    """[4, 4] mesh_to_world: bounding-box centre to the origin, farthest vertex at distance 1."""
    centre = 0.5 * (vertices.min(axis=0) + vertices.max(axis=0))
    scale = 1.0 / float(np.linalg.norm(vertices - centre, axis=1).max())
    m = np.eye(4)
    m[:3, :3] *= scale
    m[:3, 3] = -scale * centre
    return m


# ------------------------------------------------------------------------------ cameras

def sphere_cameras(count: int, rotation: float = 0.0) -> np.ndarray:
    """[count, 4, 4] OpenGL camera-to-world matrices on a Fibonacci sphere of radius CAMERA_RADIUS, looking
    at the origin, world z up; ``rotation`` (radians) turns the set about z."""
    i = np.arange(count) + 0.5
    phi = np.arccos(np.clip(1 - 2 * i / count, -1, 1))
    theta = math.pi * (1 + 5 ** 0.5) * i + rotation
    centres = CAMERA_RADIUS * np.stack([np.sin(phi) * np.cos(theta), np.sin(phi) * np.sin(theta), np.cos(phi)], 1)
    out = np.zeros((count, 4, 4))
    for k, c in enumerate(centres):
        back = c / np.linalg.norm(c)  # camera +z points away from the target (OpenGL)
        up_hint = np.array([0.0, 0.0, 1.0]) if abs(back[2]) < 0.999 else np.array([0.0, 1.0, 0.0])
        right = np.cross(up_hint, back)
        right /= np.linalg.norm(right)
        up = np.cross(back, right)
        out[k, :3, 0], out[k, :3, 1], out[k, :3, 2], out[k, :3, 3], out[k, 3, 3] = right, up, back, c, 1.0
    return out


# ------------------------------------------------------------------------------ shading

def bilinear(image: np.ndarray, uv: np.ndarray) -> np.ndarray:
    """[N, C] float samples of ``image`` [H, W, C] at ``uv`` [N, 2] (OBJ convention: v up, wrapped)."""
    h, w = image.shape[:2]
    x = (uv[:, 0] % 1.0) * w - 0.5
    y = (1.0 - uv[:, 1] % 1.0) * h - 0.5
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = (x - x0)[:, None], (y - y0)[:, None]
    img = image.astype(np.float64)

    def at(yy, xx):
        return img[np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]

    return ((1 - fx) * (1 - fy) * at(y0, x0) + fx * (1 - fy) * at(y0, x0 + 1)
            + (1 - fx) * fy * at(y0 + 1, x0) + fx * fy * at(y0 + 1, x0 + 1))


class MeshShader:
    """Albedo and shading normals of a (normalised) trimesh at ray hits (triangle id, barycentric u, v)."""

    def __init__(self, mesh):
        self.faces = mesh.faces
        self.vertex_normals = np.asarray(mesh.vertex_normals)
        self.uv, self.texture, self.vertex_colors = None, None, None
        visual = mesh.visual
        if getattr(visual, "kind", None) == "texture" and getattr(visual, "uv", None) is not None:
            image = getattr(visual.material, "image", None) or getattr(visual.material, "baseColorTexture", None)
            if image is not None:
                self.uv = np.asarray(visual.uv, dtype=np.float64)
                self.texture = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
        elif getattr(visual, "kind", None) == "vertex":
            self.vertex_colors = np.asarray(visual.vertex_colors, dtype=np.float64)[:, :3] / 255.0

    def _interp(self, values: np.ndarray, tri: np.ndarray, bu: np.ndarray, bv: np.ndarray) -> np.ndarray:
        f = self.faces[tri]
        return ((1 - bu - bv)[:, None] * values[f[:, 0]] + bu[:, None] * values[f[:, 1]]
                + bv[:, None] * values[f[:, 2]])

    def albedo(self, tri, bu, bv) -> np.ndarray:
        if self.texture is not None:
            return bilinear(self.texture, self._interp(self.uv, tri, bu, bv))
        if self.vertex_colors is not None:
            return self._interp(self.vertex_colors, tri, bu, bv)
        return np.full((len(tri), 3), 0.7)

    def normal(self, tri, bu, bv) -> np.ndarray:
        n = self._interp(self.vertex_normals, tri, bu, bv)
        return n / np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-12)


# ------------------------------------------------------------------------------ rendering

def cast_pixels(scene, c2w: np.ndarray, xs: np.ndarray, ys: np.ndarray, size: int) -> dict:
    """open3d hits of the rays through image points (xs, ys) [P] (pixel units, pixel centres at +0.5) of
    the camera c2w (OpenGL axes): {"t" [P] camera z (inf: no hit), "tri", "bary", "face_n"}."""
    o3c = open3d("mesh rendering").core

    f = 0.5 * size / math.tan(0.5 * FOV_X)
    # camera-frame directions (u, v, -1) with OpenGL axes and unit forward depth (t_hit is then the camera z
    # depth), turned to the world as u R[:, 0] + v R[:, 1] - R[:, 2]: element-wise, not a [P, 3] x [3, 3]
    # matrix product, which BLAS threads made 10x slower on a loaded machine
    u, v = ((xs - size / 2) / f).reshape(-1, 1), (-(ys - size / 2) / f).reshape(-1, 1)
    rot = c2w[:3, :3]
    rays = np.empty((len(u), 6), dtype=np.float32)
    rays[:, :3] = c2w[:3, 3]
    rays[:, 3:] = u * rot[:, 0] + v * rot[:, 1] - rot[:, 2]
    hit = scene.cast_rays(o3c.Tensor(rays))
    return {"t": hit["t_hit"].numpy(), "tri": hit["primitive_ids"].numpy().astype(np.int64),
            "bary": hit["primitive_uvs"].numpy().astype(np.float64),
            "face_n": hit["primitive_normals"].numpy().astype(np.float64)}


def shade(shader: MeshShader, hits: dict, ok: np.ndarray) -> np.ndarray:
    """[ok.sum(), 3] colours in [0, 1] of the hit rays ``ok``: albedo x Lambert (see the module docstring)."""
    tri, bary = hits["tri"][ok], hits["bary"][ok]
    n_shade = shader.normal(tri, bary[:, 0], bary[:, 1])
    light = AMBIENT + (1 - AMBIENT) * np.clip(n_shade @ LIGHT, 0, None)
    return np.clip(shader.albedo(tri, bary[:, 0], bary[:, 1]) * light[:, None], 0, 1)


def pixel_samples(scene, shader: MeshShader, c2w: np.ndarray, xs: np.ndarray, ys: np.ndarray, size: int,
                  samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(summed colour of the hit rays [P, 3], hit rays [P]) over ``samples`` x ``samples`` rays on a regular
    grid inside each pixel (centres ``xs``, ``ys`` [P]), cast and shaded in as few calls as keep each under
    :data:`RAYS_PER_CALL` rays (one call per view at 128 x 128 with 4 x 4 samples)."""
    offsets = (np.arange(samples) + 0.5) / samples - 0.5
    dy, dx = (g.ravel() for g in np.meshgrid(offsets, offsets, indexing="ij"))  # sample k: row k // s, column k % s
    p = len(xs)
    premul, cover = np.zeros((p, 3)), np.zeros(p)
    per_call = max(1, RAYS_PER_CALL // p)
    for k in range(0, samples * samples, per_call):
        ks = slice(k, min(k + per_call, samples * samples))
        m = ks.stop - ks.start
        hits = cast_pixels(scene, c2w, (xs[None] + dx[ks, None]).ravel(), (ys[None] + dy[ks, None]).ravel(), size)
        hit = np.isfinite(hits["t"])
        colour = np.zeros((m * p, 3))
        if hit.any():
            colour[hit] = shade(shader, hits, hit)
        premul += colour.reshape(m, p, 3).sum(axis=0)
        cover += hit.reshape(m, p).sum(axis=0)
    return premul, cover


def render_view(scene, shader: MeshShader, c2w: np.ndarray, size: int, samples: int = 1) -> dict:
    """{"rgba" uint8 [S, S, 4], "depth" uint16 [S, S], "normal" uint8 [S, S, 3]} of one camera (OpenGL c2w).

    Colour and alpha average ``samples`` x ``samples`` rays on a regular grid inside each pixel (a box
    filter, as a camera's pixel integrates light; colour stored straight, not premultiplied); depth and
    normal come from the ray through the pixel centre (:func:`pixel_samples` casts the colour rays)."""
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    centre = cast_pixels(scene, c2w, xs.ravel(), ys.ravel(), size)
    ok = np.isfinite(centre["t"])
    normal = np.zeros((size * size, 3))
    depth = np.zeros(size * size)
    if ok.any():
        face_n = centre["face_n"][ok]
        face_n /= np.maximum(np.linalg.norm(face_n, axis=1, keepdims=True), 1e-12)
        normal[ok] = (face_n + 1) / 2 * 255
        depth[ok] = centre["t"][ok] * DEPTH_SCALE
    if depth.max(initial=0) > 65535:
        raise MeshInputError("depth exceeds the 16-bit range; the scene is larger than expected")
    premul, cover = pixel_samples(scene, shader, c2w, xs.ravel(), ys.ravel(), size, samples)
    n = samples * samples
    alpha = cover / n
    rgb = np.where(cover[:, None] > 0, premul / np.maximum(cover, 1)[:, None], 0.0)
    rgba = np.concatenate([rgb, alpha[:, None]], 1) * 255
    return {"rgba": np.round(rgba).astype(np.uint8).reshape(size, size, 4),
            "depth": np.round(depth).astype(np.uint16).reshape(size, size),
            "normal": np.round(normal).astype(np.uint8).reshape(size, size, 3)}


def write_png(path: Path, array: np.ndarray) -> None:
    """Write ``array`` as PNG atomically (a temporary file renamed into place)."""
    import imageio.v3 as iio

    tmp = path.with_name(f".{path.name}.tmp")
    iio.imwrite(tmp, array, extension=".png")
    tmp.replace(path)


def write_split(out: Path, split: str, scene, shader, c2ws: np.ndarray, size: int, mesh_to_world: np.ndarray,
                progress, samples: int = 1, geometry: bool = True) -> None:
    """Render and write one split (``geometry`` False: colour images only, no depth and normal PNGs)."""
    (out / split).mkdir(parents=True, exist_ok=True)
    frames = []
    for k, c2w in enumerate(c2ws):
        images = render_view(scene, shader, c2w, size, samples)
        stem = out / split / f"r_{k}"
        write_png(stem.with_name(f"r_{k}.png"), images["rgba"])
        if geometry:
            write_png(stem.with_name(f"r_{k}_depth.png"), images["depth"])
            write_png(stem.with_name(f"r_{k}_normal.png"), images["normal"])
        frames.append({"file_path": f"./{split}/r_{k}", "rotation": 0.0, "transform_matrix": c2w.tolist()})
        progress()
    doc = {"camera_angle_x": FOV_X, "depth_scale": DEPTH_SCALE, "normal_frame": "world", "pixel_samples": samples,
           "mesh_to_world": mesh_to_world.tolist(), "frames": frames}
    atomic_write_bytes(out / f"transforms_{split}.json", json.dumps(doc, indent=2).encode(), force=True)


def check_scale(mesh, path, smallest: float = MIN_EXTENT, largest: float = MAX_EXTENT) -> None:
    """MeshInputError when the largest side of ``mesh``'s bounding box is outside [smallest, largest] (in
    the file's units): a collapsed mesh (all vertices at one point) or coordinates so large that float32
    rendering and training lose them (a unit mix-up or a corrupt file). ``make_dataset`` does not ask:
    ``splatforge mesh2splat`` does, for meshes nobody has looked at."""
    extent = float(np.ptp(np.asarray(mesh.vertices), axis=0).max())
    if not smallest <= extent <= largest:
        raise MeshInputError(f"{path}: absurd scale (check 'bounding box side in [{smallest:g}, {largest:g}]' "
                             f"failed: {extent:.3g}); rescale the mesh or leave it out")


def normalised_mesh(mesh):
    """(the mesh moved into the unit sphere (a copy), mesh_to_world [4, 4]) by :func:`normalisation`."""
    m2w = normalisation(np.asarray(mesh.vertices))
    mesh = mesh.copy()
    mesh.apply_transform(m2w)
    return mesh, m2w


def raycasting_scene(mesh):
    """An open3d ``RaycastingScene`` holding ``mesh``'s triangles (float32)."""
    o3d = open3d("mesh rendering")
    o3c = o3d.core
    scene = o3d.t.geometry.RaycastingScene()
    scene.add_triangles(o3c.Tensor(np.asarray(mesh.vertices, dtype=np.float32)),
                        o3c.Tensor(np.asarray(mesh.faces, dtype=np.uint32)))
    return scene


def check_render_args(views: int, size: int, samples: int) -> None:
    """MeshInputError for fewer than 1 view, images under 8 pixels or fewer than 1 ray per pixel side."""
    if views < 1 or size < 8:
        raise MeshInputError(f"--views {views} / --size {size}: need at least 1 view of at least 8 pixels")
    if samples < 1:
        raise MeshInputError(f"--samples {samples}: need at least 1 ray per pixel side")


def render_dataset(mesh, m2w: np.ndarray, out: Path, views: int, test_views: int, size: int,
                   progress=lambda: None, samples: int = DEFAULT_SAMPLES, geometry: bool = True) -> None:
    """Write the train and test splits of the normalised ``mesh`` (``m2w`` recorded) into ``out`` (depth and
    normal PNGs too unless ``geometry`` is False)."""
    check_render_args(views, size, samples)
    scene = raycasting_scene(mesh)
    shader = MeshShader(mesh)
    out.mkdir(parents=True, exist_ok=True)
    write_split(out, "train", scene, shader, sphere_cameras(views), size, m2w, progress, samples, geometry)
    write_split(out, "test", scene, shader, sphere_cameras(test_views, rotation=0.5), size, m2w, progress, samples,
                geometry)


def make_dataset(mesh_path: Path, out: Path, views: int = 100, test_views: int | None = None, size: int = 400,
                 progress=lambda: None, samples: int = DEFAULT_SAMPLES) -> dict:
    """Render the dataset; returns {"mesh_to_world", "train", "test"} (view counts)."""
    open3d("mesh rendering")
    check_render_args(views, size, samples)
    test_views = max(1, views // 5) if test_views is None else test_views
    mesh, m2w = normalised_mesh(load_mesh(Path(mesh_path)))
    render_dataset(mesh, m2w, Path(out), views, test_views, size, progress, samples)
    return {"mesh_to_world": m2w.tolist(), "train": views, "test": test_views,
            "duplicate_faces_dropped": mesh.metadata["duplicate_faces_dropped"]}

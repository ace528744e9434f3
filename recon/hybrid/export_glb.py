"""Export of an insertion for other engines: one GLB (posed assets, the scene's proxy mesh, a baked shadow),
the run's splat file beside it, and a manifest JSON saying how to draw them together.

``export_scene(out_glb, ...)`` writes, all atomically (nothing is left half-written):

- ``NAME.glb``: glTF scene (written with trimesh) whose root node ``run_world`` holds the matrix ``G`` (run world ->
  glTF axes, below) and, under it:
  - ``asset_K_<file>``: the K-th asset's geometry in its file frame (textures, vertex colours and colour
    factors kept), node matrix = the asset's pose (asset file frame -> run world, a 4x4 with uniform scale);
  - ``scene_proxy``: the scene's proxy mesh (run world coordinates) with its vertex colours darkened where an
    asset blocks the light (the baked shadow as vertex colours);
  - ``shadow_catcher``: the part of the proxy in shadow, subdivided, lifted a little along its normals, black
    with a per-vertex alpha = shadow strength (an alpha-blended material: texture ramp addressed by uv.x);
- ``NAME.splats.ply``: a copy of the run's splat file (3DGS PLY, run world coordinates; a NeRF run's is its
  baked Gaussian approximation);
- ``NAME.manifest.json``: file names, the frame conventions, each asset's pose as a 4x4 matrix (world and glTF),
  the lights, and the drawing order that reproduces the hybrid render's occlusion in an engine (meshes
  first writing depth, splats depth-tested without writing depth, then the shadow catcher multiplied on
  top), validated by :func:`validate_manifest`.

Axes. The run's world is whatever the dataset's cameras define (COLMAP: arbitrary, often y down). glTF is
+Y up, right-handed. ``G`` maps world to glTF through the scene's ground frame ``F = [e1, e2, up]`` (columns):
``G = A^T F^T`` with ``A`` the Y-up file -> ground matrix of :mod:`recon.hybrid.assets`; so the scene's up is
glTF +Y, and an asset posed with zero angles stands as it does in its file. The splats need the same ``G``
applied to stand in the GLB's frame (``manifest["splats"]["matrix_to_gltf"]``).

Shadow strength at a proxy point p: ``s(p) = (1 - ambient) * sum_l w_l [asset blocks the ray p -> light l]``,
``w_l`` = the light's intensity share (:meth:`recon.hybrid.raycast.MeshScene.occluded` on a scene of the
assets only, so the proxy does not shadow itself).
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Sequence

import numpy as np

from recon.core.atomic import atomic_write_bytes
from recon.hybrid.assets import Y_UP_TO_GROUND, Light, PlacedAsset

MANIFEST_FORMAT = "splatforge-hybrid-scene"
MANIFEST_VERSION = 1
ROOT_NODE = "run_world"  # trimesh calls its base frame "world": the root node needs another name
SHADOW_MIN = 1.0 / 255.0  # proxy vertices darker than this belong to the shadow catcher
CATCHER_SUBDIVISIONS = 2
CATCHER_LIFT = 1e-3  # of the proxy's diagonal, along the vertex normals (no z-fighting with the splats)


def export_paths(out_glb: str | Path) -> dict[str, Path]:
    """{"glb", "splats", "manifest"} paths written for ``out_glb`` (NAME.glb, NAME.splats.ply,
    NAME.manifest.json beside it)."""
    out_glb = Path(out_glb)
    stem = out_glb.with_suffix("")
    return {"glb": out_glb, "splats": stem.with_name(stem.name + ".splats.ply"),
            "manifest": stem.with_name(stem.name + ".manifest.json")}


def world_to_gltf(frame: np.ndarray) -> np.ndarray:
    """[4, 4] G = A^T F^T: run world -> glTF axes (scene up -> +Y) for the ground frame ``frame`` [3, 3]."""
    g = np.eye(4)
    g[:3, :3] = Y_UP_TO_GROUND.T @ np.asarray(frame, np.float64).T
    return g


# ------------------------------------------------------------------------------------------ shadow


def shadow_strength(points: np.ndarray, assets: Sequence[PlacedAsset], frame: np.ndarray, lights: Sequence[Light],
                    ambient: float, time: float | None = None) -> np.ndarray:
    """[P] shadow strength in [0, 1 - ambient] at world ``points`` [P, 3] (module docstring): light-weighted
    share of the lights that the assets block."""
    from recon.hybrid.raycast import MeshScene

    scene = MeshScene(assets, frame, time, proxy=None)
    weights = np.asarray([max(l.intensity, 0.0) * float(np.mean(l.color)) for l in lights], np.float64)
    if weights.sum() <= 0:
        return np.zeros(len(points))
    weights = weights / weights.sum()
    blocked = np.zeros(len(points))
    for w, light in zip(weights, lights):
        dirs, dist = light.toward(points)
        blocked += w * scene.occluded(points, np.ascontiguousarray(dirs), dist)
    return (1.0 - ambient) * blocked


def vertex_normals(vertices: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """[V, 3] area-weighted unit vertex normals (0 for unused vertices)."""
    tri = vertices[faces]
    n = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    out = np.zeros_like(vertices)
    for k in range(3):
        np.add.at(out, faces[:, k], n)
    length = np.linalg.norm(out, axis=1, keepdims=True)
    return np.where(length > 0, out / np.maximum(length, 1e-30), 0.0)


def shadow_catcher(vertices: np.ndarray, faces: np.ndarray, strength: np.ndarray, assets, frame, lights,
                   ambient: float, time=None, subdivisions: int = CATCHER_SUBDIVISIONS):
    """(vertices [V', 3], faces [F', 3], strength [V']) of the proxy faces touching a shadowed vertex (and
    their neighbours' ring), subdivided ``subdivisions`` times with the strength recomputed at the new
    vertices, lifted by CATCHER_LIFT x the diagonal along the normals. None when nothing is in shadow."""
    import trimesh

    shadowed = strength > SHADOW_MIN
    touched = shadowed[faces].any(axis=1)
    if not touched.any():
        return None
    ring = np.zeros(len(vertices), bool)
    ring[faces[touched].ravel()] = True
    keep = ring[faces].any(axis=1)
    sub = trimesh.Trimesh(vertices, faces[keep], process=False)
    sub.remove_unreferenced_vertices()
    v, f = np.asarray(sub.vertices), np.asarray(sub.faces)
    for _ in range(subdivisions):
        v, f = trimesh.remesh.subdivide(v, f)
    s = shadow_strength(v, assets, frame, lights, ambient, time)
    diag = float(np.linalg.norm(vertices.max(0) - vertices.min(0))) or 1.0
    v = v + CATCHER_LIFT * diag * vertex_normals(v, f)
    return v, f, s


# ------------------------------------------------------------------------------------------ trimesh


def _asset_meshes(asset: PlacedAsset) -> list:
    """trimesh.Trimesh per part in the asset's file frame, with its texture (PBR baseColorTexture), vertex
    colours or colour factor."""
    import trimesh
    from PIL import Image

    meshes = []
    for part in asset.mesh.parts:
        mesh = trimesh.Trimesh(part.vertices, part.faces, process=False)
        if part.texture is not None and part.uv is not None:
            image = Image.fromarray((np.clip(part.texture, 0, 1) * 255 + 0.5).astype(np.uint8))
            factor = [*np.clip(part.color, 0, 1).tolist(), 1.0]
            material = trimesh.visual.material.PBRMaterial(baseColorTexture=image, baseColorFactor=factor,
                                                           metallicFactor=0.0, roughnessFactor=1.0)
            mesh.visual = trimesh.visual.TextureVisuals(uv=part.uv, material=material)
        elif part.vertex_colors is not None:
            rgba = np.concatenate([part.vertex_colors, np.ones((len(part.vertex_colors), 1))], axis=1)
            mesh.visual = trimesh.visual.ColorVisuals(mesh, vertex_colors=(rgba * 255 + 0.5).astype(np.uint8))
        else:
            material = trimesh.visual.material.PBRMaterial(baseColorFactor=[*np.clip(part.color, 0, 1).tolist(), 1.0],
                                                           metallicFactor=0.0, roughnessFactor=1.0)
            mesh.visual = trimesh.visual.TextureVisuals(material=material)
        meshes.append(mesh)
    return meshes


def _ramp_material():
    """Alpha-blended black material whose alpha is read from a 256 x 1 ramp texture at uv.x."""
    import trimesh
    from PIL import Image

    ramp = np.zeros((1, 256, 4), np.uint8)
    ramp[0, :, 3] = np.arange(256)
    return trimesh.visual.material.PBRMaterial(name="shadow_catcher", baseColorTexture=Image.fromarray(ramp, "RGBA"),
                                               baseColorFactor=[1.0, 1.0, 1.0, 1.0], alphaMode="BLEND",
                                               metallicFactor=0.0, roughnessFactor=1.0, doubleSided=True)


def build_scene(assets: Sequence[PlacedAsset], frame: np.ndarray, lights: Sequence[Light],
                proxy: tuple[np.ndarray, np.ndarray] | None, proxy_colors: np.ndarray | None = None,
                ambient: float = 0.35, time: float | None = None):
    """(trimesh.Scene, info dict) of the export (module docstring); ``proxy_colors`` [V, 3] in [0, 1]
    (default grey)."""
    import trimesh

    g = world_to_gltf(frame)
    scene = trimesh.Scene()
    scene.graph.update(frame_to=ROOT_NODE, frame_from=scene.graph.base_frame, matrix=g)
    info: dict = {"assets": [], "proxy": None, "shadow_catcher": None}
    for k, asset in enumerate(assets):
        pose = asset.pose_at(time)
        m = pose.matrix(frame)
        node = f"asset_{k}_{Path(asset.mesh.name).stem}"
        names = []
        for p, mesh in enumerate(_asset_meshes(asset)):
            child = node if p == 0 and len(asset.mesh.parts) == 1 else f"{node}_part{p}"
            if child != node and node not in scene.graph.nodes:
                scene.graph.update(frame_to=node, frame_from=ROOT_NODE, matrix=m)
            scene.add_geometry(mesh, node_name=child, geom_name=child,
                               parent_node_name=node if child != node else ROOT_NODE,
                               transform=np.eye(4) if child != node else m)
            names.append(child)
        info["assets"].append({"node": node, "mesh_nodes": names, "pose": pose, "matrix": m})
    if proxy is not None and len(proxy[1]):
        v, f = np.asarray(proxy[0], np.float64), np.asarray(proxy[1], np.int64)
        strength = shadow_strength(v, assets, frame, lights, ambient, time)
        base = np.full((len(v), 3), 0.7) if proxy_colors is None else np.asarray(proxy_colors, np.float64)
        colours = np.clip(base * (1.0 - strength)[:, None], 0, 1)
        rgba = np.concatenate([colours, np.ones((len(v), 1))], axis=1)
        mesh = trimesh.Trimesh(v, f, process=False)
        mesh.visual = trimesh.visual.ColorVisuals(mesh, vertex_colors=(rgba * 255 + 0.5).astype(np.uint8))
        scene.add_geometry(mesh, node_name="scene_proxy", geom_name="scene_proxy", parent_node_name=ROOT_NODE)
        info["proxy"] = {"node": "scene_proxy", "vertices": int(len(v)), "faces": int(len(f)),
                         "shadowed_vertices": int((strength > SHADOW_MIN).sum())}
        catcher = shadow_catcher(v, f, strength, assets, frame, lights, ambient, time)
        if catcher is not None:
            cv, cf, cs = catcher
            uv = np.stack([np.clip(cs, 0, 1) * (255.0 / 256.0) + 0.5 / 256.0, np.full(len(cs), 0.5)], axis=1)
            mesh = trimesh.Trimesh(cv, cf, process=False)
            mesh.visual = trimesh.visual.TextureVisuals(uv=uv, material=_ramp_material())
            scene.add_geometry(mesh, node_name="shadow_catcher", geom_name="shadow_catcher", parent_node_name=ROOT_NODE)
            info["shadow_catcher"] = {"node": "shadow_catcher", "vertices": int(len(cv)), "faces": int(len(cf)),
                                      "max_strength": float(cs.max(initial=0.0))}
    return scene, info


# ------------------------------------------------------------------------------------------ manifest


def manifest(paths: dict[str, Path], info: dict, assets: Sequence[PlacedAsset], frame: np.ndarray,
             lights: Sequence[Light], ambient: float, splat_source: str | None, method: str) -> dict:
    """The manifest dict (see :func:`validate_manifest` for its required layout)."""
    g = world_to_gltf(frame)

    def mat(m):
        return [[float(x) for x in row] for row in np.asarray(m)]

    out_assets = []
    for a, rec in zip(assets, info["assets"]):
        out_assets.append({
            "node": rec["node"], "mesh_nodes": rec["mesh_nodes"], "source": a.mesh.name,
            "pose": {"translation": list(rec["pose"].translation), "yaw_pitch_roll_deg": [rec["pose"].yaw,
                     rec["pose"].pitch, rec["pose"].roll], "scale": rec["pose"].scale},
            "matrix_world": mat(rec["matrix"]), "matrix_gltf": mat(g @ rec["matrix"]),
            "material": {"kind": a.material.kind, "ior": a.material.ior if a.material.kind == "glass" else None},
            "keyframed": a.path is not None})
    out_lights = []
    for l in lights:
        d = None if l.direction is None else np.asarray(l.direction, np.float64)
        p = None if l.position is None else np.asarray(l.position, np.float64)
        out_lights.append({"kind": "directional" if l.kind == "sun" else "point",
                           "direction_to_light_world": None if d is None else d.tolist(),
                           "direction_to_light_gltf": None if d is None else (g[:3, :3] @ d).tolist(),
                           "position_world": None if p is None else p.tolist(),
                           "position_gltf": None if p is None else (g[:3, :3] @ p).tolist(),
                           "intensity": l.intensity, "color": list(l.color)})
    return {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION,
        "files": {"meshes": paths["glb"].name, "splats": paths["splats"].name if splat_source else None},
        "frames": {
            "root_node": ROOT_NODE,
            "world": "the training run's world frame (the dataset's cameras; units of the run)",
            "gltf": "+Y up, right-handed, metres = run units; the GLB root node run_world holds matrix_world_to_gltf",
            "matrix_world_to_gltf": mat(g), "ground_frame_columns_e1_e2_up": mat(frame),
            "asset_file_frame": "Y-up (glTF); matrix_world maps it to the run world, matrix_gltf to glTF axes",
            "matrices": "4x4 row-major nested lists, column vectors (p' = M @ [p, 1])"},
        "splats": {"file": paths["splats"].name if splat_source else None, "format": "3dgs-ply (Inria layout)",
                   "coordinates": "run world", "matrix_to_gltf": mat(g), "source_method": method,
                   "approximation": method == "nerf"},
        "assets": out_assets,
        "proxy": None if info["proxy"] is None else {**info["proxy"], "role": "shadow receiver (vertex colours hold "
                                                     "the baked shadow); not drawn over the splats, no depth write"},
        "shadow_catcher": None if info["shadow_catcher"] is None else {
            **info["shadow_catcher"], "blend": "alpha (black, alpha = shadow strength): dst * (1 - alpha)",
            "alpha_source": "baseColorTexture ramp at uv.x"},
        "lights": out_lights, "ambient": ambient,
        "draw_order": [
            {"pass": 1, "what": "assets", "nodes": [a["node"] for a in out_assets], "depth_test": True,
             "depth_write": True, "blend": "opaque"},
            {"pass": 2, "what": "splats", "depth_test": True, "depth_write": False,
             "blend": "premultiplied alpha, sorted back to front",
             "why": "splats in front of a mesh cover it, splats behind it fail the depth test (mesh first, splats "
                    "depth-tested)"},
            {"pass": 3, "what": "shadow_catcher", "nodes": ["shadow_catcher"], "depth_test": True,
             "depth_write": False, "blend": "alpha over what is drawn (darkens the splats where assets block the "
                                            "light)"}],
    }


def validate_manifest(data: dict) -> None:
    """ValueError naming the first missing or malformed entry of a manifest dict."""
    def need(cond, what):
        if not cond:
            raise ValueError(f"manifest: {what}")

    need(isinstance(data, dict) and data.get("format") == MANIFEST_FORMAT, f"'format' must be {MANIFEST_FORMAT!r}")
    need(data.get("version") == MANIFEST_VERSION, f"'version' must be {MANIFEST_VERSION}")
    need(isinstance(data.get("files"), dict) and str(data["files"].get("meshes", "")).endswith(".glb"),
         "'files.meshes' must name the .glb")

    def is_matrix(m):
        a = np.asarray(m, dtype=np.float64) if isinstance(m, list) else None
        return a is not None and a.shape == (4, 4) and np.all(np.isfinite(a)) and np.allclose(a[3], [0, 0, 0, 1])

    need(is_matrix(data.get("frames", {}).get("matrix_world_to_gltf")), "'frames.matrix_world_to_gltf' must be 4x4")
    assets = data.get("assets")
    need(isinstance(assets, list) and assets, "'assets' must be a non-empty list")
    for i, a in enumerate(assets):
        need(isinstance(a, dict) and isinstance(a.get("node"), str), f"assets[{i}].node must be a string")
        need(is_matrix(a.get("matrix_world")) and is_matrix(a.get("matrix_gltf")), f"assets[{i}] needs 4x4 matrices")
        need(a.get("material", {}).get("kind") in ("diffuse", "mirror", "glass"), f"assets[{i}].material.kind")
    for i, l in enumerate(data.get("lights", [])):
        need(l.get("kind") in ("directional", "point"), f"lights[{i}].kind")
    order = data.get("draw_order")
    need(isinstance(order, list) and [p.get("what") for p in order][:2] == ["assets", "splats"],
         "'draw_order' must draw the assets first, then the splats")
    need(order[0].get("depth_write") is True and order[1].get("depth_test") is True and
         order[1].get("depth_write") is False, "'draw_order': meshes write depth, splats are depth-tested only")
    if data.get("files", {}).get("splats") is not None:
        need(is_matrix(data.get("splats", {}).get("matrix_to_gltf")), "'splats.matrix_to_gltf' must be 4x4")


# ------------------------------------------------------------------------------------------ writing


def export_scene(out_glb: str | Path, assets: Sequence[PlacedAsset], frame: np.ndarray, lights: Sequence[Light],
                 proxy: tuple[np.ndarray, np.ndarray] | None, splats_file: str | Path | None,
                 proxy_colors: np.ndarray | None = None, ambient: float = 0.35, method: str = "3dgs",
                 force: bool = False, time: float | None = None) -> list[Path]:
    """Write NAME.glb, NAME.splats.ply (a copy of ``splats_file``, when given) and NAME.manifest.json;
    returns the paths written. Existing outputs are refused unless ``force``."""
    from recon.core.atomic import refuse_overwrite

    paths = export_paths(out_glb)
    for key, path in paths.items():
        if key != "splats" or splats_file is not None:
            refuse_overwrite(path, force)
    scene, info = build_scene(assets, frame, lights, proxy, proxy_colors, ambient, time)
    data = manifest(paths, info, assets, frame, lights, ambient, None if splats_file is None else str(splats_file),
                    method)
    validate_manifest(data)
    glb = scene.export(file_type="glb")
    atomic_write_bytes(paths["glb"], glb, force=force)
    written = [paths["glb"]]
    if splats_file is not None:
        with open(splats_file, "rb") as src:
            buf = io.BytesIO()
            shutil.copyfileobj(src, buf)
        atomic_write_bytes(paths["splats"], buf.getvalue(), force=force)
        written.append(paths["splats"])
    atomic_write_bytes(paths["manifest"], (json.dumps(data, indent=1) + "\n").encode(), force=force)
    written.append(paths["manifest"])
    return written


def export_run_scene(out_glb: str | Path, run, assets, lights, frame, proxy, ambient: float = 0.35,
                     force: bool = False, time: float | None = None) -> list[Path]:
    """:func:`export_scene` for a run folder: its splats.ply and the proxy's vertex colours (RUN/hybrid/proxy.ply
    when it has them)."""
    colours = None
    cached = Path(run.dir) / "hybrid" / "proxy.ply"
    if proxy is not None and cached.is_file():
        import trimesh

        mesh = trimesh.load(str(cached), process=False, force="mesh")
        if getattr(mesh.visual, "kind", None) == "vertex" and len(mesh.vertices) == len(proxy[0]):
            colours = np.asarray(mesh.visual.vertex_colors, np.float64)[:, :3] / 255.0
    splats = run.splats_path if run.splats_path.is_file() else None
    return export_scene(out_glb, assets, frame, lights, proxy, splats, colours, ambient, run.config.method, force,
                        time)

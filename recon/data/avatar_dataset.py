"""Write a multi-view, multi-pose avatar dataset: a textured mesh rigged with a procedural bone chain, posed
and rendered (the core of ``scripts/make_avatar_dataset.py``; the layout is docs/avatars.md's, read back by
:mod:`recon.data.avatar`).

The mesh is normalised as :mod:`recon.data.mesh_render` does (unit sphere), rigged by
:func:`recon.avatar.bone_chain.bone_chain` (or given a skin file; a rigged GLB brings its own skin, read by
:mod:`recon.data.skinned_glb`, its skeleton moved into the unit sphere with the mesh), and posed N + U times by
:func:`recon.avatar.bone_chain.random_poses` (bends across the chain; the first N poses are for training,
the last U are held out, "unseen"). Each pose is rendered by every one of V cameras on a Fibonacci sphere
(:func:`recon.data.mesh_render.sphere_cameras`) with the mesh renderer (texture x Lambert, antialiased by
``samples`` x ``samples`` rays per pixel). With ``corrective`` A > 0 every posed mesh also bulges along its
normals near each bent joint (:mod:`recon.avatar.correctives`), a pose-dependent deformation plain linear
blend skinning (what ``--method meshgs`` does) cannot produce: the capture the pose MLP is for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from recon.avatar.bone_chain import bone_chain, principal_axes, random_poses
from recon.avatar.correctives import CORRECTIVE_SIGMA, apply_corrective, bulge_heights
from recon.avatar.skin_file import Skin, pose_record, read_skin, write_skin
from recon.avatar.skinning import Skeleton, pose_vertices
from recon.core.atomic import atomic_write_bytes
from recon.data.mesh_render import (FOV_X, DEFAULT_SAMPLES, MeshInputError, MeshShader, check_mesh,
                                    check_render_args, load_mesh, normalised_mesh, raycasting_scene, render_view,
                                    sphere_cameras, write_png)
from recon.data.skinned_glb import is_glb_path, read_skinned_glb

TEMPLATE_FILE, SKIN_FILE, POSES_FILE, CAMERAS_FILE, IMAGES_DIR = ("template.obj", "skin.json", "poses.json",
                                                                  "cameras.json", "images")
POSES_FORMAT, CAMERAS_FORMAT = "splatforge-avatar-poses", "splatforge-avatar-cameras"
MAX_BEND_DEG = 25.0  # bend of each non-root joint, uniform in [-max, max] degrees
TEST_CAMERA_EVERY = 4  # camera k is a test camera when k % 4 == 0


def image_relpath(pose: str, camera: str) -> str:
    """The image of ``camera`` in ``pose``, relative to the dataset folder."""
    return f"{IMAGES_DIR}/{pose}/{camera}.png"


def write_template(path: Path, vertices: np.ndarray, faces: np.ndarray) -> None:
    """The rest-pose mesh as an OBJ (geometry only, vertex order = the skin's rows), written atomically."""
    lines = [f"v {x:.8f} {y:.8f} {z:.8f}" for x, y, z in vertices]
    lines += [f"f {a + 1} {b + 1} {c + 1}" for a, b, c in faces]
    atomic_write_bytes(path, ("\n".join(lines) + "\n").encode(), force=True)


def rig(vertices: np.ndarray, skin_path: Path | None, per_side: int) -> Skin:
    """The skin of the normalised mesh: read from ``skin_path`` (its vertex count must match), else a
    procedural bone chain."""
    if skin_path is not None:
        return read_skin(skin_path, len(vertices))
    skeleton, weights = bone_chain(vertices, per_side)
    return Skin(skeleton, torch.tensor(weights))


def rigged_glb_mesh(path: Path) -> tuple[object, Skin]:
    """(trimesh of the rigged GLB's template, its skin): the vertices, faces and skin as
    :func:`recon.data.skinned_glb.read_skinned_glb` reads them (splatforge axes); the texture or vertex colours
    trimesh finds in the file are kept when trimesh's mesh has the same faces (one primitive), else the render
    is untextured."""
    import trimesh

    rig = read_skinned_glb(path)
    vertices, faces = rig.vertices.double().numpy(), rig.faces.numpy()
    visual = None
    try:
        loaded = load_mesh(Path(path))
        if len(loaded.vertices) == len(vertices) and np.array_equal(np.asarray(loaded.faces), faces):
            visual = loaded.visual.copy()
    except MeshInputError:
        pass  # trimesh cannot read it: the template alone is enough to render (untextured)
    mesh = trimesh.Trimesh(vertices, faces, visual=visual, process=False)
    check_mesh(mesh, path)
    return mesh, rig.skin


def moved_skin(skin: Skin, m2w: np.ndarray) -> Skin:
    """``skin`` with its joints' rest positions moved by the similarity ``m2w`` [4, 4] (scale and translation:
    joint rotations and weights do not change)."""
    rest = skin.skeleton.rest_positions.double().numpy() @ m2w[:3, :3].T + m2w[:3, 3]
    skeleton = Skeleton(skin.skeleton.parents, torch.tensor(rest, dtype=torch.float32), list(skin.skeleton.names))
    return Skin(skeleton, skin.weights)


def make_avatar_dataset(mesh_path: Path, out: Path, poses: int = 8, unseen: int = 4, views: int = 24,
                        size: int = 200, samples: int = DEFAULT_SAMPLES, seed: int = 0, per_side: int = 2,
                        skin_path: Path | None = None, progress: Callable[[], None] = lambda: None,
                        corrective: float = 0.0) -> dict:
    """Render the dataset into ``out`` (layout: docs/avatars.md); returns a summary dict. ``corrective``:
    the bulge height per radian of bend (:mod:`recon.avatar.correctives`; 0: plain skinning)."""
    check_render_args(views, size, samples)
    if poses < 1 or unseen < 0:
        raise MeshInputError(f"--poses {poses} / --unseen {unseen}: need at least 1 training pose and no "
                             f"negative count of unseen poses")
    if not 0.0 <= corrective <= 1.0:
        raise MeshInputError(f"--corrective {corrective}: the bulge per radian of bend must be in [0, 1] "
                             f"(fractions of the mesh's bounding radius; 0: plain skinning)")
    if is_glb_path(mesh_path):  # a rigged GLB: its own skin, moved into the unit sphere with the mesh
        if skin_path is not None:
            raise MeshInputError(f"--skin {skin_path}: {mesh_path} is a rigged GLB, which holds its skin; leave "
                                 f"--skin out")
        glb_mesh, glb_skin = rigged_glb_mesh(Path(mesh_path))
        mesh, m2w = normalised_mesh(glb_mesh)
        rest = np.asarray(mesh.vertices, dtype=np.float64)
        skin = moved_skin(glb_skin, m2w)
    else:
        mesh, m2w = normalised_mesh(load_mesh(Path(mesh_path)))
        rest = np.asarray(mesh.vertices, dtype=np.float64)
        skin = rig(rest, skin_path, per_side)
    _, axes = principal_axes(rest)
    rng = np.random.default_rng(seed)
    rotations = random_poses(skin.skeleton, poses + unseen, MAX_BEND_DEG, axes[1:], rng)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_template(out / TEMPLATE_FILE, rest, np.asarray(mesh.faces))
    write_skin(out / SKIN_FILE, skin)
    c2ws = sphere_cameras(views)
    cameras = [{"name": f"cam_{k:02d}", "split": "test" if k % TEST_CAMERA_EVERY == 0 else "train",
                "transform_matrix": c2w.tolist()} for k, c2w in enumerate(c2ws)]
    records, largest_bulge = [], 0.0
    rest_t = torch.tensor(rest, dtype=torch.float64)
    for p in range(poses + unseen):
        name = f"pose_{p:03d}"
        posed = mesh.copy()
        posed.vertices = pose_vertices(skin.skeleton, rest_t, skin.weights.double(),
                                       torch.tensor(rotations[p])).numpy()
        if corrective > 0:
            heights = bulge_heights(rest_t, skin.skeleton.rest_positions.double(), torch.tensor(rotations[p]),
                                    corrective)
            posed.vertices = apply_corrective(torch.tensor(posed.vertices), torch.tensor(posed.vertex_normals),
                                              heights).numpy()
            largest_bulge = max(largest_bulge, float(heights.max()))
        scene, shader = raycasting_scene(posed), MeshShader(posed)
        (out / IMAGES_DIR / name).mkdir(parents=True, exist_ok=True)
        for cam, c2w in zip(cameras, c2ws):
            write_png(out / image_relpath(name, cam["name"]), render_view(scene, shader, c2w, size, samples)["rgba"])
            progress()
        records.append({"name": name, "split": "train" if p < poses else "unseen",
                        **pose_record(rotations[p], np.zeros(3))})
    atomic_write_bytes(out / CAMERAS_FILE, json.dumps(
        {"format": CAMERAS_FORMAT, "version": 1, "camera_angle_x": FOV_X, "width": size, "height": size,
         "cameras": cameras}, indent=1).encode(), force=True)
    # poses.json last: the loader detects the dataset by it, so an interrupted run is not taken as complete
    atomic_write_bytes(out / POSES_FILE, json.dumps(
        {"format": POSES_FORMAT, "version": 1, "num_joints": skin.num_joints, "mesh_to_world": m2w.tolist(),
         "corrective": {"amplitude": corrective, "sigma": CORRECTIVE_SIGMA}, "poses": records},
        indent=1).encode(), force=True)
    return {"out": str(out), "vertices": len(rest), "triangles": int(len(mesh.faces)), "joints": skin.num_joints,
            "train_poses": poses, "unseen_poses": unseen, "views": views, "size": size,
            "corrective": corrective, "largest_bulge": round(largest_bulge, 6)}

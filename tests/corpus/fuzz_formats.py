"""Good files and readers for the formats ``scripts/fuzz_readers.py`` fuzzes beyond the splat formats: COLMAP
models (binary and text, each file), checkpoints, run-folder metadata (config.yaml, history.json, metrics.json,
the hybrid renderer's cached proxy.ply), blocks.json, 4D sequence manifests, LOD exports' manifest.json,
meshes (the readers of ``insert`` / ``mesh2splat``, ``sdf fit`` and mesh datasets), Neural 3D Video
(poses_bounds.npy and the camNN.mp4 videos), D-NeRF and Panoptic metadata.

Each format is ``(good bytes, reader of a path, suffix)`` like the others. Most of these files live in a
folder beside others (a dataset, a run folder): :func:`in_folder` builds that folder once per process from a
template and puts the case's bytes (or special entry) under the file's name in a fresh copy, then calls the
loader on the folder, so a case exercises the whole load (cameras checked, every image or video frame
decoded), not only the parse.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

W, H = 24, 16
_TEMPLATES: dict[str, Path] = {}


# ------------------------------------------------------------------------------------------ folders


def _template(name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``build`` makes, built once per process under a temporary folder removed at exit."""
    if name not in _TEMPLATES:
        import atexit

        base = Path(tempfile.mkdtemp(prefix=f"fuzz-{name}-"))
        atexit.register(shutil.rmtree, base, True)
        build(base / "folder")
        _TEMPLATES[name] = base / "folder"
    return _TEMPLATES[name]


def in_folder(template: str, build: Callable[[Path], None], rel: str, read: Callable[[Path], object]):
    """A reader of the case at ``path``: a copy of the template folder (``build``) gets it as ``rel``
    (bytes moved there, a special entry linked), then ``read(folder)``."""
    def place(path: Path) -> Path:
        """The fresh copy of the template folder holding the case at ``path`` as ``rel``."""
        folder = path.parent / "folder"
        shutil.copytree(_template(template, build), folder, symlinks=True)
        target = folder / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        if path.is_file() and not path.is_symlink():
            os.replace(path, target)
        else:
            os.symlink(os.readlink(path) if path.is_symlink() else path.resolve(), target)
        return folder

    def reader(path: Path):
        return read(place(path))

    reader.place = place  # the CLI tests hand the folder to a command instead
    return reader


def good_from(template: str, build: Callable[[Path], None], rel: str) -> Callable[[], bytes]:
    return lambda: (_template(template, build) / rel).read_bytes()


def load_all(folder: Path):
    """The dataset in ``folder`` loaded (derived images cached beside it) with every frame's image decoded:
    what training reads."""
    from recon.data import load_scene
    from recon.data.frame_images import frame_rgba
    from recon.data.video_frames import cached_video_frame

    scene = load_scene(folder, cache_dir=folder.parent / "cache")
    for frame in scene.frames_train + scene.frames_test:
        if frame.video_frame is None or cached_video_frame(frame) is None:  # video frames: decoded at load
            frame_rgba(frame)
    return scene


def _png(path: Path, size=(W, H), seed: int = 0) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    rgb = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(rgb).save(path)


def _cameras(n: int):
    from recon.data.procedural import orbit_cameras

    return list(orbit_cameras(n, 4.0, W, H, 0.9))


# ------------------------------------------------------------------------------------------- COLMAP


def build_colmap(ext: str) -> Callable[[Path], None]:
    """A COLMAP dataset (``ext`` .bin or .txt): 3 images, a PINHOLE and an OPENCV camera (mild distortion:
    undistorted at load), 12 points with tracks and 2D points."""
    def build(root: Path) -> None:
        from rasterizer.quaternions import rotmat_to_quat
        from recon.data.colmap import ColmapCamera, ColmapImage, ColmapModel, ColmapPoints, write_model

        rng = np.random.default_rng(1)
        cams = {1: ColmapCamera(1, "PINHOLE", W, H, np.array([20.0, 21.0, W / 2, H / 2])),
                2: ColmapCamera(2, "OPENCV", W, H, np.array([20.0, 20.0, W / 2, H / 2, 0.01, -0.005, 0.0, 0.0]))}
        images = {}
        for i, cam in enumerate(_cameras(3), start=1):
            w2c = cam.world_to_cam.double().numpy()
            q = np.asarray(rotmat_to_quat(w2c[:3, :3]), np.float64)
            xys = rng.uniform(0, W, (4, 2))
            images[i] = ColmapImage(i, q, w2c[:3, 3].copy(), 1 + i % 2, f"im_{i}.png", xys,
                                    np.array([i, -1, 3, 4], np.int64))
            _png(root / "images" / f"im_{i}.png", seed=i)
        n = 12
        tracks = [np.array([[1 + j % 3, j % 4]], np.int64) for j in range(n)]
        points = ColmapPoints(np.arange(1, n + 1, dtype=np.int64), rng.normal(size=(n, 3)),
                              rng.integers(0, 256, (n, 3)).astype(np.uint8), rng.uniform(0, 2, n), tracks)
        write_model(ColmapModel(cams, images, points), root / "sparse" / "0", ext)

    return build


def colmap_format(name: str, ext: str):
    rel = f"sparse/0/{name}{ext}"
    return (good_from(f"colmap{ext}", build_colmap(ext), rel), in_folder(f"colmap{ext}", build_colmap(ext), rel, load_all),
            ext)


# ---------------------------------------------------------------------------------------- run folder


def _splats():
    from recon.core.splat_data import random_splats

    return random_splats(16, sh_degree=1)


def build_run(root: Path) -> None:
    """A 3dgs run folder: config.yaml, a step-10 checkpoint (model, strategy state, rng, history), history.json,
    metrics.json."""
    import torch

    from recon.models.gaussians import GaussianModel
    from recon.outputs import files as rf
    from recon.outputs.history import RunHistory
    from recon.training.trainer import TrainConfig

    root.mkdir(parents=True)
    rf.write_config(root, TrainConfig(data=Path("procedural"), out=root, steps=10))
    model = GaussianModel.from_splat_data(_splats(), extent=1.0)
    history = RunHistory()
    for step in range(10):
        history.record_step(0.5 / (step + 1), 16, 0.01, 20.0 + step)
    history.record_eval(10, 25.0, 0.9)
    payload = {"step": 10, "model": model.state_dict(), "strategy_state": {"grad2d": torch.zeros(16)},
               "rng": {"torch": torch.get_rng_state(), "view": torch.Generator().get_state(), "cuda": None},
               "history": history.to_dict(), "train_seconds": 1.5}
    rf.save_checkpoint(root, 10, payload)
    rf.write_history(root, history)
    rf.write_json(root / rf.METRICS_FILE, {"psnr": 25.0, "ssim": 0.9, "lpips": None, "num_gaussians": 16,
                                          "train_seconds": 1.5, "per_view": [{"name": "r_0", "psnr": 25.0}]})


def read_run_checkpoint(folder: Path):
    """What `render` / `eval` / `view` read of an unfinished run: its newest checkpoint's model and history."""
    from recon.run.folder import Run

    run = Run.open(folder)
    return run.checkpoint_model(), run.history()


def read_run_config(folder: Path):
    from recon.run.folder import Run

    return Run.open(folder).config


def read_run_history(folder: Path):
    from recon.run.folder import Run

    return Run.open(folder).history()


def read_run_metrics(folder: Path):
    from recon.run.folder import Run

    return Run.open(folder).metrics()


def run_format(rel: str, read: Callable[[Path], object], suffix: str):
    return good_from("run", build_run, rel), in_folder("run", build_run, rel, read), suffix


# ---------------------------------------------------------------------------------- blocks, sequences


def good_blocks() -> bytes:
    from recon.distributed.partition import Block, Partition, RobustBox

    blocks = [Block(i, [[i - 1.0, -1.0], [float(i), 1.0]], [[i - 1.0, -1.0], [float(i), 1.0]],
                    [[i - 1.2, -1.2], [i + 0.2, 1.2]], [f"r_{j}" for j in range(4)], ["r_9"], 100)
              for i in range(2)]
    part = Partition({"path": "/data/x", "fingerprint": "abc123", "num_train": 4}, np.array([0.0, 0.0, 1.0]),
                     np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]),
                     RobustBox(np.array([-1.0, -1.0]), np.array([1.0, 1.0]), (-0.5, 0.5)),
                     {"overlap": 0.2, "visibility": 0.25}, blocks)
    return (json.dumps(part.to_dict(), indent=1) + "\n").encode()


def read_blocks(path: Path):
    from recon.distributed.partition import Partition

    return Partition.read(path)


def build_sequence(root: Path) -> None:
    from recon.core.splat_data import random_splats
    from recon.export.sequence import write_sequence

    write_sequence(root, [random_splats(8, sh_degree=0, seed=s) for s in range(3)], fps=10.0, format="splat")


def read_sequence_frames(folder: Path):
    from recon.export.sequence import read_sequence

    manifest = read_sequence(folder)
    return [data for _, data in manifest]


# -------------------------------------------------------------------------------------------- meshes


def _mesh(kind: str) -> bytes:
    import trimesh

    mesh = trimesh.creation.icosphere(subdivisions=1)
    mesh.visual.vertex_colors = np.tile(np.array([200, 100, 50, 255], np.uint8), (len(mesh.vertices), 1))
    return mesh.export(file_type=kind)


def good_obj() -> bytes:
    data = _mesh("obj")
    return data.encode() if isinstance(data, str) else data


def read_asset(path: Path):
    """`insert` / `mesh2splat`'s mesh reader (recon/hybrid/assets.py)."""
    from recon.hybrid.assets import load_mesh

    return load_mesh(path)


def read_closed_mesh(path: Path):
    """`sdf fit`'s mesh reader."""
    from types import SimpleNamespace

    from recon.geometry.sdf_fit import load_closed_mesh

    vertices, faces, notes = load_closed_mesh(path)
    return SimpleNamespace(vertices=vertices, faces=faces, notes=notes)


def read_dataset_mesh(path: Path):
    """The mesh dataset maker's reader (recon/data/mesh_render.py; `mesh2splat`)."""
    from recon.data.mesh_render import load_mesh

    return load_mesh(path)


# ------------------------------------------------------------------------------- dynamic datasets


def build_dnerf(root: Path) -> None:
    """A D-NeRF folder: Blender transforms with a per-frame time, 3 train / 1 test views."""
    from tests.corpus.bad_files import gl_c2w

    cams = _cameras(4)
    for split, idx in (("train", range(3)), ("test", [3])):
        frames = []
        for k, i in enumerate(idx):
            _png(root / split / f"r_{k}.png", seed=i)
            frames.append({"file_path": f"./{split}/r_{k}", "time": i / 3.0,
                           "transform_matrix": gl_c2w(cams[i].world_to_cam.double().numpy())})
        (root / f"transforms_{split}.json").write_text(json.dumps({"camera_angle_x": 0.9, "frames": frames},
                                                                  indent=1))


def build_panoptic(root: Path) -> None:
    """A Panoptic folder (Dynamic 3D Gaussians' layout): 2 train cameras and 1 test camera x 3 time steps."""
    cams = _cameras(3)
    for split, idx in (("train", [0, 1]), ("test", [2])):
        meta = {"w": W, "h": H, "k": [], "w2c": [], "fn": [], "cam_id": []}
        for k in range(3):
            meta["k"].append([cams[i].K.tolist() for i in idx])
            meta["w2c"].append([cams[i].world_to_cam.tolist() for i in idx])
            meta["fn"].append([f"{i}/{k:06d}.jpg" for i in idx])
            meta["cam_id"].append(list(idx))
            for i in idx:
                out = root / "ims" / str(i) / f"{k:06d}.jpg"
                out.parent.mkdir(parents=True, exist_ok=True)
                from PIL import Image

                Image.new("RGB", (W, H), (40 * i, 60, 20 * k)).save(out, quality=90)
        (root / f"{split}_meta.json").write_text(json.dumps(meta))


N3DV_SIZE = 32  # pixels: yuv420 video needs even sizes; macro blocks of 16


def _to_llff(w2c: np.ndarray, focal: float) -> np.ndarray:
    c2w = np.linalg.inv(w2c)
    right, down, fwd, centre = c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3]
    pose = np.stack([down, right, -fwd, centre, [N3DV_SIZE, N3DV_SIZE, focal]], axis=1)
    return np.concatenate([pose.ravel(), [0.5, 8.0]])


def build_n3dv(root: Path) -> None:
    """A Neural 3D Video folder: cam00 (test) .. cam02, 4 frames of 32x32 at 10 frames/s, poses_bounds.npy."""
    import imageio.v3 as iio

    from recon.data.procedural import orbit_cameras

    root.mkdir(parents=True)
    cams = list(orbit_cameras(3, 4.0, N3DV_SIZE, N3DV_SIZE, 0.9))
    rng = np.random.default_rng(3)
    for j in range(3):
        video = rng.integers(0, 256, (4, N3DV_SIZE, N3DV_SIZE, 3), dtype=np.uint8)
        iio.imwrite(root / f"cam{j:02d}.mp4", video, plugin="FFMPEG", fps=10, codec="libx264", quality=5,
                    macro_block_size=16)
    np.save(root / "poses_bounds.npy", np.stack([_to_llff(c.world_to_cam.double().numpy(), float(c.K[0, 0]))
                                                 for c in cams]))


def good_proxy() -> bytes:
    """RUN/hybrid/proxy.ply as the hybrid renderer caches it (recon.geometry.mesh_extraction.mesh_bytes)."""
    import trimesh

    from recon.geometry import mesh_extraction as mx

    sphere = trimesh.creation.icosphere(subdivisions=1)
    colors = np.random.default_rng(4).uniform(0, 1, (len(sphere.vertices), 3)).astype(np.float32)
    return mx.mesh_bytes(mx.MeshArrays(np.asarray(sphere.vertices), np.asarray(sphere.faces, np.int64), colors), "ply")


def read_proxy(path: Path):
    from recon.hybrid.proxy import read_proxy as read

    return read(path)


def build_lod(root: Path) -> None:
    """An LOD export (docs/lod.md) of 300 Gaussians: manifest.json and its SPZ chunks."""
    from recon.lod.export_lod import write_lod
    from recon.lod.hierarchy import build_hierarchy
    from tests.recon.lod.scenes import small_model

    write_lod(build_hierarchy(small_model(300, seed=1), depth=6), root, view_budget=200, chunk_size=100,
              progress=False)


def read_lod_levels(folder: Path):
    """What the viewer reads of an LOD export: the checked manifest, the chunk files' sizes, every level."""
    from recon.lod.export_lod import LodExport

    lod = LodExport(folder)
    lod.check_files()
    return [lod.read_level(level) for level in range(len(lod.manifest.levels))]


def formats() -> dict[str, tuple[Callable[[], bytes], Callable[[Path], object], str]]:
    """{format: (good bytes, reader of a path, suffix)} of the formats this module adds."""
    table = {}
    for ext in (".bin", ".txt"):
        for name in ("cameras", "images", "points3D"):
            table[f"colmap-{name}{ext}"] = colmap_format(name, ext)
    table["checkpoint"] = run_format("checkpoints/ckpt_00010.pt", read_run_checkpoint, ".pt")
    table["config-yaml"] = run_format("config.yaml", read_run_config, ".yaml")
    table["history-json"] = run_format("history.json", read_run_history, ".json")
    table["metrics-json"] = run_format("metrics.json", read_run_metrics, ".json")
    table["blocks-json"] = (good_blocks, read_blocks, ".json")
    table["sequence-manifest"] = (good_from("sequence", build_sequence, "manifest.json"),
                                  in_folder("sequence", build_sequence, "manifest.json", read_sequence_frames), ".json")
    table["lod-manifest"] = (good_from("lod", build_lod, "manifest.json"),
                             in_folder("lod", build_lod, "manifest.json", read_lod_levels), ".json")
    table["mesh-obj"] = (good_obj, read_asset, ".obj")
    table["mesh-ply"] = (lambda: _mesh("ply"), read_asset, ".ply")
    table["mesh-glb"] = (lambda: _mesh("glb"), read_asset, ".glb")
    table["mesh-obj-sdf"] = (good_obj, read_closed_mesh, ".obj")
    table["mesh-ply-dataset"] = (lambda: _mesh("ply"), read_dataset_mesh, ".ply")
    table["proxy-ply"] = (good_proxy, read_proxy, ".ply")
    table["dnerf-transforms"] = (good_from("dnerf", build_dnerf, "transforms_train.json"),
                                 in_folder("dnerf", build_dnerf, "transforms_train.json", load_all), ".json")
    table["panoptic-meta"] = (good_from("panoptic", build_panoptic, "train_meta.json"),
                              in_folder("panoptic", build_panoptic, "train_meta.json", load_all), ".json")
    table["n3dv-poses"] = (good_from("n3dv", build_n3dv, "poses_bounds.npy"),
                           in_folder("n3dv", build_n3dv, "poses_bounds.npy", load_all), ".npy")
    table["n3dv-video"] = (good_from("n3dv", build_n3dv, "cam01.mp4"),
                           in_folder("n3dv", build_n3dv, "cam01.mp4", load_all), ".mp4")
    return table

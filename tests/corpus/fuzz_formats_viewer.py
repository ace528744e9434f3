"""Fuzz formats for the readers ``tests/corpus/fuzz_formats.py`` does not reach: the viewer's loaders (what
``splatforge view FILE`` reads: PLY, SPZ, .splat, GLB, ply4d, an LOD export's manifest and chunks, a finished
run folder's splats.ply), ``render`` / ``eval --splats FILE`` (a splat file read into a run's model), dataset
masks (nerfstudio ``mask_path``, Panoptic ``seg/``), the on-disk frame cache's ``.npy`` entries and the downscale
cache (a dataset's own ``images_2`` file; the cache's key files).

Each format is ``(good bytes, reader of a path, suffix)`` like the others; a file that lives in a folder is put
into a copy of a small template folder (:func:`tests.corpus.fuzz_formats.in_folder`).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from tests.corpus.fuzz_formats import W, H, _png, _template, build_lod, build_run, good_from, in_folder

# ------------------------------------------------------------------------------------------- viewer


def view(path: Path):
    """What ``splatforge view PATH`` loads before serving (viewer.scene.load_scene, cameras included)."""
    from viewer.scene import load_scene

    return load_scene(path, cameras=True)


def view_lod_all_chunks(folder: Path):
    """``splatforge view LOD_FOLDER``, then every chunk streamed as the camera moves would read it."""
    scene = view(folder)
    return scene, [scene.chunk(i) for i in range(len(scene.lod.manifest.chunks))]


def lod_chunk_rel() -> str:
    """The file of the LOD template's first chunk (a level-0 SPZ)."""
    manifest = json.loads((_template("lod", build_lod) / "manifest.json").read_text())
    return manifest["chunks"][0]["file"]


def _template_case_reader(template: str, build, rel: Callable[[], str], read) -> Callable[[Path], object]:
    """``read`` of template ``template``'s folder (made by ``build``) with the case placed at ``rel()`` (a name
    known once the template is built); ``reader.place`` places a case without reading it."""
    def place(path: Path) -> Path:
        return in_folder(template, build, rel(), read).place(path)

    def reader(path: Path):
        return read(place(path))

    reader.place = place
    return reader


def _lod_chunk_reader() -> Callable[[Path], object]:
    """:func:`view_lod_all_chunks` with the case as the LOD template's first chunk."""
    return _template_case_reader("lod", build_lod, lod_chunk_rel, view_lod_all_chunks)


def build_finished_run(root: Path) -> None:
    """The run folder of :func:`tests.corpus.fuzz_formats.build_run` with its final splats.ply."""
    from recon.core.splat_data import random_splats
    from recon.export import write_ply

    build_run(root)
    write_ply(root / "splats.ply", random_splats(16, sh_degree=1))


def render_splats(path: Path):
    """``render`` / ``eval --run RUN --splats FILE``: the file read into the run's model (Run.load_model)."""
    from recon.run.folder import Run

    return Run.open(_template("run", build_run)).load_model(path)


def build_avatar_run(root: Path) -> None:
    """The smallest valid ``--method meshgs`` run: the tiny avatar capture of tests/recon/avatar/conftest.py (a
    rigged ellipsoid, 3 poses + 1 unseen, 9 views of 24 pixels) trained 2 CPU steps (the build, mostly kernel
    compiles, took about 400 s on the loaded 2-core VM). Its checkpoint holds the avatar record (template, skin,
    poses) and the Gaussians' bindings."""
    from recon.data.avatar_dataset import make_avatar_dataset
    from recon.training.trainer import TrainConfig, Trainer
    from tests.recon.avatar.conftest import make_tiny_mesh

    base = root.parent
    make_avatar_dataset(make_tiny_mesh(base / "blob.ply"), base / "capture", poses=3, unseen=1, views=9, size=24,
                        samples=1, seed=0, per_side=1)
    cfg = TrainConfig(data=base / "capture", out=root, method="meshgs", steps=2, sh_degree=1, progress=False)
    Trainer(cfg, log=lambda s: None, device="cpu").run()


def avatar_checkpoint_rel() -> str:
    """The avatar run template's newest checkpoint, relative to the run folder."""
    run = _template("avatar-run", build_avatar_run)
    return str(max((run / "checkpoints").glob("ckpt_*.pt")).relative_to(run))


def _avatar_checkpoint_reader() -> Callable[[Path], object]:
    """``splatforge view RUN`` of the avatar run with the case as its newest checkpoint (viewer.scene.load_scene:
    the avatar record checked, the Gaussians bound to its triangles, posed)."""
    return _template_case_reader("avatar-run", build_avatar_run, avatar_checkpoint_rel, view)


# ----------------------------------------------------------------------------------------- datasets


def build_masked_nerfstudio(root: Path) -> None:
    """A two-view nerfstudio folder whose frames have loss masks (``mask_path``: masks/f_<i>.png, grey)."""
    from PIL import Image

    from tests.corpus.bad_files import nerfstudio_dataset

    def masks(meta: dict) -> None:
        for i, frame in enumerate(meta["frames"]):
            frame["mask_path"] = f"masks/f_{i}.png"

    made = nerfstudio_dataset(masks)(root.parent)
    made.rename(root)
    rng = np.random.default_rng(5)
    for i in range(2):
        (root / "masks").mkdir(exist_ok=True)
        Image.fromarray((rng.uniform(0, 1, (H, W)) > 0.3).astype(np.uint8) * 255).save(root / "masks" / f"f_{i}.png")


def read_masks(folder: Path):
    """The dataset loaded and every frame's loss mask decoded (what training reads)."""
    from recon.data import load_scene
    from recon.data.scene import load_mask

    scene = load_scene(folder, cache_dir=folder.parent / "cache")
    return [load_mask(f) for f in scene.frames_train + scene.frames_test]


def build_segmented_panoptic(root: Path) -> None:
    """The Panoptic template of fuzz_formats with a ``seg/<cam>/<k>.png`` segmentation for every image."""
    from PIL import Image

    from tests.corpus.fuzz_formats import build_panoptic

    build_panoptic(root)
    rng = np.random.default_rng(6)
    for image in sorted((root / "ims").rglob("*.jpg")):
        seg = root / "seg" / image.relative_to(root / "ims").with_suffix(".png")
        seg.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray((rng.uniform(0, 1, (H, W)) > 0.5).astype(np.uint8) * 255).save(seg)


def read_segmentations(folder: Path):
    """The Panoptic dataset loaded and every frame's segmentation decoded."""
    from recon.data import load_scene
    from recon.data.scene import load_segmentation

    scene = load_scene(folder, cache_dir=folder.parent / "cache")
    return [load_segmentation(f) for f in scene.frames_train + scene.frames_test]


def build_downscaled_nerfstudio(root: Path) -> None:
    """The two-view nerfstudio folder with the dataset's own half-size images (``images_2/f_<i>.png``, no cache
    key: used as they are by ``--data-factor 2``) and, from a first load at factor 2, the downscale cache's key
    files in ``root/cache`` (the copy of the folder moves the source, so they no longer match: remade)."""
    from PIL import Image

    from tests.corpus.bad_files import nerfstudio_dataset

    nerfstudio_dataset(lambda m: None)(root.parent).rename(root)
    for i in range(2):
        (root / "images_2").mkdir(exist_ok=True)
        Image.open(root / "images" / f"f_{i}.png").resize((W // 2, H // 2), Image.BOX).save(
            root / "images_2" / f"f_{i}.png")
    (root / "images_2" / "f_1.png").unlink()  # made by the downscale cache, with its key, at the first load
    read_downscaled(root)


def read_downscaled(folder: Path):
    """The dataset loaded at ``--data-factor 2`` (derived images cached in ``folder/cache``) and every frame's image
    decoded: the dataset's own ``images_2`` file and the cache's made one. Returns the decoded images."""
    from recon.data import load_scene
    from recon.data.frame_images import frame_rgba

    scene = load_scene(folder, data_factor=2, cache_dir=folder / "cache")
    return [frame_rgba(f) for f in scene.frames_train + scene.frames_test]


def downscale_key_rel() -> str:
    """The downscale cache's key file of the template's second image (``cache/images_2/.f_1.png.source.json``)."""
    return "cache/images_2/.f_1.png.source.json"


# -------------------------------------------------------------------------------------- frame cache

_SOURCE: list[Path] = []
SOURCE_MTIME_NS = 1_700_000_000_000_000_000


def frame_source() -> Path:
    """One image (fixed path, bytes and mtime for this process): the source every frame-cache case is keyed to,
    so the good entry written once is valid in every case's cache folder."""
    if not _SOURCE:
        import atexit
        import shutil

        base = Path(tempfile.mkdtemp(prefix="fuzz-frame-source-"))
        atexit.register(shutil.rmtree, base, True)
        _png(base / "frame.png", seed=7)
        os.utime(base / "frame.png", ns=(SOURCE_MTIME_NS, SOURCE_MTIME_NS))
        _SOURCE.append(base / "frame.png")
    return _SOURCE[0]


def _frame(source: Path):
    from recon.data.procedural import orbit_cameras
    from recon.data.scene import Frame

    return Frame(name="frame", image_path=source, camera=orbit_cameras(1, 4.0, W, H, 0.9)[0])


def good_cache_entry() -> bytes:
    """The entry FrameCache writes for :func:`frame_source`'s RGBA."""
    from recon.data.frame_cache import FrameCache
    from recon.data.frame_images import FrameImages

    with tempfile.TemporaryDirectory() as tmp:
        cache = FrameCache(Path(tmp))
        FrameImages([_frame(frame_source())], disk_cache=cache).load(0)
        return cache.entry_path(frame_source(), "rgba", (W, H)).read_bytes()


def read_cache_entry(path: Path):
    """The case's bytes (or special entry) put where the cache keeps :func:`frame_source`'s RGBA, then the frame
    loaded as training loads it (FrameImages with that disk cache): a damaged or foreign entry must be decoded
    again, never trusted. Returns the pixels."""
    from recon.data.frame_cache import FrameCache
    from recon.data.frame_images import FrameImages

    cache = FrameCache(path.parent / "cache")
    entry = cache.entry_path(frame_source(), "rgba", (W, H))
    entry.parent.mkdir(parents=True, exist_ok=True)
    if path.is_file() and not path.is_symlink():
        os.replace(path, entry)
    elif path.is_dir() and not path.is_symlink():
        os.rename(path, entry)
    else:
        os.symlink(os.readlink(path) if path.is_symlink() else path.resolve(), entry)
    return FrameImages([_frame(frame_source())], disk_cache=cache).load(0).numpy()


# ------------------------------------------------------------------------------------------ formats


def formats() -> dict[str, tuple[Callable[[], bytes], Callable[[Path], object], str]]:
    """{format: (good bytes, reader of a path, suffix)} of the formats this module adds."""
    import scripts.fuzz_readers as fr  # the splat formats' good files

    table = {f"view-{name}": (good, view, suffix) for name, good, suffix in (
        ("ply", fr.good_ply, ".ply"), ("spz", fr.good_spz, ".spz"), ("splat", fr.good_splat, ".splat"),
        ("ply4d", fr.good_ply4d, ".ply"))}  # `view` reads no GLB: "unknown splat format '.glb'" (exit 2)
    table["view-lod-manifest"] = (good_from("lod", build_lod, "manifest.json"),
                                  in_folder("lod", build_lod, "manifest.json", view_lod_all_chunks), ".json")
    table["view-lod-chunk"] = (lambda: (_template("lod", build_lod) / lod_chunk_rel()).read_bytes(),
                               _lod_chunk_reader(), ".spz")
    table["view-run-splats"] = (good_from("finished-run", build_finished_run, "splats.ply"),
                                in_folder("finished-run", build_finished_run, "splats.ply", view), ".ply")
    table["render-splats"] = (fr.good_ply, render_splats, ".ply")
    table["avatar-checkpoint"] = (lambda: (_template("avatar-run", build_avatar_run) / avatar_checkpoint_rel())
                                  .read_bytes(), _avatar_checkpoint_reader(), ".pt")
    table["nerfstudio-mask"] = (good_from("ns-masks", build_masked_nerfstudio, "masks/f_0.png"),
                                in_folder("ns-masks", build_masked_nerfstudio, "masks/f_0.png", read_masks), ".png")
    table["panoptic-seg"] = (good_from("panoptic-seg", build_segmented_panoptic, "seg/0/000001.png"),
                             in_folder("panoptic-seg", build_segmented_panoptic, "seg/0/000001.png",
                                       read_segmentations), ".png")
    table["frame-cache-entry"] = (good_cache_entry, read_cache_entry, ".npy")
    table["downscale-image"] = (good_from("ns-downscaled", build_downscaled_nerfstudio, "images_2/f_0.png"),
                                in_folder("ns-downscaled", build_downscaled_nerfstudio, "images_2/f_0.png",
                                          read_downscaled), ".png")
    table["downscale-cache-key"] = (good_from("ns-downscaled", build_downscaled_nerfstudio, downscale_key_rel()),
                                    in_folder("ns-downscaled", build_downscaled_nerfstudio, downscale_key_rel(),
                                              read_downscaled), ".json")
    return table

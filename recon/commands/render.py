"""`splatforge render`: a video of a trained run along an orbit, a spiral or the dataset's cameras."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from recon.commands.train import USER_ERRORS, fail


def render(run: Path, path: Literal["orbit", "spiral", "dataset"] = "orbit", out: Path = Path("video.mp4"),
           frames: int = 120, fps: int = 30, splats: Path | None = None, progress: bool = True) -> None:
    """Render RUN's splats.ply along a camera path into an MP4 (H.264 via imageio-ffmpeg).

    Args:
        run: training run directory (config.yaml names the dataset whose cameras shape the path).
        path: orbit (circle around the scene), spiral (orbit with varying height and distance), or
            dataset (the training cameras in order).
        out: output video (.mp4); written to a temporary file and renamed when complete.
        frames: number of frames for orbit/spiral.
        splats: render this splat file instead of RUN/splats.ply.
    """
    try:
        written = render_video(run, path, out, frames, fps, splats, progress)
    except USER_ERRORS as err:
        fail("render", err)
    print(f"wrote {written}")


def render_video(run: Path, path: str, out: Path, frames: int = 120, fps: int = 30, splats: Path | None = None,
                 progress: bool = True) -> Path:
    """Library form of :func:`render`; returns the video path."""
    from recon import run_files as rf
    from recon.camera_paths import camera_path
    from recon.export import read_splats
    from recon.models.gaussians import GaussianModel
    from recon.trainer import TrainConfig, background_color, load_training_scene

    config_file = Path(run) / rf.CONFIG_FILE
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} not found: --run must be a training output directory")
    cfg = rf.config_from_dict(TrainConfig, rf.read_config_dict(config_file))
    splats = Path(splats) if splats is not None else Path(run) / "splats.ply"
    if not splats.is_file():
        raise FileNotFoundError(f"{splats} not found (has the run finished?)")
    scene = load_training_scene(cfg)
    cams = camera_path(path, [f.camera for f in scene.frames_train], frames)
    model = GaussianModel.from_splat_data(read_splats(splats), extent=scene.extent)
    bg = background_color(cfg, scene)
    images = _render_frames(model, cams, bg, progress)
    return write_video(Path(out), images, fps)


@torch.no_grad()
def _render_frames(model, cams, bg, progress: bool) -> list[np.ndarray]:
    from rich.progress import track

    images = []
    for cam in track(cams, description="rendering", disable=not progress):
        rgb, _, _ = model.render([cam], None, bg)
        images.append((rgb[0].clamp(0, 1).numpy() * 255 + 0.5).astype(np.uint8))
    return images


def write_video(out: Path, images: list[np.ndarray], fps: int) -> Path:
    """Encode uint8 [H, W, 3] frames as H.264 MP4 atomically (odd sizes are padded to even)."""
    import imageio.v2 as imageio

    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=out.suffix or ".mp4", dir=out.parent)
    os.close(fd)
    try:
        with imageio.get_writer(tmp, fps=fps, codec="libx264", quality=8, macro_block_size=1,
                                pixelformat="yuv420p") as writer:
            for im in images:
                h, w = im.shape[:2]
                writer.append_data(np.pad(im, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge"))
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out

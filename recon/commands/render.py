"""`splatforge render`: a video of a trained run along an orbit, a spiral, the dataset's cameras, or a
camera-path JSON saved with the viewer's keyframe button (interpolated between the keyframes)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from recon.commands.train import USER_ERRORS, fail
from recon.errors import SplatforgeError, UsageError


VIDEO_SUFFIXES = (".mp4",)


def render(run: Path, path: str = "orbit", out: Path = Path("video.mp4"), frames: int = 120, fps: int = 30,
           splats: Path | None = None, max_side: int | None = None, progress: bool = True,
           device: Literal["auto", "cpu", "cuda"] = "auto", data: Path | None = None, force: bool = False) -> None:
    """Render RUN's splats.ply along a camera path into an MP4 (H.264 via imageio-ffmpeg).

    Args:
        run: training run directory (config.yaml names the dataset whose cameras shape the path).
        path: orbit (circle around the scene), spiral (orbit with varying height and distance), dataset
            (the training cameras in order), or a camera-path JSON FILE saved by the viewer's keyframe
            button (a smooth path through its keyframes, at the first keyframe's image size).
        out: output video (.mp4); written to a temporary file and renamed when complete. An existing file
            is refused without --force.
        frames: number of frames for orbit/spiral and for a camera-path FILE (spread over its keyframes).
        splats: render this splat file instead of RUN/splats.ply.
        max_side: camera-path FILE only: scale the frames down so that their longest side is at most this
            (the field of view is kept); browser keyframes have the browser window's size.
        device: where to render: auto (the GPU when CUDA is available), cpu or cuda.
        data: dataset folder or "procedural" (default: the one in RUN/config.yaml).
        force: overwrite an existing --out.
    """
    try:
        written = render_video(run, path, out, frames, fps, splats, progress, max_side=max_side, device=device,
                               data=data, force=force)
    except (*USER_ERRORS, MissingEncoderError) as err:
        fail("render", err)
    print(f"wrote {written}")


def render_video(run: Path, path: str | Path, out: Path, frames: int = 120, fps: int = 30, splats: Path | None = None,
                 progress: bool = True, max_side: int | None = None, device: str = "auto",
                 data: Path | None = None, force: bool = False) -> Path:
    """Library form of :func:`render`; returns the video path. Bad arguments (frames < 1, fps <= 0, an
    existing --out without ``force``, a folder, an unwritable place) are refused before any work."""
    from recon.camera_paths import PATHS, camera_path
    from recon.run import Run
    from recon.devices import resolve_device

    check_render_arguments(out, frames, fps, force)
    opened = Run.open(run, data=data)
    splats = opened.require_splats(splats)
    if str(path) not in PATHS:
        cams = keyframe_path_cameras(Path(path), frames, max_side)  # checked before the scene is loaded
    check_video_encoder()  # after the arguments, before any rendering work
    scene = opened.scene
    if str(path) in PATHS:
        cams = camera_path(str(path), opened.cameras, frames)
    dev = resolve_device(device)
    model = opened.load_model(splats, dev, extent=scene.extent)
    bg = opened.background().to(dev)
    images = _render_frames(model, cams, bg, progress)
    return write_video(Path(out), images, fps, force=force)


def check_render_arguments(out: Path, frames: int, fps: float, force: bool) -> None:
    """ValueError / OutputError naming the flag for frames < 1, fps <= 0 and an ``out`` that is a
    folder, not an .mp4, exists without ``force`` or cannot be written."""
    from recon.outputs import check_output_file

    if frames < 1:
        raise UsageError(f"--frames {frames}: must be >= 1")
    if not fps > 0:
        raise UsageError(f"--fps {fps}: must be > 0")
    check_output_file(out, force=force, suffixes=VIDEO_SUFFIXES)


def keyframe_path_cameras(file: Path, frames: int, max_side: int | None = None) -> list:
    """Cameras along a viewer camera-path JSON (see :mod:`viewer.camera_path`), ``frames`` of them
    interpolated through its keyframes (:func:`recon.camera_paths.interpolate_keyframes`), at the first
    keyframe's size (longest side capped at ``max_side``). Errors name the file."""
    from recon.camera_paths import PATHS, interpolate_keyframes, resize_intrinsics

    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such camera-path file (--path takes {', '.join(PATHS)} or a "
                                f"camera_path.json saved by the viewer's keyframe button)")
    from viewer.camera_path import load_camera_path  # lazily: recon depends on viewer only here, in the CLI

    keys = load_camera_path(file).frames
    if not keys:
        raise UsageError(f"{file}: the camera path has no keyframes")
    if frames < 1:
        raise UsageError(f"--frames must be >= 1, got {frames}")
    width, height = keys[0].width, keys[0].height
    if max_side is not None and max(width, height) > max_side:
        k = max_side / max(width, height)
        width, height = max(1, round(width * k)), max(1, round(height * k))
    Ks = [resize_intrinsics(f.K_numpy(), f.width, f.height, width, height) for f in keys]
    return interpolate_keyframes([f.world_to_cam_numpy() for f in keys], Ks, width, height, frames)


@torch.no_grad()
def _render_frames(model, cams, bg, progress: bool) -> list[np.ndarray]:
    from rich.progress import track

    images = []
    for cam in track(cams, description="rendering", disable=not progress):
        rgb, _, _ = model.render([cam], None, bg)
        images.append((rgb[0].clamp(0, 1).cpu().numpy() * 255 + 0.5).astype(np.uint8))
    return images


class MissingEncoderError(SplatforgeError, RuntimeError):
    """The MP4 encoder (the imageio-ffmpeg package, which bundles ffmpeg) is not installed."""


def check_video_encoder() -> None:
    """Raise :class:`MissingEncoderError` unless imageio-ffmpeg is importable. Without it imageio picks
    another plugin for ``.mp4`` and fails with an unrelated message (seen: TiffWriter and ``fps``)."""
    try:
        import imageio_ffmpeg  # noqa: F401
    except ImportError as err:
        raise MissingEncoderError("writing an MP4 needs the imageio-ffmpeg package, which is not installed "
                                  "(pip install 'imageio-ffmpeg>=0.5,<1'; it is a dependency of splatforge)") from err


def write_video(out: Path, images: list[np.ndarray], fps: int, force: bool = True) -> Path:
    """Encode uint8 [H, W, 3] frames as H.264 MP4 atomically (odd sizes are padded to even); the caller
    has checked the encoder (check_video_encoder) before rendering the frames. An existing ``out`` is
    refused unless ``force`` (checked again here: it may have appeared while rendering)."""
    import imageio.v2 as imageio

    from recon.export.atomic import refuse_overwrite

    if not images:
        raise UsageError(f"{out}: no frames to write")
    refuse_overwrite(out, force)
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

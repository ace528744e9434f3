"""`splatforge render`: a video of a trained run along an orbit, a spiral, the dataset's cameras, a fixed
view, or a camera-path JSON saved with the viewer's keyframe button (interpolated between the keyframes).
4D models move in time along the path (``--time T``, ``--times START:END:COUNT``); an avatar (a ``--method
meshgs`` run) plays a pose sequence (``--animation clip.json`` or a rigged GLB's animation, docs/avatars.md) or takes the pose of a time
(``--time`` / ``--times``: its captured poses interpolated, recon/avatar/pose_time.py); the output may also be
one PNG or a folder of PNG frames."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from recon.commands.train import USER_ERRORS, fail
from recon.core.errors import OutputError, SplatforgeError, UsageError


VIDEO_SUFFIXES = (".mp4",)
IMAGE_SUFFIXES = (".png",)
FRAME_NAME = re.compile(r"frame_\d{5}\.png")  # the files of a frame folder (only such a folder is replaced)


def render(run: Path, path: str = "orbit", out: Path = Path("video.mp4"), frames: int = 120, fps: int = 30,
           splats: Path | None = None, max_side: int | None = None, progress: bool = True,
           device: Literal["auto", "cpu", "cuda"] = "auto", data: Path | None = None, force: bool = False,
           time: float | None = None, times: str | None = None, animation: Path | None = None,
           animation_name: str | None = None) -> None:
    """Render RUN's model along a camera path into an MP4 (H.264 via imageio-ffmpeg), a PNG or a folder of PNGs.

    Args:
        run: training run directory (config.yaml names the dataset whose cameras shape the path).
        path: orbit (circle around the scene), spiral (orbit with varying height and distance), dataset
            (the training cameras in order), fixed (the first training camera, still: for 4D models moving
            in time), or a camera-path JSON FILE saved by the viewer's keyframe button (a smooth path through
            its keyframes, at the first keyframe's image size).
        out: output: a video (.mp4), one image (.png: the path's first camera), or a folder (no suffix) of
            frame_00000.png...; written to a temporary name and renamed when complete. An existing output
            is refused without --force.
        frames: number of frames for orbit/spiral/fixed and for a camera-path FILE (spread over its
            keyframes); --times sets it instead.
        splats: render this model file (a splat file, or a ply4d 4D model) instead of the run's own.
        max_side: camera-path FILE only: scale the frames down so that their longest side is at most this
            (the field of view is kept); browser keyframes have the browser window's size.
        device: where to render: auto (the GPU when CUDA is available), cpu or cuda.
        data: dataset folder or "procedural" (default: the one in RUN/config.yaml).
        force: overwrite an existing --out.
        time: 4D models: render every frame at this normalised time in [0, 1]. Avatars (--method meshgs):
            the pose at this time (captured pose k at k / (P - 1), slerped between; without --time / --times
            an avatar renders its rest pose).
        times: 4D models and avatars: START:END:COUNT, COUNT frames with time moving from START to END along
            the camera path (e.g. 0:1:120). A 4D model given neither moves through 0..1 over --frames frames
            (along --path dataset: each training view at its own time).
        animation: avatars (--method meshgs runs): an animation clip JSON ({"fps", "poses": [{"joint_rotations",
            "root_translation"}]}, docs/avatars.md; one frame per pose, --frames and --fps taken from the clip)
            or a rigged .glb holding glTF animations (joints matched to the avatar's by name, sampled at --fps
            from the first keyframe to the last); along --path (use --path fixed for a still camera).
        animation_name: --animation GLB: the animation's name or index (default: the first).
    """
    try:
        written = render_video(run, path, out, frames, fps, splats, progress, max_side=max_side, device=device,
                               data=data, force=force, time=time, times=times, animation=animation,
                               animation_name=animation_name)
    except (*USER_ERRORS, MissingEncoderError) as err:
        fail("render", err)
    print(f"wrote {written}")


def render_video(run: Path, path: str | Path, out: Path, frames: int = 120, fps: int = 30, splats: Path | None = None,
                 progress: bool = True, max_side: int | None = None, device: str = "auto",
                 data: Path | None = None, force: bool = False, time: float | None = None,
                 times: str | None = None, animation: Path | None = None, animation_name: str | None = None
                 ) -> Path:
    """Library form of :func:`render`; returns the path written. Bad arguments (frames < 1, fps <= 0, an
    existing --out without ``force``, an unwritable place, a time outside [0, 1], time flags for a 3D model)
    are refused before any rendering."""
    from recon.data.camera_paths import PATHS, camera_path
    from recon.run.folder import Run
    from recon.core.devices import resolve_device
    from recon.data.skinned_glb import is_glb_path
    from recon.run.time_args import resolve_times

    kind = check_render_arguments(out, frames, fps, force)
    asked = resolve_times(time, times)
    if animation_name is not None and (animation is None or not is_glb_path(animation)):
        raise UsageError("--animation-name picks one of a GLB's animations; give --animation FILE.glb")
    opened = Run.open(run, data=data)
    if animation is not None:
        return render_animation(opened, Path(animation), path, out, kind, progress, device, max_side, force,
                                asked is not None, fps, animation_name)
    if splats is not None or not opened.is_4d:
        opened.require_splats(splats)
    if kind == "image" and asked is not None and len(asked) > 1:
        raise UsageError(f"--out {out}: one PNG holds one frame; --times asks for {len(asked)} (give an .mp4 or "
                         f"a folder)")
    n = 1 if kind == "image" else len(asked) if times is not None else frames
    # an avatar (meshgs) takes a pose time when one is asked (without: its rest pose, as splats.ply)
    posed = splats is None and asked is not None and bool(getattr(opened.model_class, "POSED_BY_TIME", False))
    frame_times = frame_times_for(opened.model_is_4d(splats) or posed, asked, n)
    if str(path) not in PATHS:
        cams = keyframe_path_cameras(Path(path), n, max_side)  # checked before the scene is loaded
    if kind == "video":
        check_video_encoder()  # after the arguments, before any rendering work
    scene = opened.scene
    if str(path) in PATHS:
        cams = camera_path(str(path), opened.cameras, n)
    if str(path) == "dataset" and asked is None and frame_times != [None] and kind != "image":
        # a 4D model along the dataset's cameras without time flags: each frame at its own time
        frame_times = [0.5 if f.time is None else float(f.time) for f in scene.frames_train]
    cams, frame_times = pair_frames(cams[:1] if kind == "image" else cams, frame_times)
    dev = resolve_device(device)
    model = opened.load_model(splats, dev, extent=scene.extent)
    bg = opened.background().to(dev)
    images = _render_frames(model, cams, bg, progress, frame_times)
    if kind == "image":
        return write_image(Path(out), images[0], force=force)
    if kind == "folder":
        return write_frame_folder(Path(out), images, force=force)
    return write_video(Path(out), images, fps, force=force)


def render_animation(opened, animation: Path, path, out: Path, kind: str, progress: bool, device: str,
                     max_side: int | None, force: bool, timed: bool, fps: float = 30,
                     animation_name: str | None = None) -> Path:
    """``--animation``: RUN's avatar in each pose of the clip, one frame per pose along ``path``, written as
    :func:`render_video` writes (the video at the clip's fps; a GLB's animation sampled at ``fps``). UsageError
    for a run whose model cannot be posed or for time flags; the clip's errors name it (a pose with the wrong
    joint count, joints the GLB's skin lacks, ...)."""
    from recon.avatar.skin_file import read_animation
    from recon.data.skinned_glb import is_glb_path, read_glb_animation
    from recon.core.devices import resolve_device
    from recon.data.camera_paths import PATHS, camera_path

    if timed:
        raise UsageError("--animation gives one pose per frame; leave --time / --times out")
    if not hasattr(opened.model_class, "render_pose"):
        raise UsageError(f"--animation: the run {opened.dir} holds a --method {opened.config.method} model, which has "
                         f"no skeleton to pose; animations play avatars (--method meshgs runs)")
    dev = resolve_device(device)
    model = opened.load_model(None, dev)
    if is_glb_path(animation):
        poses = read_glb_animation(animation, model.avatar.skin.skeleton, fps, animation_name)
    else:
        poses, fps = read_animation(animation, model.avatar.skin.num_joints)
    n = 1 if kind == "image" else len(poses)
    cams = (camera_path(str(path), opened.cameras, n) if str(path) in PATHS
            else keyframe_path_cameras(Path(path), n, max_side))
    if kind == "video":
        check_video_encoder()
    cams, poses = pair_frames(cams, poses[:n]) if n > 1 else (cams[:1], poses[:1])
    bg = opened.background().to(dev)
    images = []
    from rich.progress import track

    with torch.no_grad():
        for cam, (rotations, translation) in track(list(zip(cams, poses)), description="rendering",
                                                   disable=not progress):
            rgb, _, _ = model.render_pose([cam], rotations, translation, background=bg)
            images.append((rgb[0].clamp(0, 1).cpu().numpy() * 255 + 0.5).astype(np.uint8))
    if kind == "image":
        return write_image(Path(out), images[0], force=force)
    if kind == "folder":
        return write_frame_folder(Path(out), images, force=force)
    return write_video(Path(out), images, max(1, round(fps)), force=force)


def frame_times_for(is_4d: bool, asked: list[float] | None, n: int) -> list[float | None]:
    """The model time of the frames: ``asked`` (--time: one time for all; --times: one per frame); for a 4D
    model without either, 0..1 over ``n`` frames (one frame: the middle, 0.5); [None] for a 3D model
    (UsageError when it was given times)."""
    import numpy as np

    if not is_4d:
        if asked is not None:
            raise UsageError("--time / --times: the model holds 3D Gaussians, which do not change with time; leave "
                             "the time flags out (they apply to 4D models: a --method 4dgs run or a ply4d file)")
        return [None]
    if asked is None:
        return [float(v) for v in np.linspace(0.0, 1.0, n)] if n > 1 else [0.5]
    return asked


def pair_frames(cams: list, frame_times: list) -> tuple[list, list]:
    """(cameras, times) of equal length: one time repeats over every camera; a camera list of another length
    than the times (the dataset path) is resampled evenly to it."""
    if len(frame_times) == 1:
        return cams, frame_times * len(cams)
    if len(cams) != len(frame_times):
        m = len(frame_times)
        cams = [cams[round(i * (len(cams) - 1) / max(m - 1, 1))] for i in range(m)]
    return cams, frame_times


def check_render_arguments(out: Path, frames: int, fps: float, force: bool) -> str:
    """The kind of ``out`` ("video" for .mp4, "image" for .png, "folder" without a suffix); UsageError /
    OutputError naming the flag for frames < 1, fps <= 0, another suffix, and an ``out`` that exists
    without ``force`` or cannot be written."""
    from recon.outputs.paths import check_output_file, ensure_writable_folder

    if frames < 1:
        raise UsageError(f"--frames {frames}: must be >= 1")
    if not fps > 0:
        raise UsageError(f"--fps {fps}: must be > 0")
    out = Path(out)
    if out.suffix == "":
        if out.exists() and not out.is_dir():
            raise OutputError(f"--out {out}: is a file; an --out without a suffix is a folder of PNG frames")
        if out.exists() and any(not FRAME_NAME.fullmatch(p.name) for p in out.iterdir()):
            raise OutputError(f"--out {out}: is a folder holding other files than frame_NNNNN.png; give a new "
                              f"folder name for the frames (or a file path ending in .mp4 or .png)")
        if out.exists() and not force:
            raise OutputError(f"--out {out}: already exists; pass --force to replace it")
        ensure_writable_folder(out.parent if str(out.parent) else Path("."), f"--out {out}: folder")
        return "folder"
    check_output_file(out, force=force, suffixes=VIDEO_SUFFIXES + IMAGE_SUFFIXES)
    return "video" if out.suffix.lower() in VIDEO_SUFFIXES else "image"


def keyframe_path_cameras(file: Path, frames: int, max_side: int | None = None) -> list:
    """Cameras along a viewer camera-path JSON (see :mod:`viewer.camera_path`), ``frames`` of them
    interpolated through its keyframes (:func:`recon.data.camera_paths.interpolate_keyframes`), at the first
    keyframe's size (longest side capped at ``max_side``). Errors name the file."""
    from recon.data.camera_paths import PATHS, interpolate_keyframes, resize_intrinsics

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
def _render_frames(model, cams, bg, progress: bool, times=None) -> list[np.ndarray]:
    """uint8 [H, W, 3] renders of ``model`` into each camera, at each camera's time (None: static models)."""
    from rich.progress import track

    times = [None] * len(cams) if times is None else times
    images = []
    for cam, t in track(list(zip(cams, times)), description="rendering", disable=not progress):
        rgb, _, _ = model.render([cam], None, bg, t=t)
        images.append((rgb[0].clamp(0, 1).cpu().numpy() * 255 + 0.5).astype(np.uint8))
    return images


def write_image(out: Path, image: np.ndarray, force: bool = False) -> Path:
    """One uint8 [H, W, 3] frame as a PNG, atomically."""
    import io

    from PIL import Image

    from recon.core.atomic import atomic_write_bytes

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    atomic_write_bytes(out, buf.getvalue(), force=force)
    return out


def write_frame_folder(out: Path, images: list[np.ndarray], force: bool = False) -> Path:
    """Frames as ``out/frame_00000.png``...: written into a hidden folder beside ``out``, renamed onto it when
    complete (an existing ``out`` is replaced only then, with ``force``)."""
    import shutil

    from PIL import Image

    from recon.core.atomic import publish_finished, refuse_overwrite

    if not images:
        raise UsageError(f"{out}: no frames to write")
    refuse_overwrite(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for i, im in enumerate(images):
            Image.fromarray(im).save(tmp / f"frame_{i:05d}.png")
        os.chmod(tmp, 0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old.{os.getpid()}")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


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

    from recon.core.atomic import publish_finished, refuse_overwrite

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
        publish_finished(tmp, out, force)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out

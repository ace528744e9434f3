"""Neural 3D Video (Li et al., CVPR 2022): a synchronised rig filmed as one video per camera.

Layout (``DIR``): ``poses_bounds.npy`` [C, 17] (LLFF: per camera a 3x5 matrix, rows x-y-z of the world, columns
the camera's down, right and backward axes, its centre, and (height, width, focal) in pixels; then near and far
bounds) and ``camNN.mp4``, one per row of ``poses_bounds.npy`` in sorted name order. ``cam00`` is the test view
(the dataset's protocol); the others train.

Decoding: each video is read directly with imageio-ffmpeg, streamed (one frame in memory at a time), and the
frames kept by ``frame_stride`` and ``time_range`` are downscaled to the ``data_factor`` size and stored once in
the on-disk frame cache (:mod:`recon.data.video_frames`; ``--frame-cache``, default
``~/.cache/splatforge/frames``; with ``--frame-cache off`` the trainer passes a temporary one removed at exit:
:func:`recon.data.frame_cache.video_frame_cache`; see :func:`video_frames_dir`),
with a progress bar; a later load decodes only frames missing there (an edited video has a new key). The
frame count and rate are cached too (counting frames decodes the whole video). Frames are named
``camNN/<index:06d>.jpg`` (as when they were extracted to JPEG files; nothing is written under that name). Times: the kept frames span t in [0, 1]; ``Scene.duration`` keeps
their real length in seconds (frame count and the video's frame rate) for playback. Intrinsics: the focal of
``poses_bounds.npy`` scaled by video width / its width, principal point at the image centre, then scaled to the
downscaled size. No points: training
starts from random Gaussians in the region the cameras look at.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from recon.core.errors import UsageError
from recon.core.limits import check_npy_header, with_path
from recon.data.frame_cache import FrameCache, default_frame_cache_dir
from recon.data.scene import (BLACK, DataFormatError, Frame, MissingImageError, Scene, check_cameras,
                              downscaled_size, make_camera)
from recon.data.video_frames import decode_into_cache, missing_frames, require_video_file, video_error

POSES_FILE = "poses_bounds.npy"
TEST_CAMERA = "cam00"


def video_files(root: Path) -> list[Path]:
    """``cam*.mp4`` of ``root`` in sorted name order."""
    return sorted(Path(root).glob("cam*.mp4"))


def is_n3dv(path: Path) -> bool:
    """True when ``path`` holds ``poses_bounds.npy`` and at least one ``camNN.mp4``."""
    return (Path(path) / POSES_FILE).is_file() and bool(video_files(path))


def llff_world_to_cam(pose: np.ndarray) -> np.ndarray:
    """[4, 4] OpenCV world-to-camera of one LLFF pose [3, 5] (columns: down, right, backward axes, centre, hwf)."""
    down, right, back, centre = pose[:, 0], pose[:, 1], pose[:, 2], pose[:, 3]
    c2w = np.eye(4)
    c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right, down, -back, centre  # OpenCV: right, down, forward
    w2c = np.eye(4)
    w2c[:3, :3] = c2w[:3, :3].T
    w2c[:3, 3] = -c2w[:3, :3].T @ centre
    return w2c


def read_poses(root: Path, n_videos: int) -> np.ndarray:
    """[C, 3, 5] LLFF poses, checked against the video count; DataFormatError naming the file."""
    path = root / POSES_FILE
    _, dtype = check_npy_header(path, "poses file", with_path(DataFormatError))  # declared shape, before allocating
    if dtype.kind not in "fiu":  # complex would be cast with a warning (its imaginary part dropped), strings fail
        raise DataFormatError(f"{path}: holds {dtype} numbers; LLFF poses are real (float) numbers")
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise DataFormatError(f"{path}: cannot read it as a numpy array: {e}") from None
    if arr.ndim != 2 or arr.shape[1] != 17 or not np.isfinite(arr).all():
        raise DataFormatError(f"{path}: expected a finite [cameras, 17] array (LLFF poses and bounds), got {arr.shape}")
    if arr.shape[0] != n_videos:
        raise DataFormatError(f"{path}: {arr.shape[0]} camera poses but {n_videos} camNN.mp4 videos in {root}; "
                              f"there must be one pose row per video (in sorted name order)")
    return arr[:, :15].reshape(-1, 3, 5)


def video_info(path: Path, cache: FrameCache | None = None) -> tuple[int, float, int, int]:
    """(frame count, fps, width, height) of a video; MissingImageError naming it when unreadable. The count is
    ffmpeg's exact one (imageio_ffmpeg.count_frames_and_secs: a decode without output), not the container's;
    it is kept in ``cache`` (keyed by the video's size and mtime) so that a later load does not decode again."""
    import imageio.v3 as iio
    import imageio_ffmpeg

    require_video_file(path)
    known = cache.load_json(path, "video-info") if cache is not None else None
    if known is not None and {"count", "fps", "width", "height"} <= known.keys():
        return int(known["count"]), float(known["fps"]), int(known["width"]), int(known["height"])
    try:
        fps = float(iio.immeta(path, plugin="FFMPEG")["fps"])
        count = imageio_ffmpeg.count_frames_and_secs(str(path))[0]
        first = iio.imread(path, plugin="FFMPEG", index=0)
    except Exception as e:  # imageio raises several types for broken or missing files: name the file
        raise video_error(path, e) from None
    info = int(count), fps, int(first.shape[1]), int(first.shape[0])
    if cache is not None:
        cache.store_json(path, "video-info", dict(zip(("count", "fps", "width", "height"), info)))
    return info


def parse_time_range(text: str | None, duration: float) -> tuple[float, float]:
    """``"a:b"`` seconds (either side may be empty) -> (start, end) within [0, duration]; None = the whole clip."""
    if text is None:
        return 0.0, duration
    try:
        a, b = (part.strip() for part in str(text).split(":"))
        start, end = (float(a) if a else 0.0), (float(b) if b else duration)
    except ValueError:
        raise UsageError(f"--time-range {text!r}: expected START:END in seconds, e.g. 0:5 or 2.5:") from None
    if not (0.0 <= start < end) or not math.isfinite(end):
        raise UsageError(f"--time-range {text!r}: needs 0 <= START < END (the clip is {duration:.2f} s long)")
    return start, min(end, duration)


def selected_frames(count: int, fps: float, frame_stride: int, time_range: str | None) -> list[int]:
    """Frame indices kept: those within ``time_range`` (seconds), every ``frame_stride``-th from the first."""
    if int(frame_stride) != frame_stride or frame_stride < 1:
        raise UsageError(f"--frame-stride {frame_stride!r}: must be a positive integer")
    start, end = parse_time_range(time_range, count / fps)
    first, last = math.ceil(start * fps - 1e-9), min(count - 1, math.floor(end * fps + 1e-9))
    kept = list(range(first, last + 1, int(frame_stride)))
    if not kept:
        raise UsageError(f"--time-range {time_range!r} with --frame-stride {frame_stride} keeps no frame of the "
                         f"{count}-frame video ({fps:g} frames/s)")
    return kept


def video_frames_dir(cache_dir: Path | None, frame_cache: FrameCache | None) -> Path:
    """Where the decoded frames go: the run's frame cache (the trainer always gives one: with ``--frame-cache
    off`` a temporary folder, :func:`recon.data.frame_cache.video_frame_cache`); without one (a direct
    ``load_scene`` call: video frames cannot be read one by one cheaply) ``frames/`` of ``cache_dir`` when given,
    else the default frame cache (:func:`recon.data.frame_cache.default_frame_cache_dir`)."""
    if frame_cache is not None:
        return frame_cache.folder
    return Path(cache_dir) / "frames" if cache_dir is not None else default_frame_cache_dir()


def load_n3dv(root: Path, data_factor: int = 1, cache_dir: Path | None = None, frame_stride: int = 1,
              time_range: str | None = None, background: tuple[float, float, float] | None = None,
              frame_cache: FrameCache | None = None) -> Scene:
    """Load a Neural 3D Video folder (module docstring) as a dynamic :class:`Scene`; the kept frames not yet
    in the frame cache are decoded into it first (progress bar)."""
    from rich.progress import Progress

    if int(data_factor) != data_factor or data_factor < 1:
        raise UsageError(f"--data-factor {data_factor!r}: must be a positive integer")
    root = Path(root)
    videos = video_files(root)
    poses = read_poses(root, len(videos))
    cache = FrameCache(video_frames_dir(cache_dir, frame_cache))
    infos = [video_info(v, cache) for v in videos]
    counts = {v.stem: info[0] for v, info in zip(videos, infos)}
    if len(set(counts.values())) != 1:
        listing = ", ".join(f"{k}: {n}" for k, n in counts.items())
        raise DataFormatError(f"{root}: the cameras' videos have different frame counts ({listing}); a synchronised "
                              f"rig needs the same count for every camera (trim the longer videos)")
    count, fps, width, height = infos[0]
    for video, (_, _, w, h) in zip(videos, infos):
        if (w, h) != (width, height):
            raise DataFormatError(f"{video}: {w}x{h} frames but {videos[0].name} has {width}x{height}")
    kept = selected_frames(count, fps, frame_stride, time_range)
    size = downscaled_size(width, height, int(data_factor))
    todo = {v: missing_frames(v, kept, size, cache) for v in videos}
    if any(todo.values()):
        with Progress(transient=True) as bar:
            task = bar.add_task(f"decoding {len(videos)} videos ({size[0]}x{size[1]}) into {cache.folder}",
                                total=sum(len(t) for t in todo.values()))
            for video in videos:
                decode_into_cache(video, todo[video], size, cache, lambda: bar.advance(task))
    raw_train, raw_test = [], []
    for video, pose in zip(videos, poses):
        f = pose[2, 4] * width / pose[1, 4]
        K = np.array([[f, 0.0, width / 2.0], [0.0, f, height / 2.0], [0.0, 0.0, 1.0]])
        K = np.diag([size[0] / width, size[1] / height, 1.0]) @ K
        camera = make_camera(llff_world_to_cam(pose), K, size[0], size[1])
        for j, k in enumerate(kept):
            t = j / (len(kept) - 1) if len(kept) > 1 else 0.0
            frame = Frame(f"{video.stem}/{k:06d}.jpg", video, camera, None, t, video_frame=k, frames_dir=cache.folder)
            (raw_test if video.stem == TEST_CAMERA else raw_train).append(frame)
    if not raw_train:
        raise DataFormatError(f"{root}: only {TEST_CAMERA}.mp4 (the test view): no training camera")
    check_cameras(raw_train + raw_test, root / POSES_FILE)
    duration = (kept[-1] - kept[0]) / fps
    return Scene(raw_train, raw_test, None, None, background or BLACK, "n3dv", root, duration=duration)

"""Frames of video files (Neural 3D Video's ``camNN.mp4``), decoded with imageio-ffmpeg straight into the
on-disk frame cache (:mod:`recon.data.frame_cache`): streamed one frame at a time (never the whole video in
memory, no intermediate image files), downscaled to the training size (Pillow's box filter) and stored as
uint8 [H, W, 3] under the part ``frame<k>`` of the video.

A :class:`recon.data.scene.Frame` of a video has ``image_path`` = the video, ``video_frame`` = k and
``frames_dir`` = the cache folder holding its decoded frames; :func:`read_video_frame` decodes one frame again
when its entry is missing or damaged (slow: the video is read up to it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from recon.data.frame_cache import FrameCache
from recon.data.scene import Frame, MissingImageError


def video_part(index: int) -> str:
    """The frame cache part name of frame ``index`` of a video."""
    return f"frame{int(index)}"


def resized_rgb(frame: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 [h, w, 3] of a decoded video frame [H, W, >= 3] area-downscaled to ``size`` (w, h) when it differs."""
    rgb = np.ascontiguousarray(np.asarray(frame)[..., :3], dtype=np.uint8)
    if (rgb.shape[1], rgb.shape[0]) == tuple(size):
        return rgb
    from PIL import Image

    return np.asarray(Image.fromarray(rgb).resize(tuple(size), Image.BOX), dtype=np.uint8)


FFMPEG_NOISE = ("ffmpeg version", "built with", "configuration:", "lib", "Input #", "Duration:", "Stream #",
                "Metadata:", "===", "FFMPEG", "encoder", "handler_name", "vendor_id", "major_brand", "minor_version",
                "compatible_brands", "Press [q]", "Output #", "Stream mapping", "frame=")


def video_error(video: Path, err: BaseException) -> MissingImageError:
    """MissingImageError naming ``video`` with one line of what ffmpeg said (its stderr, banner and stream
    listing dropped: imageio puts the whole log in the message)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
    said = [ln for ln in lines if not ln.startswith(FFMPEG_NOISE)]
    reason = (said[-1] if said else lines[0] if lines else "")[:200]
    return MissingImageError(f"{video}: cannot read the video ({type(err).__name__}: {reason}); is it a complete "
                             f"mp4? Re-encode or re-download it")


def require_video_file(video: Path) -> None:
    """MissingImageError naming ``video`` unless it is a regular file (ffmpeg would block on a FIFO, and read
    ``/dev/zero`` forever)."""
    from recon.core.limits import require_regular_file, with_path

    require_regular_file(video, "video", with_path(MissingImageError))


def _iter_video(video: Path) -> Iterable[np.ndarray]:
    """Frames of ``video`` in order, streamed; MissingImageError naming the file when it cannot be read."""
    import imageio.v3 as iio

    require_video_file(video)
    try:
        yield from iio.imiter(video, plugin="FFMPEG")
    except (OSError, RuntimeError, ValueError, StopIteration) as e:
        raise video_error(video, e) from None


def missing_frames(video: Path, indices: Iterable[int], size: tuple[int, int], cache: FrameCache) -> list[int]:
    """Those of ``indices`` without a cache entry at ``size`` (checked by name only; the others are claimed:
    :meth:`recon.data.frame_cache.FrameCache.claim`)."""
    return [int(i) for i in indices if not cache.claim(video, video_part(i), size)]


def claim_video_frames(frames: Iterable[Frame]) -> None:
    """Claim the cache entries of the video frames among ``frames`` (in their ``frames_dir``; others skipped),
    so that pruning removes them last: a run given a scene loaded earlier (a block worker's) claims them again
    once it has started."""
    for f in frames:
        if f.video_frame is not None and f.frames_dir is not None:
            FrameCache(f.frames_dir).claim(f.image_path, video_part(f.video_frame), (f.width, f.height))


def decode_into_cache(video: Path, indices: Iterable[int], size: tuple[int, int], cache: FrameCache,
                      advance: Callable[[], None] | None = None) -> None:
    """Decode frames ``indices`` of ``video`` (one pass, streamed, stopping after the last one), downscale
    each to ``size`` and store it in ``cache``; ``advance()`` after each. MissingImageError naming the video
    when it ends before the last index."""
    todo = set(int(i) for i in indices)
    if not todo:
        return
    last = max(todo)
    for k, frame in enumerate(_iter_video(video)):
        if k in todo:
            cache.store(video, video_part(k), resized_rgb(frame, size))
            todo.discard(k)
            if advance is not None:
                advance()
        if k >= last:
            break
    if todo:
        raise MissingImageError(f"{video}: the video ended before frame {min(todo)} (asked for frames up to {last})")


def read_video_frame(frame: Frame) -> np.ndarray:
    """uint8 [H, W, 3] of a video ``frame`` at its camera's size, decoded from the video (read up to it) and
    stored in its cache folder for next time."""
    size = (frame.width, frame.height)
    for k, decoded in enumerate(_iter_video(frame.image_path)):
        if k == frame.video_frame:
            rgb = resized_rgb(decoded, size)
            if frame.frames_dir is not None:
                FrameCache(frame.frames_dir).store(frame.image_path, video_part(k), rgb)
            return rgb
    raise MissingImageError(f"{frame.image_path}: the video ended before frame {frame.video_frame}")


def cached_video_frame(frame: Frame) -> np.ndarray | None:
    """uint8 [H, W, 3] of a video ``frame`` from its cache folder, or None when it is not there (or damaged)."""
    if frame.frames_dir is None:
        return None
    return FrameCache(frame.frames_dir).load(frame.image_path, video_part(frame.video_frame),
                                             (frame.height, frame.width, 3))

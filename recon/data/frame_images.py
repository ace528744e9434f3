"""Training/test images of a scene, decoded lazily into a byte-budgeted LRU of uint8 RGBA, composited on demand.

Frames on disk are decoded on first use (Pillow; errors name the file, see :mod:`recon.data.scene`); frames with
an in-memory ``rgba`` attribute (:class:`recon.data.procedural_scene.InMemoryFrame`) are used as they are.
Decoded frames (uint8 [H, W, 4] RGBA, uint8 [H, W] loss masks and, when asked for, foreground
segmentations: :data:`CHANNELS`) are kept in an LRU of at most ``cache_bytes``
(default :func:`default_cache_bytes`, a quarter of the available memory, at most 1 GiB): a capture larger than that streams
from disk, the least recently used frames decoded again when asked for. Keeping alpha lets the trainer
composite on a random background each step; for a fixed background the composited float images are kept too,
in the budget's spare room only (they never evict a decoded frame) and in at most a quarter of it, so a training step does not convert its
image again while everything fits. A background thread decodes the frames the next steps will use
(:meth:`FrameImages.prefetch`).

Below the LRU sits the on-disk frame cache (:mod:`recon.data.frame_cache`, ``disk_cache``): a frame not in
memory is read from there when present (a plain uint8 ``.npy``: no JPEG/PNG decode, no downscale), else
decoded from its source and written there for the next run. Video frames (``Frame.video_frame``) are read
from their own cache folder (``Frame.frames_dir``, filled by the loader; :mod:`recon.data.video_frames`).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from recon.data.frame_cache import FrameCache
from recon.data.scene import (Frame, MissingImageError, _read_pil, is_16bit, load_mask, load_segmentation,
                              to_float_rgba)
from recon.data.video_frames import cached_video_frame, claim_video_frames, read_video_frame

CACHE_FRACTION = 0.25  # of the available memory: the default --cache-bytes ...
# ... at most this much: a decoded frame is read back from the on-disk frame cache in 0.1-0.4 ms, so a larger LRU
# buys little speed and costs resident memory (issue 55: a 31 x 150 capture at 640x360 must stay under 3 GB peak;
# measured with a 1 GiB budget: 1.79 GiB, docs/4dgs.md)
MAX_DEFAULT_CACHE_BYTES = 1 << 30
FALLBACK_CACHE_BYTES = 2 << 30  # when the available memory cannot be read
COMPOSITE_FRACTION = 0.25  # of the budget at most for composited float images (3x a decoded frame's bytes)
PROGRESS_MIN_IMAGES = 100  # decoding this many images at once shows a progress bar


def available_memory_bytes() -> int | None:
    """Bytes of memory available to new allocations (psutil, else ``os.sysconf``), or None when unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unsupported here: ask the OS directly
        try:
            return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None


def default_cache_bytes(fraction: float = CACHE_FRACTION, cap: int = MAX_DEFAULT_CACHE_BYTES) -> int:
    """The default decoded-image budget: ``fraction`` of the available memory (:data:`FALLBACK_CACHE_BYTES` when
    unknown), at most ``cap`` (:data:`MAX_DEFAULT_CACHE_BYTES`; ``--cache-bytes`` sets any budget)."""
    free = available_memory_bytes()
    return min(FALLBACK_CACHE_BYTES if free is None else int(free * fraction), int(cap))


def frame_rgba(frame: Frame) -> np.ndarray:
    """uint8 [H, W, 4] straight-alpha RGBA of ``frame`` (alpha 255 where the image has none).

    Raises MissingImageError naming the file when it is missing, undecodable or not the camera's size.
    """
    rgba = getattr(frame, "rgba", None)
    if rgba is not None:
        return np.asarray(rgba, dtype=np.uint8)
    if frame.video_frame is not None:
        return as_rgba(read_video_frame(frame))
    im = _read_pil(frame.image_path)
    if im.size != (frame.width, frame.height):
        raise MissingImageError(f"image file {frame.image_path} is {im.size[0]}x{im.size[1]}, its camera "
                                f"expects {frame.width}x{frame.height}")
    if is_16bit(im):
        return np.round(to_float_rgba(im) * 255.0).astype(np.uint8)
    return np.array(im if im.mode == "RGBA" else im.convert("RGBA"), dtype=np.uint8)  # 8-bit: exact as is


def as_rgba(arr: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 4] of uint8 [H, W, 3] (alpha 255) or [H, W, 4] (as is)."""
    if arr.shape[-1] == 4:
        return arr
    out = np.empty((*arr.shape[:2], 4), dtype=np.uint8)
    out[..., :3] = arr
    out[..., 3] = 255
    return out


# the single-channel images a frame may have besides its colour: kind -> (Frame attribute naming the file,
# reader of float32 [H, W] in [0, 1]). "mask": the dataset's loss mask (255 = use the pixel); "seg": a
# foreground segmentation (255 = foreground; Panoptic's seg/, the 4dgs --spacetime.seg-weight target)
CHANNELS = {"mask": ("mask_path", load_mask), "seg": ("segmentation_path", load_segmentation)}


def channel_path(frame: Frame, kind: str):
    """The file of ``frame``'s single-channel image ``kind`` (:data:`CHANNELS`), or None when it has none."""
    return getattr(frame, CHANNELS[kind][0])


def frame_channel_u8(frame: Frame, kind: str) -> np.ndarray | None:
    """uint8 [H, W] of ``frame``'s single-channel image ``kind`` (:data:`CHANNELS`: "mask" or "seg"), or None
    when it has none; MissingImageError naming the file when it is missing, undecodable or not the camera's size."""
    m = CHANNELS[kind][1](frame)
    return None if m is None else np.round(m * 255.0).astype(np.uint8)


def file_may_have_alpha(frame: Frame) -> bool:
    """Whether ``frame``'s image can hold a non-opaque pixel, from its header only (no decode): an in-memory
    frame, or an image mode with alpha or transparency."""
    if getattr(frame, "rgba", None) is not None:
        return True
    if frame.video_frame is not None:
        return False  # video frames are RGB
    from PIL import Image

    try:
        with Image.open(frame.image_path) as im:
            return im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
    except (OSError, ValueError):
        return True  # let the decode name the problem


def composite_on(rgba_u8: Tensor, background: Tensor) -> Tensor:
    """uint8 [..., H, W, 4] -> float32 [..., H, W, 3] in [0, 1] composited on ``background`` [3]."""
    rgba = rgba_u8.float() / 255.0
    alpha = rgba[..., 3:4]
    return rgba[..., :3] * alpha + background.to(rgba) * (1.0 - alpha)


def tensor_bytes(t: Tensor | None) -> int:
    """Bytes held by ``t`` (0 for None)."""
    return 0 if t is None else t.numel() * t.element_size()


class FrameImages:
    """Decoded images of a list of frames, on one device, indexed like the list; decoded on first use into an
    LRU of at most ``cache_bytes`` (module docstring). :meth:`prefetch` decodes images on a background thread
    ahead of their use (the trainer asks for the next step's views); thread-safe. ``disk_cache``: the on-disk
    frame cache of image files (None: none; video frames use their own, ``Frame.frames_dir``).
    ``segmentations``: the frames' foreground segmentations are a training target (4dgs
    ``--spacetime.seg-weight``): decoded alongside each image (prefetched, cached on disk and in the LRU as
    the loss masks are; with a disk cache decoded into it when the data is loaded, :meth:`fill_disk_cache`;
    without one only when drawn, their headers checked by the loader as the loss masks' are,
    :func:`recon.data.finalize.check_channel_headers`)."""

    def __init__(self, frames: Sequence[Frame], device: torch.device | str = "cpu", cache_bytes: int | None = None,
                 disk_cache: FrameCache | None = None, segmentations: bool = False):
        self.frames = list(frames)
        self.channels = ("mask", "seg") if segmentations else ("mask",)  # decoded with each image
        self.disk_cache = disk_cache
        self.device = torch.device(device)
        self.cache_bytes = default_cache_bytes() if cache_bytes is None else int(cache_bytes)
        self._lru: OrderedDict[tuple[str, int], Tensor] = OrderedDict()  # ("rgba"|"mask"|"seg"|"rgb", index) -> tensor
        self._rgb_keys: set[tuple[str, int]] = set()  # the composited entries (for self._rgb_bg)
        self._rgb_bg: tuple[float, ...] | None = None
        self._bytes = 0
        self._rgb_bytes = 0  # of which composited images
        self._lock = threading.RLock()
        self.decodes = 0  # frames decoded from their source so far (a re-decode after eviction counts again)
        self.disk_reads = 0  # frames read from the on-disk frame cache instead
        self._pending: dict[int, Future] = {}  # image index -> its decode on the prefetch thread
        self._pool: ThreadPoolExecutor | None = None

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def cached_bytes(self) -> int:
        """Bytes held by the LRU now (never above ``cache_bytes``)."""
        return self._bytes

    # ------------------------------------------------------------------ the LRU

    def _get(self, key: tuple[str, int]) -> Tensor | None:
        with self._lock:
            hit = self._lru.get(key)
            if hit is not None:
                self._lru.move_to_end(key)
            return hit

    def _put(self, key: tuple[str, int], value: Tensor, evict: bool) -> None:
        """Keep ``value`` under ``key`` if it fits in the budget, evicting least recently used entries
        (composited ones first) when ``evict``; otherwise only into spare room."""
        size = tensor_bytes(value)
        with self._lock:
            if key in self._lru or size > self.cache_bytes:
                return
            if evict and self._bytes + size > self.cache_bytes:  # over budget: scan for victims
                for victims in ([k for k in self._lru if k in self._rgb_keys], list(self._lru)):
                    for k in victims:
                        if self._bytes + size <= self.cache_bytes:
                            break
                        self._drop(k)
            if key[0] == "rgb" and self._rgb_bytes + size > self.cache_bytes * COMPOSITE_FRACTION:
                return
            if self._bytes + size <= self.cache_bytes:
                self._lru[key] = value
                self._bytes += size
                if key[0] == "rgb":
                    self._rgb_keys.add(key)
                    self._rgb_bytes += size

    def _drop(self, key: tuple[str, int]) -> None:
        value = self._lru.pop(key, None)
        if value is not None:
            self._bytes -= tensor_bytes(value)
            if key in self._rgb_keys:
                self._rgb_keys.discard(key)
                self._rgb_bytes -= tensor_bytes(value)

    # ------------------------------------------------------------------ images

    def load(self, i: int) -> Tensor:
        """uint8 [H, W, 4] RGBA of image ``i`` on the device (decoded now unless cached, or waited for when the
        prefetch thread is decoding it; cached when it fits), with its loss mask, if any, decoded alongside."""
        hit = self._get(("rgba", i))
        if hit is not None:
            return hit
        with self._lock:
            pending = self._pending.get(i)
        if pending is not None:
            return pending.result()
        return self._decode(i)

    def prefetch(self, indices: Sequence[int]) -> None:
        """Start decoding images ``indices`` on a background thread (those not cached nor already pending),
        so that a later :meth:`load` / :meth:`rgb` finds them decoded. A hint: wrong indices only cost work."""
        with self._lock:
            todo = [i for i in dict.fromkeys(int(i) for i in indices)
                    if ("rgba", i) not in self._lru and i not in self._pending]
            if not todo:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="frame-prefetch")
            for i in todo:
                self._pending[i] = self._pool.submit(self._prefetched, i)

    def _prefetched(self, i: int) -> Tensor:
        """The prefetch thread's decode of image ``i`` (then no longer pending)."""
        try:
            return self._decode(i)
        finally:
            with self._lock:
                self._pending.pop(i, None)

    def close(self) -> None:
        """Stop the prefetch thread (pending decodes finish first); the images stay usable."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def _decode(self, i: int) -> Tensor:
        """Decode image ``i`` (and its loss mask, and segmentation when asked for) now, into the LRU when they
        fit; the uint8 RGBA [H, W, 4]."""
        frame = self.frames[i]
        rgba = torch.from_numpy(self._rgba_u8(frame)).to(self.device)
        self._put(("rgba", i), rgba, evict=True)
        for kind in self.channels:  # cached alongside; None without one
            self.channel_u8(i, kind)
        return rgba

    def _on_disk(self, frame: Frame) -> bool:
        """Whether ``frame``'s image goes through :attr:`disk_cache` (a file on disk; not in memory, not video)."""
        return (self.disk_cache is not None and getattr(frame, "rgba", None) is None
                and frame.video_frame is None)

    def _rgba_u8(self, frame: Frame) -> np.ndarray:
        """uint8 [H, W, 4] of ``frame``: from the on-disk cache when there, else decoded (and stored there)."""
        shape = (frame.height, frame.width, None)
        cached = None
        if frame.video_frame is not None:
            cached = cached_video_frame(frame)
        elif self._on_disk(frame):
            cached = self.disk_cache.load(frame.image_path, "rgba", shape)
        if cached is not None:
            with self._lock:
                self.disk_reads += 1
            return as_rgba(cached)
        rgba = frame_rgba(frame)
        with self._lock:
            self.decodes += 1
        if self._on_disk(frame):
            opaque = bool((rgba[..., 3] == 255).all())
            self.disk_cache.store(frame.image_path, "rgba", rgba[..., :3] if opaque else rgba)
        return rgba

    def fill_disk_cache(self, progress: bool = True) -> int:
        """Decode every image (and loss mask, and segmentation when asked for) without an on-disk cache entry
        into :attr:`disk_cache`, on a few threads, without keeping them in memory; a progress bar when
        ``progress`` and there are at least PROGRESS_MIN_IMAGES of them. Every entry the images use is claimed
        (:meth:`recon.data.frame_cache.FrameCache.claim`: pruned last), video frames' too. Returns how many
        images were decoded (0 once the cache is complete: only the entries' names are checked, a damaged entry
        is decoded again when read). Without a disk cache nothing is decoded here: images, loss masks and
        segmentations are decoded when drawn (the loader checked the masks' and segmentations' headers)."""
        claim_video_frames(self.frames)
        cache = self.disk_cache
        if cache is None:
            return 0

        def missing_parts(frame: Frame) -> tuple[str, ...]:  # every part claimed, whether or not others are missing
            size = (frame.width, frame.height)
            parts = [("rgba", frame.image_path)] + [(k, channel_path(frame, k)) for k in self.channels]
            return tuple(part for part, path in parts if path is not None and not cache.claim(path, part, size))

        todo = [(f, parts) for f in self.frames if self._on_disk(f) and (parts := missing_parts(f))]
        if not todo:
            return 0

        def one(item: tuple[Frame, tuple[str, ...]]) -> None:
            frame, parts = item
            for part in parts:
                if part == "rgba":
                    rgba = frame_rgba(frame)
                    opaque = bool((rgba[..., 3] == 255).all())
                    cache.store(frame.image_path, "rgba", rgba[..., :3] if opaque else rgba)
                else:
                    cache.store(channel_path(frame, part), part, frame_channel_u8(frame, part))
            with self._lock:
                self.decodes += 1

        workers = max(1, min(4, os.cpu_count() or 1))
        with ThreadPoolExecutor(workers, thread_name_prefix="frame-cache") as pool:
            jobs = pool.map(one, todo)
            if progress and len(todo) >= PROGRESS_MIN_IMAGES:
                from rich.progress import track

                jobs = track(jobs, total=len(todo), transient=True,
                             description=f"caching {len(todo)} decoded images in {cache.folder}")
            for _ in jobs:
                pass
        return len(todo)

    def replace_frame(self, i: int, frame: Frame) -> None:
        """Use ``frame`` as image ``i`` from now on (its cached entries dropped)."""
        with self._lock:
            self.frames[i] = frame
            for kind in ("rgba", *CHANNELS, "rgb"):
                self._drop((kind, i))

    def rgb(self, i: int, background: Tensor) -> Tensor:
        """float32 [H, W, 3] image ``i`` composited on ``background`` [3] (RGB in [0, 1]). Results for the
        most recent background are kept in the budget's spare room (a new background drops them); do not
        modify the returned tensor in place."""
        key = tuple(float(v) for v in background.detach().cpu().reshape(-1))
        with self._lock:
            if key != self._rgb_bg:
                for k in list(self._rgb_keys):
                    self._drop(k)
                self._rgb_bg = key
        hit = self._get(("rgb", i))
        if hit is not None:
            return hit
        out = composite_on(self.load(i), background)
        with self._lock:
            if key == self._rgb_bg:
                self._put(("rgb", i), out, evict=False)
        return out

    def channel_u8(self, i: int, kind: str) -> Tensor | None:
        """uint8 [H, W] of image ``i``'s single-channel image ``kind`` (:data:`CHANNELS`), or None when it has
        none: from the LRU, else the on-disk cache, else decoded (and stored in both)."""
        frame = self.frames[i]
        if channel_path(frame, kind) is None:
            return None
        m = self._get((kind, i))
        if m is None:
            m = torch.from_numpy(self._channel_from_source(frame, kind)).to(self.device)
            self._put((kind, i), m, evict=True)
        return m

    def _channel_from_source(self, frame: Frame, kind: str) -> np.ndarray:
        """uint8 [H, W] of ``frame``'s single-channel image ``kind`` (which it has): from the on-disk cache when
        there, else decoded (and stored there)."""
        path = channel_path(frame, kind)
        if self.disk_cache is None:
            return frame_channel_u8(frame, kind)
        cached = self.disk_cache.load(path, kind, (frame.height, frame.width))
        if cached is not None:
            return cached
        m = frame_channel_u8(frame, kind)
        self.disk_cache.store(path, kind, m)
        return m

    def mask_u8(self, i: int) -> Tensor | None:
        """uint8 [H, W] loss mask of image ``i`` (255 = use the pixel), or None when it has none."""
        return self.channel_u8(i, "mask")

    def segmentation(self, i: int) -> Tensor | None:
        """float32 [H, W] foreground segmentation of image ``i`` in [0, 1] (1 = foreground), or None when it
        has none."""
        m = self.channel_u8(i, "seg")
        return None if m is None else m.float() / 255.0

    def mask(self, i: int) -> Tensor | None:
        """float32 [H, W, 1] mask of image ``i`` in [0, 1] (1 = use the pixel), or None when it has none."""
        m = self.mask_u8(i)
        return None if m is None else (m.float() / 255.0)[..., None]

    def has_alpha(self) -> bool:
        """True when any image has a non-opaque pixel (only images whose header allows alpha are decoded)."""
        return any(file_may_have_alpha(f) and bool((self.load(i)[..., 3] < 255).any())
                   for i, f in enumerate(self.frames))

    def _all(self, one, what: str) -> list:
        """``[one(i) for every image]``, with a progress bar when that decodes many images."""
        indices = range(len(self))
        if len(self) >= PROGRESS_MIN_IMAGES:
            from rich.progress import track

            indices = track(indices, description=f"loading {what}", transient=True)
        return [one(i) for i in indices]

    @property
    def rgba(self) -> list[Tensor]:
        """uint8 [H, W, 4] of every image (all decoded now and held by the caller: for models that need the
        whole pixel table, as the NeRF's ray batches)."""
        return self._all(self.load, "images")

    @property
    def masks(self) -> list[Tensor | None]:
        """uint8 [H, W] loss mask of every image, or None per image without one (as :attr:`rgba`)."""
        if all(f.mask_path is None for f in self.frames):
            return [None] * len(self)
        return self._all(self.mask_u8, "masks")

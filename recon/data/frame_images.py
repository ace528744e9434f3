"""Training/test images of a scene kept in memory as uint8 RGBA, composited on demand.

Frames on disk are decoded once (Pillow; errors name the file, see :mod:`recon.data.scene`); frames with
an in-memory ``rgba`` attribute (:class:`recon.data.procedural_scene.InMemoryFrame`) are used as they
are. Keeping alpha lets the trainer composite on a random background each step; for a fixed background
the composited float images are kept (up to ``cache_bytes``), so a training step does not convert its
image again.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from recon.data.scene import Frame, MissingImageError, _map_threads, _read_pil, load_mask, to_float_rgba


def frame_rgba(frame: Frame) -> np.ndarray:
    """uint8 [H, W, 4] straight-alpha RGBA of ``frame`` (alpha 255 where the image has none).

    Raises MissingImageError naming the file when it is missing, undecodable or not the camera's size.
    """
    rgba = getattr(frame, "rgba", None)
    if rgba is not None:
        return np.asarray(rgba, dtype=np.uint8)
    im = _read_pil(frame.image_path)
    if im.size != (frame.width, frame.height):
        raise MissingImageError(f"image file {frame.image_path} is {im.size[0]}x{im.size[1]}, its camera "
                                f"expects {frame.width}x{frame.height}")
    return np.round(to_float_rgba(im) * 255.0).astype(np.uint8)


def composite_on(rgba_u8: Tensor, background: Tensor) -> Tensor:
    """uint8 [..., H, W, 4] -> float32 [..., H, W, 3] in [0, 1] composited on ``background`` [3]."""
    rgba = rgba_u8.float() / 255.0
    alpha = rgba[..., 3:4]
    return rgba[..., :3] * alpha + background.to(rgba) * (1.0 - alpha)


DEFAULT_CACHE_BYTES = 2 << 30  # composited float32 images kept for a fixed background (2 GiB)


class FrameImages:
    """Decoded images of a list of frames, on one device, indexed like the list."""

    def __init__(self, frames: Sequence[Frame], device: torch.device | str = "cpu",
                 cache_bytes: int = DEFAULT_CACHE_BYTES):
        arrays = _map_threads(frame_rgba, list(frames))
        self.frames = list(frames)
        self.rgba = [torch.from_numpy(a).to(device) for a in arrays]
        masks = _map_threads(load_mask, list(frames))  # float [H, W] in [0, 1], or None
        self.masks = [None if m is None else torch.from_numpy(np.round(m * 255.0).astype(np.uint8)).to(device)
                      for m in masks]
        self.cache_bytes = cache_bytes
        self._cache: dict[int, Tensor] = {}  # image index -> composited on self._cache_bg
        self._cache_bg: tuple[float, ...] | None = None
        self._cached_bytes = 0

    def __len__(self) -> int:
        return len(self.rgba)

    def rgb(self, i: int, background: Tensor) -> Tensor:
        """float32 [H, W, 3] image ``i`` composited on ``background`` [3] (RGB in [0, 1]). Results for
        the most recent background are cached while they fit in ``cache_bytes`` (a new background
        empties the cache); do not modify the returned tensor in place."""
        key = tuple(float(v) for v in background.detach().cpu().reshape(-1))
        if key != self._cache_bg:
            self._cache, self._cache_bg, self._cached_bytes = {}, key, 0
        hit = self._cache.get(i)
        if hit is not None:
            return hit
        out = composite_on(self.rgba[i], background)
        size = out.numel() * out.element_size()
        if self._cached_bytes + size <= self.cache_bytes:
            self._cache[i] = out
            self._cached_bytes += size
        return out

    def mask(self, i: int) -> Tensor | None:
        """float32 [H, W, 1] mask of image ``i`` in [0, 1] (1 = use the pixel), or None when it has none."""
        m = self.masks[i]
        return None if m is None else (m.float() / 255.0)[..., None]

    def has_alpha(self) -> bool:
        """True when any image has a non-opaque pixel."""
        return any(bool((a[..., 3] < 255).any()) for a in self.rgba)

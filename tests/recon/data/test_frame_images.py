"""FrameImages: compositing on a background, the composites kept for a fixed background, frames decoded lazily
into an LRU within a byte budget (issue 55)."""

import dataclasses

import numpy as np
import torch
from PIL import Image

from recon.data import load_scene
from recon.data.frame_images import (
    FrameImages,
    available_memory_bytes,
    composite_on,
    default_cache_bytes,
    frame_rgba,
)
from recon.data.procedural_scene import procedural_scene
from recon.data.scene import _read_pil, to_float_rgba


def _images(cache_bytes):
    scene = procedural_scene(data_factor=4)
    return FrameImages(scene.frames_train[:3], cache_bytes=cache_bytes)


def test_rgb_is_the_composite_and_is_cached_for_one_background():
    images = _images(cache_bytes=1 << 30)
    white, black = torch.ones(3), torch.zeros(3)
    first = images.rgb(1, white)
    assert torch.equal(first, composite_on(images.rgba[1], white))
    assert images.rgb(1, white) is first  # cached
    assert (images.rgba[1][..., 3] < 255).any()  # the image has transparent pixels: backgrounds differ
    on_black = images.rgb(1, black)  # a new background empties the cache
    assert torch.equal(on_black, composite_on(images.rgba[1], black))
    assert not torch.equal(on_black, first)
    assert images.rgb(1, white) is not first and torch.equal(images.rgb(1, white), first)


def test_cache_respects_its_byte_budget():
    images = _images(cache_bytes=0)
    bg = torch.ones(3)
    assert images.rgb(0, bg) is not images.rgb(0, bg) and images.cached_bytes == 0
    rgba_bytes = images.load(0).numel()
    one = 4 * images.rgb(0, bg).numel() * 4  # composites may take a quarter of the budget: one fits
    images = _images(cache_bytes=one)  # room for one composite and a few decoded images
    a0 = images.rgb(0, bg)
    assert images.rgb(0, bg) is a0 and images.cached_bytes == rgba_bytes + one // 4
    a1 = images.rgb(1, bg)  # no room for a second composite (a quarter of the budget), image 1 decoded
    assert images.rgb(0, bg) is a0 and images.rgb(1, bg) is not a1
    assert images.cached_bytes == 2 * rgba_bytes + one // 4
    assert images.cached_bytes <= one
    tight = _images(cache_bytes=one // 4 + rgba_bytes)  # a composite and one decoded image
    t0 = tight.rgb(0, bg)
    tight.load(1)  # decoding evicts the composite first (composites never evict a decode)
    assert tight.rgb(0, bg) is not t0 and tight.cached_bytes <= one // 4 + rgba_bytes


def test_lru_never_exceeds_its_budget_and_keeps_the_recent_frames(tmp_path):
    """Random access over more frames than fit: the LRU stays within its byte budget after every call."""
    scene = procedural_scene(data_factor=4)
    frames = scene.frames_train[:8]
    size = FrameImages(frames).load(0).numel()  # uint8 bytes of one decoded frame
    budget = 3 * size + size // 2
    images = FrameImages(frames, cache_bytes=budget)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        i = int(torch.randint(len(frames), (1,), generator=gen))
        images.rgb(i, torch.rand(3, generator=gen) if i % 2 else torch.ones(3))
        assert images.cached_bytes <= budget
    images.load(5)
    assert images.load(5) is images.load(5)  # a just-used frame is kept
    decodes = images.decodes
    for i in range(len(frames)):
        images.load(i)
    assert images.decodes > decodes and images.cached_bytes <= budget  # frames were evicted and decoded again


def _eager_rgba(path) -> np.ndarray:
    """The old all-up-front decode: uint8 [H, W, 4] through float RGBA, as FrameImages did before issue 55."""
    return np.round(to_float_rgba(_read_pil(path)) * 255.0).astype(np.uint8)


def test_a_lazily_loaded_frame_equals_the_eagerly_loaded_one(tmp_path):
    from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic

    scene = load_scene(write_tiny_panoptic(tmp_path / "pan"))  # JPEG, no alpha
    rng = np.random.default_rng(1)
    png = tmp_path / "rgba.png"
    Image.fromarray(rng.integers(0, 256, (12, 16, 4), dtype=np.uint8), "RGBA").save(png)
    grey = tmp_path / "grey.png"
    Image.fromarray(rng.integers(0, 256, (12, 16), dtype=np.uint8), "L").save(grey)
    frames = scene.frames_train[:2] + [dataclasses.replace(scene.frames_train[0], image_path=p, name=p.name)
                                       for p in (png, grey)]
    images = FrameImages(frames, cache_bytes=0)  # nothing kept: every call decodes
    for i, frame in enumerate(frames):
        lazy = images.load(i)
        assert lazy.dtype == torch.uint8 and np.array_equal(lazy.numpy(), _eager_rgba(frame.image_path)), frame.name
    assert images.has_alpha() and not FrameImages(frames[:2]).has_alpha()


def test_default_budget_is_a_fraction_of_available_memory():
    free = available_memory_bytes()
    assert free is not None and free > 0
    assert 0 < default_cache_bytes() <= free
    assert FrameImages([]).cache_bytes > 0


def test_prefetch_decodes_ahead_on_a_thread_and_load_uses_it():
    scene = procedural_scene(data_factor=4)
    images = FrameImages(scene.frames_train[:4], cache_bytes=1 << 30)
    images.prefetch([2, 3, 2])
    images.close()  # waits for the pending decodes
    assert images.decodes == 2 and images.cached_bytes == 2 * images.load(2).numel()
    assert torch.equal(images.load(3), torch.from_numpy(frame_rgba(scene.frames_train[3])))
    assert images.decodes == 2  # loads after a prefetch decode nothing again
    images.prefetch([2])  # cached: nothing to do, no thread started
    assert images._pool is None and images.decodes == 2
    images.prefetch([0])
    assert torch.equal(images.load(0), torch.from_numpy(frame_rgba(scene.frames_train[0])))  # waits if pending
    images.close()
    assert images.decodes == 3


def test_prefetch_with_a_tiny_budget_stays_within_it():
    scene = procedural_scene(data_factor=4)
    frames = scene.frames_train[:6]
    size = FrameImages(frames).load(0).numel()
    images = FrameImages(frames, cache_bytes=2 * size)
    for i in range(len(frames)):
        images.prefetch([(i + 1) % len(frames)])
        images.rgb(i, torch.ones(3))
        assert images.cached_bytes <= 2 * size
    images.close()
    assert images.cached_bytes <= 2 * size

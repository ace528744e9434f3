"""FrameImages: compositing on a background, and the cache kept for a fixed background."""

import torch

from recon.data.procedural_scene import procedural_scene
from recon.data.frame_images import FrameImages, composite_on


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
    assert images.rgb(0, bg) is not images.rgb(0, bg)
    one = images.rgb(0, bg).numel() * 4
    images = _images(cache_bytes=one)  # room for exactly one image
    a0, a1 = images.rgb(0, bg), images.rgb(1, bg)
    assert images.rgb(0, bg) is a0 and images.rgb(1, bg) is not a1

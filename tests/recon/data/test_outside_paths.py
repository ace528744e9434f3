"""A dataset file path pointing outside the dataset folder (datasets/README.md): read where it is; the
downscale cache made from it stays under the cache folder."""

from __future__ import annotations

import json

from recon.data import load_scene

from tests.corpus.bad_files import nerfstudio_dataset, write_png


def test_image_outside_the_folder_is_read_and_its_cache_stays_inside(tmp_path):
    root = nerfstudio_dataset(lambda meta: None)(tmp_path / "data")
    outside = tmp_path / "elsewhere" / "far.png"
    write_png(outside, (24, 16))
    meta = json.loads((root / "transforms.json").read_text())
    meta["frames"][0]["file_path"] = "../../elsewhere/far.png"
    (root / "transforms.json").write_text(json.dumps(meta))
    cache = tmp_path / "cache"
    scene = load_scene(root, data_factor=2, cache_dir=cache)
    frame = next(f for f in scene.frames if "far" in str(f.image_path) or "external" in str(f.image_path))
    assert scene.load_image(frame).shape[:2] == (8, 12)
    made = [p for p in cache.rglob("*.png")] + [p for p in root.rglob("*_2/**/*.png")]
    assert made and all(cache in p.parents or root in p.parents for p in made)
    assert not any(p.name.startswith("far") for p in (tmp_path / "elsewhere").iterdir() if p != outside)

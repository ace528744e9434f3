"""The fast CI subset of scripts/fuzz_readers.py: for most formats, a sample of its hostile variants run
in-process; each is a clear one-line error naming the file or a correct load (the oracle of
tests/corpus/load_oracle.py: equal to the good file's load or changed only where the mutation touched, finite,
in range; never ``wrong``), never a traceback or a hang, with a small peak allocation (tracemalloc). The full
corpus: ``python scripts/fuzz_readers.py``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_readers.py"
FORMATS = ["ply", "spz", "splat", "glb", "ply4d", "gimg", "png", "camera-path", "keyframes", "panoptic-npz"]
SAMPLE = 40  # cases per format: every 40th-ish variant plus the good file and the special entries
# the formats of tests/corpus/fuzz_formats.py whose cases load a whole dataset or run folder: fewer cases each
# (N3DV's videos are left to the full run: each case decodes three videos with ffmpeg)
FOLDER_FORMATS = ["colmap-cameras.bin", "colmap-images.bin", "colmap-points3D.txt", "checkpoint", "config-yaml",
                  "history-json", "metrics-json", "blocks-json", "sequence-manifest", "mesh-obj", "mesh-ply",
                  "mesh-glb", "mesh-obj-sdf", "dnerf-transforms", "panoptic-meta", "n3dv-poses", "transforms",
                  "lod-manifest"]
# tests/corpus/fuzz_formats_viewer.py: the viewer's loaders, render --splats, dataset masks, the frame cache, the
# downscale cache (a dataset's own images_2 file, the cache's key files)
VIEWER_FORMATS = ["view-ply", "view-spz", "view-splat", "view-ply4d", "view-lod-manifest", "view-lod-chunk",
                  "view-run-splats", "render-splats", "nerfstudio-mask", "panoptic-seg", "frame-cache-entry",
                  "downscale-image", "downscale-cache-key"]
FOLDER_SAMPLE = 16
CASE_TIMEOUT = 60  # seconds: a reader still running then (a FIFO opened) fails the test instead of hanging it


def _fuzz():
    spec = importlib.util.spec_from_file_location("fuzz_readers", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fmt", FORMATS + FOLDER_FORMATS + VIEWER_FORMATS)
def test_fuzz_sample_has_no_tracebacks_and_no_wrong_loads(fmt, tmp_path):
    fuzz = _fuzz()
    good, read, suffix = fuzz.readers()[fmt]
    cases = fuzz.all_cases(good())
    reference = fuzz.reference_load(fmt, read, cases[0][1], suffix)
    step = max(1, len(cases) // (SAMPLE if fmt in FORMATS else FOLDER_SAMPLE))
    sample = cases[:1] + cases[1:-3:step] + cases[-3:]  # the good file, a spread, folder / fifo / dev-zero
    bad = []
    for i, (name, data) in enumerate(sample):
        folder = tmp_path / str(i)
        folder.mkdir()
        path = fuzz.write_case(folder, suffix, name, data)
        result = fuzz.run_case(read, path, CASE_TIMEOUT, reference, name)
        if name == "good" and result["outcome"] != "load":
            bad.append((name, result))
        elif result["outcome"] not in ("error", "load") or result["peak_mb"] > 256:
            bad.append((name, result))
    assert not bad, bad


def test_the_oracle_flags_a_wrong_load():
    """A reader that loaded damaged data silently (a value changed in every record, a NaN, a record lost from
    the middle) is ``wrong``; the good load, one changed record and a dropped tail are not."""
    import numpy as np

    from tests.corpus.load_oracle import judge

    good = {"means": np.arange(30.0).reshape(10, 3), "width": np.asarray(24)}
    assert judge("flip-9.1", good, dict(good)) is None
    one = {**good, "means": good["means"].copy()}
    one["means"][4, 1] += 1
    assert judge("flip-9.1", good, one) is None
    every = {**good, "means": good["means"] + 1}
    assert "changed 10" in judge("flip-9.1", good, every)
    nan = {**good, "means": one["means"].copy()}
    nan["means"][4, 1] = np.nan
    assert "non-finite" in judge("flip-9.1", good, nan)
    assert judge("truncate-100", good, {**good, "means": good["means"][:6]}) is None
    assert "truncated" in judge("truncate-100", good, {**good, "means": np.delete(good["means"], 2, 0) + 0.5})
    assert "out-of-range" in judge("flip-1.1", good, {**good, "width": np.asarray(0)})
    assert "other values" in judge("zeros-1mb", good, one)


def test_a_mesh_glb_mutated_into_another_valid_file_is_judged_by_what_it_means(tmp_path):
    """The fuzzer's mesh-glb ``flip-185.1``: the index accessor's ``bufferView`` key misspelt. The Khronos
    validator finds no error in that file (an accessor without a buffer view is zeros), so its correct load is
    80 degenerate triangles at vertex 0, not the good file's sphere: the oracle re-derives the expectation from
    the file (load_oracle.gltf_mesh_expectation) and accepts trimesh's load; a reader that kept the good
    geometry is wrong. A file whose POSITION bytes disagree with its declared bounds gets no re-derived
    expectation (it is not valid glTF: the reader must refuse it)."""
    import json
    import struct

    from tests.corpus.bad_files import _position_view_offset_lost, glb_container, glb_mesh_edited
    from tests.corpus.load_oracle import canonical, gltf_mesh_expectation, judge

    fuzz = _fuzz()
    good_bytes, read, _ = fuzz.readers()["mesh-glb"]
    data = good_bytes()
    good_path = tmp_path / "good.glb"
    good_path.write_bytes(data)
    good = canonical(read(good_path), tmp_path)
    length = struct.unpack_from("<I", data, 12)[0]
    doc = json.loads(data[20:20 + length])
    indices = doc["accessors"][doc["meshes"][0]["primitives"][0]["indices"]]
    indices["bufderView"] = indices.pop("bufferView")
    case = tmp_path / "case.glb"
    case.write_bytes(glb_container(doc, data[20 + length + 8:]))

    expected = gltf_mesh_expectation(case, good)
    loaded = canonical(read(case), tmp_path)
    assert expected is not None and (expected["parts.0.triangles"] == expected["parts.0.vertices"][0]).all()
    assert judge("flip-185.1", expected, loaded) is None  # trimesh's zeros: what the file means
    assert "changed 8" in judge("flip-185.1", good, loaded)  # against the good file's sphere: 80 triangles
    assert judge("flip-185.1", expected, good) is not None  # a reader that ignored the change would be wrong

    bad = tmp_path / "bad.glb"
    bad.write_bytes(glb_mesh_edited(_position_view_offset_lost)())
    assert gltf_mesh_expectation(bad, good) is None

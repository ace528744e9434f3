"""SplatDataset over a mesh2splat index: shapes, labels, normalisation, deterministic sub-sampling."""

import json

import numpy as np
import pytest
import torch

from recon.core.splat_data import random_splats
from recon.data.splat_dataset import SplatDataset
from recon.data.splat_index import append_row
from recon.export import read_splats, write_splats


def make_index(root, counts):
    """An output folder with one random splat file per (label, count) and its rows; plus a failed row and a
    partial last line (a killed batch)."""
    root.mkdir(parents=True, exist_ok=True)
    for k, (label, n) in enumerate(counts):
        source = f"{label}/obj_{k}.ply"
        data = random_splats(n, sh_degree=0, seed=k)
        data.means = data.means * 3.0 + 5.0
        (root / label).mkdir(exist_ok=True)
        write_splats(root / f"{source}.ply", data)
        append_row(root, {"source": source, "output": f"{source}.ply", "label": label, "status": "done"})
    append_row(root, {"source": "bad/empty.obj", "output": None, "label": "bad", "status": "failed",
                      "reason": "empty mesh"})
    with open(root / "index.jsonl", "a") as f:
        f.write('{"source": "chair/cut')


def test_shapes_labels_and_normalisation(tmp_path):
    make_index(tmp_path, [("chair", 300), ("table", 120), ("chair", 50)])
    ds = SplatDataset(tmp_path, num_points=200, seed=0)
    assert len(ds) == 3 and ds.classes == ["chair", "table"]
    for i in range(len(ds)):
        item = ds[i]
        assert item["means"].shape == (200, 3) and item["scales"].shape == (200, 3)
        assert item["rotations"].shape == (200, 4) and item["opacities"].shape == (200,)
        assert item["colors"].shape == (200, 3)
        assert all(item[k].dtype == torch.float32 for k in ("means", "scales", "rotations", "opacities", "colors"))
        assert torch.allclose(item["rotations"].norm(dim=1), torch.ones(200), atol=1e-5)
        assert (item["opacities"] > 0).all() and (item["opacities"] < 1).all()
        assert (item["colors"] >= 0).all() and (item["colors"] <= 1).all()
        assert item["means"].norm(dim=1).max() <= 1.0 + 1e-5  # normalised (sub-sample of the unit ball)
        assert ds.classes[int(item["label"])] == item["source"].split("/")[0]
    full = SplatDataset(tmp_path)[0]  # every Gaussian, normalised: farthest mean at exactly 1
    assert full["means"].shape[0] == 300
    assert float(full["means"].norm(dim=1).max()) == pytest.approx(1.0, abs=1e-5)
    raw = SplatDataset(tmp_path, normalize=False)[0]  # the stored parameters, activated
    stored = read_splats(tmp_path / "chair/obj_0.ply.ply")
    assert np.array_equal(raw["means"].numpy(), stored.means)
    assert np.allclose(raw["scales"].numpy(), np.exp(stored.log_scales), rtol=1e-6)
    assert np.allclose(full["scales"].numpy() / np.exp(stored.log_scales), full["scales"][0, 0].item()
                       / np.exp(stored.log_scales[0, 0]), rtol=1e-4)  # normalising scales every Gaussian alike


def test_sub_sampling_is_deterministic(tmp_path):
    make_index(tmp_path, [("chair", 300), ("table", 120), ("chair", 50)])
    a, b = SplatDataset(tmp_path, num_points=100, seed=4), SplatDataset(tmp_path, num_points=100, seed=4)
    for i in range(3):
        assert torch.equal(a[i]["means"], b[i]["means"]) and torch.equal(a[i]["means"], a[i]["means"])
    other = SplatDataset(tmp_path, num_points=100, seed=5)
    assert not torch.equal(a[0]["means"], other[0]["means"])
    small = SplatDataset(tmp_path, num_points=80, seed=0, normalize=False)[1]  # chair/obj_2: 50 Gaussians -> all + 30 repeats
    assert small["means"].shape == (80, 3)
    assert len(np.unique(small["means"].numpy(), axis=0)) == 50
    loader = torch.utils.data.DataLoader(a, batch_size=3)
    batch = next(iter(loader))
    assert batch["means"].shape == (3, 100, 3) and batch["label"].tolist() == [0, 0, 1]  # sorted by source


def test_missing_index_is_one_line(tmp_path):
    from recon.data.scene import DataFormatError

    with pytest.raises(DataFormatError, match="no such index"):
        SplatDataset(tmp_path)
    with pytest.raises(ValueError, match="num_points"):
        make_index(tmp_path / "x", [("a", 10)]) or SplatDataset(tmp_path / "x", num_points=0)


def test_index_rows_survive_partial_lines(tmp_path):
    make_index(tmp_path, [("chair", 10)])
    append_row(tmp_path, {"source": "z.obj", "status": "failed", "reason": "x"})  # after the partial line
    lines = (tmp_path / "index.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["source"] == "z.obj"
    from recon.data.splat_index import read_index

    assert [r["source"] for r in read_index(tmp_path)] == ["chair/obj_0.ply", "bad/empty.obj", "z.obj"]

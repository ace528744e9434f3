"""`splatforge sdf fit` (issue 54): signed distances of the samples, a fitted field's marching-cubes mesh close to
the input (both decoders), the field file loading back, open meshes refused in one line, the CLI's files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import trimesh

from recon.geometry.mesh_metrics import chamfer_distance, normal_consistency
from recon.geometry.sdf_fit import (Normalisation, SDFConfig, extract_mesh, fit_sdf, load_closed_mesh, load_sdf,
                                    save_sdf, sdf_samples)
from tests.recon.image.test_image_cli import run

SMALL = dict(levels=3, features=2, base_res=8, max_res=32, neurons=16, hidden=32, steps=500, batch=4096,
             pool=1 << 16, resolution=48)


def sphere():
    m = trimesh.creation.icosphere(subdivisions=3, radius=0.8)
    return np.asarray(m.vertices), np.asarray(m.faces)


def test_normalisation_round_trip():
    v, _ = sphere()
    norm = Normalisation.of(v + 3.0)
    u = norm.to_unit(v + 3.0)
    assert u.min() >= 0.04 and u.max() <= 0.96
    assert np.allclose(norm.from_unit(u), v + 3.0)


def test_sample_distances_are_signed():
    v, f = sphere()
    pts, d = sdf_samples(v, f, Normalisation.of(v), 4000, np.random.default_rng(0))
    r = np.linalg.norm(pts, axis=1)
    # the icosphere's faces sit slightly inside the 0.8 sphere: compare away from the surface
    far = np.abs(r - 0.8) > 0.02
    assert np.all(np.sign(d[far]) == np.sign(r[far] - 0.8))
    assert np.abs(d[far] - (r[far] - 0.8)).max() < 0.02


@pytest.mark.parametrize("decoder,encoding", [("rbf", "dense"), ("mlp", "hash")])
def test_fit_recovers_a_sphere(decoder, encoding, tmp_path):
    v, f = sphere()
    field, norm, info = fit_sdf(v, f, SDFConfig(decoder=decoder, encoding=encoding, **SMALL))
    mv, mf = extract_mesh(field, norm, 48)
    chamfer = chamfer_distance(mv, mf, v, f, samples=20_000)
    assert chamfer["chamfer_pct"] < 1.0, chamfer
    assert normal_consistency(mv, mf, v, f, 20_000) > 0.9  # random orientations score 0.5
    save_sdf(tmp_path / "sdf.pt", field, norm)
    again, norm2 = load_sdf(tmp_path / "sdf.pt")
    u = torch.rand(100, 3)
    assert torch.equal(again(u), field(u).detach()) and norm2 == norm


def test_open_mesh_is_refused_small_holes_filled_seams_merged(tmp_path):
    flat = trimesh.Trimesh([[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2]], process=False)
    flat.export(tmp_path / "flat.ply")
    with pytest.raises(ValueError, match="flat.ply: not watertight"):
        load_closed_mesh(tmp_path / "flat.ply")
    box = trimesh.creation.box()
    trimesh.Trimesh(box.vertices, box.faces[2:], process=False).export(tmp_path / "open.obj")  # one quad missing
    v, f, notes = load_closed_mesh(tmp_path / "open.obj")
    assert len(f) == 12 and notes == ["holes filled to close the surface (trimesh.repair.fill_holes)"]
    # an OBJ whose texture seams split the vertices is merged by position
    ball = trimesh.creation.icosphere(subdivisions=1)
    split_v = ball.vertices[ball.faces.reshape(-1)]
    trimesh.Trimesh(split_v, np.arange(len(split_v)).reshape(-1, 3), process=False).export(tmp_path / "split.obj")
    v, f, notes = load_closed_mesh(tmp_path / "split.obj")
    assert len(v) == len(ball.vertices) and not notes


def test_cli_writes_mesh_field_and_metrics(tmp_path, capsys):
    trimesh.creation.icosphere(subdivisions=3, radius=0.8).export(tmp_path / "ball.ply")
    code, out, err = run(["sdf", "fit", tmp_path / "ball.ply", "--out", tmp_path / "o", "--steps", "150",
                          "--resolution", "40", "--samples", "32768", "--no-progress"], capsys)
    assert code == 0, err
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    mesh = trimesh.load(tmp_path / "o" / "mesh.ply", process=False)
    ball = trimesh.load(tmp_path / "ball.ply", process=False)
    again = chamfer_distance(mesh.vertices, mesh.faces, ball.vertices, ball.faces, samples=100_000)
    assert metrics["chamfer_pct"] == pytest.approx(again["chamfer_pct"], rel=1e-4)  # the file's mesh (float32 in the PLY) was measured
    assert metrics["parameters"] > 0 and metrics["mesh_faces"] == len(mesh.faces)
    load_sdf(tmp_path / "o" / "sdf.pt")
    code, out, err = run(["sdf", "mesh", tmp_path / "o" / "sdf.pt", "--out", tmp_path / "again.obj", "--resolution",
                          "24"], capsys)
    assert code == 0, err
    assert len(trimesh.load(tmp_path / "again.obj").faces) > 100
    code, out, err = run(["sdf", "mesh", tmp_path / "ball.ply", "--out", tmp_path / "x.ply"], capsys)
    assert code == 2 and "cannot load the SDF" in err
    code, out, err = run(["sdf", "fit", tmp_path / "ball.ply", "--out", tmp_path / "o", "--steps", "5",
                          "--no-progress"], capsys)
    assert code == 2 and "exists" in err.lower()
    (tmp_path / "flat.ply").write_bytes(trimesh.Trimesh([[0, 0, 0], [1, 0, 0], [0, 1, 0]], [[0, 1, 2]]).export(
        file_type="ply"))
    code, out, err = run(["sdf", "fit", tmp_path / "flat.ply", "--out", tmp_path / "p", "--no-progress"], capsys)
    assert code == 2 and "not watertight" in err and err.count("\n") == 1


def test_defaults_per_field():
    rbf, mlp = SDFConfig(), SDFConfig(encoding="hash", decoder="mlp")
    assert (rbf.max_res, rbf.lr) == (64, 5e-3) and (mlp.max_res, mlp.lr) == (128, 1e-2)
    assert SDFConfig(max_res=32, lr=0.1).max_res == 32 and SDFConfig(lr=0.1).lr == 0.1  # given values stay

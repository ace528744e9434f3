"""Floater removal (recon/run/floaters.py): Gaussians whose blending weight stays below the threshold in every
training view go (outside every frustum, hidden behind an opaque wall, too faint); the visible ones stay."""

import math

import numpy as np
import pytest

from rasterizer.camera import Camera
from recon.core.splat_data import SplatData
from recon.run.floaters import max_blend_weights, remove_floaters


def cameras():
    """Three 32 x 32 cameras near the origin looking down +z (OpenCV)."""
    K = np.array([[30.0, 0, 16], [0, 30.0, 16], [0, 0, 1]])
    out = []
    for dx in (-0.2, 0.0, 0.2):
        w2c = np.eye(4)
        w2c[0, 3] = -dx
        out.append(Camera.from_arrays(w2c, K, 32, 32))
    return out


def gaussians(means, scale, opacity):
    n = len(means)
    logit = math.log(opacity / (1 - opacity))
    return dict(means=np.asarray(means, np.float32), quats=np.tile([1.0, 0, 0, 0], (n, 1)).astype(np.float32),
                log_scales=np.full((n, 3), math.log(scale), np.float32),
                logit_opacities=np.full(n, logit, np.float32), sh=np.full((n, 1, 3), 0.5, np.float32))


def planted_scene():
    """(SplatData, groups: name -> index array): a visible front layer and an opaque wall, with invisible
    Gaussians planted behind the wall, behind the cameras and too faint to matter."""
    rng = np.random.default_rng(0)
    g = np.linspace(-2.0, 2.0, 16)
    wall = np.array([[x, y, 3.0] for x in g for y in g])
    parts = {
        "front": gaussians(rng.uniform([-0.8, -0.8, 1.8], [0.8, 0.8, 2.2], (20, 3)), 0.06, 0.7),
        "wall": gaussians(wall, 0.2, 0.99),
        "behind_wall": gaussians(rng.uniform([-0.8, -0.8, 5.0], [0.8, 0.8, 6.0], (30, 3)), 0.08, 0.9),
        "behind_cameras": gaussians(rng.uniform([-1, -1, -3.0], [1, 1, -1.0], (30, 3)), 0.1, 0.9),
        "faint": gaussians(rng.uniform([-0.8, -0.8, 1.5], [0.8, 0.8, 2.5], (30, 3)), 0.06, 0.01),
    }
    groups, start = {}, 0
    for name, p in parts.items():
        groups[name] = np.arange(start, start + len(p["means"]))
        start += len(p["means"])
    cat = {k: np.concatenate([p[k] for p in parts.values()]) for k in parts["front"]}
    return SplatData(**cat), groups


def test_planted_invisible_gaussians_go_visible_stay():
    data, groups = planted_scene()
    weight = max_blend_weights(data, cameras())
    result = remove_floaters(data, cameras(), threshold=0.05)
    keep = weight >= 0.05
    for name in ("behind_wall", "behind_cameras", "faint"):
        assert not keep[groups[name]].any(), f"{name}: kept {keep[groups[name]].sum()} (weights {weight[groups[name]].max():.3f})"
    assert keep[groups["front"]].all(), f"front: weights {np.sort(weight[groups['front']])[:3]}"
    seen = groups["wall"][np.abs(data.means[groups["wall"], :2]).max(1) < 1.2]  # the wall inside every frustum
    assert keep[seen].mean() > 0.9
    assert result.removed == int((~keep).sum()) and len(result.kept) == int(keep.sum())
    assert "removed" in result.note() and "0.05" in result.note()
    # the front layer's peak weight is about its opacity (nothing in front of it)
    assert np.all(weight[groups["front"]] > 0.4) and np.all(weight[groups["front"]] <= 0.7 + 1e-6)


def test_bad_threshold_and_no_cameras_are_one_line():
    data, _ = planted_scene()
    with pytest.raises(ValueError, match="--floater-threshold"):
        remove_floaters(data, cameras(), threshold=1.5)
    with pytest.raises(ValueError, match="training cameras"):
        remove_floaters(data, [], threshold=0.05)


def test_export_of_a_file_refuses_remove_floaters(tmp_path):
    from recon.commands.export import ExportConfig, run_export
    from recon.core.errors import UsageError
    from recon.export import write_splats

    data, _ = planted_scene()
    src = tmp_path / "in.ply"
    write_splats(src, data)
    with pytest.raises(UsageError, match="--remove-floaters"):
        run_export(ExportConfig(input=src, out=tmp_path / "out.ply", remove_floaters=True, quiet=True))
    assert not (tmp_path / "out.ply").exists()

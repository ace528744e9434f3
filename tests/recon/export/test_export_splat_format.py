"""antimatter15 .splat read/write: byte layout, ordering, quantisation and bad files."""

import numpy as np
import pytest

from recon.export.splat_format import read_splat, splat_sort_order, write_splat
from recon.export.splats import SH_C0, SplatData, SplatFileError, normalized_quats, random_splats, sigmoid


def quat_angle_deg(a, b):
    qa, qb = normalized_quats(a), normalized_quats(b)
    return np.degrees(2 * np.arccos(np.clip(np.abs((qa * qb).sum(axis=1)), 0, 1)))


def test_round_trip_within_quantisation(tmp_path):
    d = random_splats(500, sh_degree=3, seed=3)
    path = tmp_path / "m.splat"
    write_splat(path, d)
    assert path.stat().st_size == 32 * 500
    r = read_splat(path)
    ref = d.subset(splat_sort_order(d))
    assert r.sh_degree == 0 and not r.antialiased
    np.testing.assert_array_equal(r.means, ref.means)
    np.testing.assert_allclose(r.log_scales, ref.log_scales, atol=1e-5)
    rgb_err = SH_C0 * np.abs(r.sh[:, 0] - ref.sh[:, 0])
    assert rgb_err.max() <= 0.5 / 255 + 1e-6
    assert np.abs(sigmoid(r.logit_opacities) - sigmoid(ref.logit_opacities)).max() <= 0.5 / 255 + 1e-6
    assert quat_angle_deg(r.quats, ref.quats).max() < 2.0


def test_written_largest_first(tmp_path):
    d = random_splats(300, sh_degree=0, seed=4)
    path = tmp_path / "m.splat"
    write_splat(path, d)
    rec = np.frombuffer(path.read_bytes(), dtype=np.float32).reshape(-1, 8)
    key = np.prod(rec[:, 3:6].astype(np.float64), axis=1)  # linear scales product
    alpha_true = sigmoid(d.logit_opacities[splat_sort_order(d)])
    full_key = key * alpha_true
    assert np.all(np.diff(full_key) <= 1e-12 * full_key[:-1])
    # the same splats, in the expected order
    np.testing.assert_array_equal(rec[:, :3], d.means[splat_sort_order(d)])


def test_byte_layout_of_one_splat(tmp_path):
    d = SplatData(
        means=[[1.0, -2.0, 3.5]],
        quats=[[2.0, 0.0, 0.0, 0.0]],  # identity, unnormalised
        log_scales=np.log([[0.5, 1.0, 2.0]]),
        logit_opacities=[0.0],  # alpha 0.5
        sh=[[[0.0, 1.0 / SH_C0 * 0.25, -10.0]]],  # RGB 0.5, 0.75, clipped to 0
    )
    path = tmp_path / "one.splat"
    write_splat(path, d)
    raw = path.read_bytes()
    assert len(raw) == 32
    np.testing.assert_allclose(np.frombuffer(raw[:24], "<f4"), [1, -2, 3.5, 0.5, 1, 2], rtol=1e-6)
    assert list(raw[24:28]) == [128, 191, 0, 128]
    assert list(raw[28:32]) == [255, 128, 128, 128]  # w = 1 -> 256 clipped


def test_extreme_alphas_read_finite(tmp_path):
    rec = np.zeros(2, dtype=[("p", "<f4", 3), ("s", "<f4", 3), ("c", "u1", 4), ("q", "u1", 4)])
    rec["s"] = 1.0
    rec["c"][:, 3] = [0, 255]
    rec["q"] = [128, 128, 128, 128]  # degenerate quaternion -> identity
    path = tmp_path / "x.splat"
    path.write_bytes(rec.tobytes())
    r = read_splat(path)
    assert np.isfinite(r.logit_opacities).all()
    assert r.logit_opacities[0] < -5 and r.logit_opacities[1] > 5
    np.testing.assert_array_equal(r.quats, [[1, 0, 0, 0], [1, 0, 0, 0]])


def test_bad_files_raise(tmp_path):
    good = tmp_path / "good.splat"
    write_splat(good, random_splats(10, sh_degree=0))
    bad = tmp_path / "bad.splat"
    bad.write_bytes(good.read_bytes()[:-5])
    with pytest.raises(SplatFileError, match=r"bad\.splat.*truncated"):
        read_splat(bad)
    bad.write_bytes(b"")
    with pytest.raises(SplatFileError, match=r"bad\.splat.*empty"):
        read_splat(bad)
    rec = np.frombuffer(good.read_bytes(), dtype=np.float32).copy()
    rec[4] = -1.0  # a negative linear scale
    bad.write_bytes(rec.tobytes())
    with pytest.raises(SplatFileError, match="negative"):
        read_splat(bad)

"""SplatData container: shapes, validation, subsets, NaN dropping and torch round trips."""

import numpy as np
import pytest
import torch

from recon.export.splats import (SplatData, empty_splats, logit_clamped, random_splats, sigmoid,
                                 sh_degree_for_bases)


def test_fields_become_float32_and_degree_is_inferred():
    for degree in range(4):
        d = random_splats(7, sh_degree=degree)
        assert d.sh_degree == degree
        assert d.sh.shape == (7, (degree + 1) ** 2, 3)
        for name in ("means", "quats", "log_scales", "logit_opacities", "sh"):
            assert getattr(d, name).dtype == np.float32
        assert len(d) == d.num_splats == 7


@pytest.mark.parametrize("field, bad", [
    ("means", np.zeros((5, 2))),
    ("quats", np.zeros((5, 3))),
    ("log_scales", np.zeros((4, 3))),
    ("logit_opacities", np.zeros((5, 1))),
    ("sh", np.zeros((5, 5, 3))),  # K = 5 is not a square
    ("sh", np.zeros((5, 25, 3))),  # degree 4 unsupported
    ("sh", np.zeros((5, 4))),
])
def test_shape_mismatch_raises(field, bad):
    d = random_splats(5, sh_degree=1)
    kwargs = {f: getattr(d, f) for f in ("means", "quats", "log_scales", "logit_opacities", "sh")}
    kwargs[field] = bad
    with pytest.raises(ValueError, match=field):
        SplatData(**kwargs)


def test_sh_degree_for_bases():
    assert [sh_degree_for_bases(k) for k in (1, 4, 9, 16)] == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        sh_degree_for_bases(3)


def test_subset_by_mask_and_index():
    d = random_splats(10, sh_degree=2, antialiased=True)
    mask = np.arange(10) % 3 == 0
    s = d.subset(mask)
    assert len(s) == 4 and s.antialiased and s.sh_degree == 2
    np.testing.assert_array_equal(s.means, d.means[mask])
    t = d.subset([9, 0])
    np.testing.assert_array_equal(t.sh, d.sh[[9, 0]])
    with pytest.raises(ValueError):
        d.subset(np.ones(3, dtype=bool))


def test_drop_nonfinite_counts_nan_and_inf_in_any_field():
    d = random_splats(10, sh_degree=1).copy()
    d.means[1, 0] = np.nan
    d.quats[2, 3] = np.inf
    d.log_scales[3, 1] = -np.inf
    d.logit_opacities[4] = np.nan
    d.sh[5, 3, 2] = np.nan
    clean, dropped = d.drop_nonfinite()
    assert dropped == 5 and len(clean) == 5
    assert clean.finite_mask().all()
    np.testing.assert_array_equal(clean.means, d.means[[0, 6, 7, 8, 9]])
    same, none = clean.drop_nonfinite()
    assert none == 0 and same is clean


def test_with_sh_degree_truncates_and_pads():
    d = random_splats(3, sh_degree=3)
    low = d.with_sh_degree(1)
    np.testing.assert_array_equal(low.sh, d.sh[:, :4])
    back = low.with_sh_degree(3)
    assert back.sh_degree == 3 and not back.sh[:, 4:].any()


def test_torch_round_trip():
    d = random_splats(6, sh_degree=2, antialiased=True)
    t = d.to_torch()
    assert t["sh"].shape == (6, 9, 3) and t["means"].dtype == torch.float32
    t = {k: v.clone().requires_grad_(True) for k, v in t.items()}
    back = SplatData.from_torch(t, antialiased=True)
    for name in ("means", "quats", "log_scales", "logit_opacities", "sh"):
        np.testing.assert_array_equal(getattr(back, name), getattr(d, name))
    assert back.antialiased
    with pytest.raises(KeyError):
        SplatData.from_torch({"means": t["means"]})


def test_empty_model_is_valid_in_memory():
    e = empty_splats(sh_degree=2)
    assert len(e) == 0 and e.sh_degree == 2


def test_sigmoid_and_clamped_logit_are_stable():
    x = np.array([-1000.0, -5.0, 0.0, 5.0, 1000.0])
    s = sigmoid(x)
    assert np.all(np.isfinite(s)) and s[0] == 0.0 and s[-1] == 1.0
    np.testing.assert_allclose(logit_clamped(sigmoid(x[1:4])), x[1:4], atol=1e-9)
    assert np.all(np.isfinite(logit_clamped(np.array([0.0, 1.0]))))

"""The ply4d file (recon/export/PLY4D.md): exact round trip, the documented header and property order,
refusal of the other kind of model in each direction, atomic writes; the 4D model <-> record conversion;
the --time / --times arguments."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from plyfile import PlyData

from recon.core.errors import UsageError
from recon.export import (ModelKindError, SplatFileError, is_ply4d, read_ply4d, read_splats, random_splats,
                          write_ply4d, write_splats)
from recon.export.ply4d import PLY4D_MARKER, property_names4
from recon.models import SpaceTimeGaussians
from recon.core.spacetime_data import SpaceTimeData
from recon.run.time_args import check_time, parse_times, resolve_times


def random_4d(n: int = 50, sh_degree: int = 2, seed: int = 0, antialiased: bool = False) -> SpaceTimeData:
    rng = np.random.default_rng(seed)
    k = (sh_degree + 1) ** 2
    means = np.concatenate([rng.uniform(-1, 1, (n, 3)) + [0, 0, 4], rng.uniform(0, 1, (n, 1))], axis=1)
    return SpaceTimeData(means, np.log(rng.uniform(0.05, 0.3, (n, 4))), rng.normal(size=(n, 4)),
                         rng.normal(size=(n, 4)), rng.normal(size=n), rng.normal(size=(n, k, 3)), antialiased)


def assert_same(a: SpaceTimeData, b: SpaceTimeData) -> None:
    for name in ("means4", "log_scales4", "quats_left", "quats_right", "logit_opacities", "sh"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.antialiased == b.antialiased


@pytest.mark.parametrize("degree,antialiased", [(0, False), (1, True), (3, False)])
def test_round_trip_is_exact(tmp_path, degree, antialiased):
    data = random_4d(sh_degree=degree, antialiased=antialiased)
    path = tmp_path / "m.ply"
    write_ply4d(path, data)
    assert is_ply4d(path)
    assert_same(read_ply4d(path), data)


def test_header_and_property_order_as_documented(tmp_path):
    path = tmp_path / "m.ply"
    write_ply4d(path, random_4d(n=3, sh_degree=1))
    ply = PlyData.read(str(path))
    assert f"{PLY4D_MARKER} 1" in ply.comments
    names = list(ply["vertex"].data.dtype.names)
    assert names == property_names4(1)
    assert names[:4] == ["x", "y", "z", "t"] and names[-8:] == [f"rot_l_{i}" for i in range(4)] + [
        f"rot_r_{i}" for i in range(4)]
    assert names[names.index("opacity") + 1:names.index("opacity") + 5] == [f"scale_{i}" for i in range(4)]
    assert len([n for n in names if n.startswith("f_rest_")]) == 9


def test_3d_reader_refuses_a_4d_file_and_4d_reader_a_3d_file(tmp_path):
    four, three = tmp_path / "four.ply", tmp_path / "three.ply"
    write_ply4d(four, random_4d())
    write_splats(three, random_splats(20, sh_degree=1))
    with pytest.raises(ModelKindError, match="4D Gaussian .ply4d. file.*--time T"):
        read_splats(four)
    with pytest.raises(ModelKindError, match="not a ply4d .4D Gaussian. file: it holds 3D Gaussians"):
        read_ply4d(three)
    assert not is_ply4d(three)


def test_unknown_version_and_unmarked_4d_properties_refused(tmp_path):
    path = tmp_path / "m.ply"
    write_ply4d(path, random_4d(n=4))
    raw = path.read_bytes()
    future = tmp_path / "future.ply"
    future.write_bytes(raw.replace(f"{PLY4D_MARKER} 1".encode(), f"{PLY4D_MARKER} 7".encode()))
    with pytest.raises(SplatFileError, match="ply4d version 7 is not supported"):
        read_ply4d(future)
    unmarked = tmp_path / "unmarked.ply"
    unmarked.write_bytes(raw.replace(f"comment {PLY4D_MARKER} 1\n".encode(), b""))
    with pytest.raises(ModelKindError, match="lacks the 'comment splatforge_ply4d 1' marker"):
        read_ply4d(unmarked)
    truncated = tmp_path / "truncated.ply"
    truncated.write_bytes(raw[:-10])
    with pytest.raises(SplatFileError):
        read_ply4d(truncated)


def test_writes_are_atomic(tmp_path):
    path = tmp_path / "m.ply"
    bad = random_4d(n=5)
    bad.means4[2, 3] = np.nan
    with pytest.raises(SplatFileError, match="NaN/Inf"):
        write_ply4d(path, bad)
    assert list(tmp_path.iterdir()) == []
    write_ply4d(path, random_4d(n=5))
    before = path.read_bytes()
    with pytest.raises(FileExistsError):
        write_ply4d(path, random_4d(n=6, seed=1))
    assert path.read_bytes() == before
    clean, dropped = bad.drop_nonfinite()
    assert dropped == 1 and len(clean) == 4


def test_model_record_round_trip_renders_the_same(tmp_path):
    from rasterizer import Camera

    data = random_4d(n=40, sh_degree=1)
    write_ply4d(tmp_path / "m.ply", data)
    model = SpaceTimeGaussians.from_spacetime_data(read_ply4d(tmp_path / "m.ply"))
    assert_same(model.to_spacetime_data(), data)
    K = np.array([[40.0, 0, 16], [0, 40.0, 16], [0, 0, 1]])
    cam = Camera.from_arrays(np.eye(4), K, 32, 32)
    a, _, _ = model.render([cam], None, torch.zeros(3), t=0.3)
    b, _, _ = model.render([cam], None, torch.zeros(3), t=0.7)
    assert a.abs().sum() > 0 and not torch.allclose(a, b)  # it moves in time
    again = SpaceTimeGaussians.from_spacetime_data(model.to_spacetime_data())
    torch.testing.assert_close(again.render([cam], None, torch.zeros(3), t=0.3)[0], a, rtol=0, atol=0)


def test_time_arguments():
    assert check_time(0) == 0.0 and check_time("1") == 1.0
    for bad in (-0.01, 1.5, float("nan"), "x"):
        with pytest.raises(UsageError, match="--time"):
            check_time(bad)
    assert parse_times("0:1:5") == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert parse_times("0.8:0.2:4") == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert parse_times("0.3:0.9:1") == [0.3]
    for bad, why in (("0:1", "START:END:COUNT"), ("0:2:4", "outside"), ("0:1:0", "COUNT must be"),
                     ("0:1:2.5", "not a whole number")):
        with pytest.raises(UsageError, match=why):
            parse_times(bad)
    assert resolve_times(None, None) is None and resolve_times(0.5, None) == [0.5]
    with pytest.raises(UsageError, match="not both"):
        resolve_times(0.5, "0:1:3")


def test_duration_is_stored_in_the_header_and_read_back(tmp_path):
    from recon.export.ply4d import ply4d_duration

    data = random_4d(20)
    data.duration = 12.5
    write_ply4d(tmp_path / "d.ply", data)
    assert b"comment splatforge_duration 12.5" in (tmp_path / "d.ply").read_bytes()[:2000]
    assert read_ply4d(tmp_path / "d.ply").duration == 12.5
    assert read_ply4d(tmp_path / "d.ply").subset([0, 1]).duration == 12.5
    write_ply4d(tmp_path / "n.ply", random_4d(20))
    assert ply4d_duration(tmp_path / "n.ply") is None and read_ply4d(tmp_path / "n.ply").duration is None
    with pytest.raises(ValueError, match="duration"):
        SpaceTimeData(data.means4, data.log_scales4, data.quats_left, data.quats_right, data.logit_opacities,
                      data.sh, duration=-1.0)


def test_budget4_keeps_the_most_important():
    from recon.export.budget4d import apply_budget4, volume_importance4

    data = random_4d(30, sh_degree=2)
    data.log_scales4[:] = -3.0
    data.log_scales4[[4, 17]] = 0.0  # two large Gaussians
    data.logit_opacities[:] = 2.0
    out, info = apply_budget4(data, max_splats=2)
    np.testing.assert_array_equal(out.means4, data.means4[[4, 17]])
    assert info.importance == "4-volume" and info.dropped == 28 and out.sh_degree == 2
    out, info = apply_budget4(data, target="quest3")  # 1M splats: nothing dropped, SH 0
    assert len(out) == 30 and out.sh_degree == 0 and info.importance == "none"
    assert np.all(volume_importance4(data)[[4, 17]] > volume_importance4(data)[0])


def test_budget4_footprint_counts_the_time_a_gaussian_is_seen():
    import torch

    from rasterizer import Camera
    from recon.export.budget4d import footprint_importance4

    data = random_4d(3, sh_degree=0)
    data.means4[:] = [0.0, 0.0, 0.0, 0.5]
    data.quats_left[:] = [1, 0, 0, 0]
    data.quats_right[:] = [1, 0, 0, 0]
    data.logit_opacities[:] = 3.0
    data.log_scales4[:] = np.log([0.1, 0.1, 0.1, 1.0])
    data.log_scales4[1, 3] = np.log(0.02)  # lives briefly around t = 0.5
    data.means4[2, :3] = [100.0, 0, 0]  # never in view
    w2c = torch.eye(4, dtype=torch.float64)
    w2c[2, 3] = 3.0
    cam = Camera.from_arrays(w2c, torch.tensor([[100.0, 0, 50], [0, 100, 50], [0, 0, 1]]), 100, 100)
    score = footprint_importance4(data, [cam])
    assert score[0] > 3 * score[1] > 0 and score[2] == 0


def test_the_foreground_logit_round_trips_and_old_files_read_as_zeros(tmp_path):
    """The optional ``foreground`` property (PLY4D.md): written when the model has a foreground logit, read back
    exactly into the model (and through subsets, as budgets and the viewer take them); files without it load with
    zeros, and a model without one writes none."""
    data = random_4d(n=30, sh_degree=1)
    data.logit_foreground = np.random.default_rng(3).normal(size=30).astype(np.float32)
    write_ply4d(tmp_path / "fg.ply", data)
    names = list(PlyData.read(str(tmp_path / "fg.ply"))["vertex"].data.dtype.names)
    assert names == property_names4(1, foreground=True) and names[-1] == "foreground"
    back = read_ply4d(tmp_path / "fg.ply")
    assert_same(back, data)
    np.testing.assert_array_equal(back.logit_foreground, data.logit_foreground)
    model = SpaceTimeGaussians.from_spacetime_data(back)
    np.testing.assert_array_equal(model.params["logit_foreground"].detach().numpy(), data.logit_foreground)
    np.testing.assert_array_equal(model.to_spacetime_data().logit_foreground, data.logit_foreground)
    np.testing.assert_array_equal(back.subset([4, 2]).logit_foreground, data.logit_foreground[[4, 2]])
    assert back.with_sh_degree(0).logit_foreground is back.logit_foreground

    old = random_4d(n=30, sh_degree=1)  # a file from before the property
    write_ply4d(tmp_path / "old.ply", old)
    assert "foreground" not in PlyData.read(str(tmp_path / "old.ply"))["vertex"].data.dtype.names
    model = SpaceTimeGaussians.from_spacetime_data(read_ply4d(tmp_path / "old.ply"))
    assert torch.equal(model.params["logit_foreground"].detach(), torch.zeros(30))
    assert model.to_spacetime_data().logit_foreground is None  # all zeros: not written
    bad = random_4d(n=30, sh_degree=1)
    bad.logit_foreground = np.full(29, 1.0, np.float32)
    with pytest.raises(ValueError, match="logit_foreground"):
        bad.validate()


def test_a_run_trained_with_the_segmentation_target_exports_its_foreground(tmp_path):
    """splats4d.ply of a run with --spacetime.seg-weight holds the trained foreground logit; the run reads it back."""
    from recon.losses.spacetime import SpaceTimeConfig
    from recon.run.folder import Run
    from recon.training.trainer import TrainConfig, Trainer
    from tests.recon.data.test_panoptic_segmentation import write_tiny_panoptic

    root = write_tiny_panoptic(tmp_path / "pan")
    cfg = TrainConfig(data=root, out=tmp_path / "run", method="4dgs", steps=4, save_every=0, progress=False,
                      init_num_random=100, spacetime=SpaceTimeConfig(seg_weight=1.0), frame_cache="off")
    trainer = Trainer(cfg, log=lambda *a: None)
    trainer.run()
    trained = trainer.model.params["logit_foreground"].detach().numpy()
    assert np.any(trained)
    stored = read_ply4d(tmp_path / "run" / "splats4d.ply").logit_foreground
    np.testing.assert_array_equal(stored, trained)
    loaded = Run.open(tmp_path / "run").load_model()
    np.testing.assert_array_equal(loaded.params["logit_foreground"].detach().numpy(), trained)

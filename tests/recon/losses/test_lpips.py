"""LPIPS from local weight files (recon.losses.lpips): found only where told, never downloaded; properties of
the distance; clear errors for wrong files; evaluation reports it when the weights are there.

The real AlexNet/LPIPS weights are not on this machine (nothing can be downloaded), so these tests write
weight files of the right layout with random values."""

import pytest
import torch

from recon.losses import lpips as L


def write_fake_weights(folder, seed=0, head_shape_bad=False):
    g = torch.Generator().manual_seed(seed)
    backbone, cin = {}, 3
    for (i, _, _), c in zip(L.CONVS, L.CHANNELS):
        k = {0: 11, 3: 5}.get(i, 3)
        backbone[f"features.{i}.weight"] = torch.randn(c, cin, k, k, generator=g) * (2.0 / (cin * k * k)) ** 0.5
        backbone[f"features.{i}.bias"] = torch.randn(c, generator=g) * 0.01
        cin = c
    heads = {f"lin{k}.model.1.weight": torch.rand(1, c, 1, 1, generator=g) for k, c in enumerate(L.CHANNELS)}
    if head_shape_bad:
        heads["lin2.model.1.weight"] = torch.rand(1, 7, 1, 1)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(backbone, folder / L.BACKBONE_FILE)
    torch.save(heads, folder / L.HEADS_FILE)
    return folder


@pytest.fixture
def no_hub(tmp_path, monkeypatch):
    """An empty torch hub dir and no lpips package: nothing is found unless a test provides it."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    monkeypatch.setattr(L, "_lpips_package_heads", lambda: None)
    monkeypatch.delenv(L.ENV_DIR, raising=False)
    L._cached.cache_clear()


def test_absent_weights_give_none(no_hub):
    assert L.find_weights() is None and L.load_lpips() is None
    assert "nothing is downloaded" in L.NOTE


def test_distance_properties(no_hub, tmp_path, monkeypatch):
    monkeypatch.setenv(L.ENV_DIR, str(write_fake_weights(tmp_path / "w")))
    w = L.load_lpips()
    assert w is not None
    g = torch.Generator().manual_seed(1)
    img = torch.rand(64, 72, 3, generator=g)
    noise = torch.randn(img.shape, generator=g)
    assert float(L.lpips_distance(img, img, w)) == pytest.approx(0.0, abs=1e-7)
    d_small = float(L.lpips_distance(img, (img + 0.02 * noise).clamp(0, 1), w))
    d_big = float(L.lpips_distance(img, (img + 0.3 * noise).clamp(0, 1), w))
    assert 0 < d_small < d_big
    batch = L.lpips_distance(torch.stack([img, img]), torch.stack([img, (img + 0.3 * noise).clamp(0, 1)]), w)
    assert batch.shape == (2,) and float(batch[0]) == pytest.approx(0.0, abs=1e-7)
    assert float(batch[1]) == pytest.approx(d_big, rel=1e-5)


def test_hub_cache_is_searched(tmp_path, monkeypatch):
    monkeypatch.delenv(L.ENV_DIR, raising=False)
    monkeypatch.setattr(L, "_lpips_package_heads", lambda: None)
    write_fake_weights(tmp_path / "hub" / "checkpoints")
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    assert L.find_weights() == (tmp_path / "hub" / "checkpoints" / L.BACKBONE_FILE,
                                tmp_path / "hub" / "checkpoints" / L.HEADS_FILE)


def test_wrong_files_are_named(no_hub, tmp_path):
    folder = write_fake_weights(tmp_path / "bad", head_shape_bad=True)
    with pytest.raises(L.LPIPSWeightsError, match="alex.pth: lin2"):
        L.load_weights(folder / L.BACKBONE_FILE, folder / L.HEADS_FILE)
    (tmp_path / "junk.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(L.LPIPSWeightsError, match="junk.pth"):
        L.load_weights(tmp_path / "junk.pth", folder / L.HEADS_FILE)
    torch.save({"something": torch.zeros(1)}, tmp_path / "other.pth")
    with pytest.raises(L.LPIPSWeightsError, match="missing 'features.0.weight'"):
        L.load_weights(tmp_path / "other.pth", folder / L.HEADS_FILE)


def test_evaluation_reports_lpips_when_weights_exist(no_hub, tmp_path, monkeypatch):
    from recon.data.procedural_scene import procedural_scene
    from recon.training.evaluation import evaluate_model
    from recon.data.frame_images import FrameImages
    from recon.models.gaussians import GaussianModel

    scene = procedural_scene(data_factor=4)
    model = GaussianModel.random_in_box(300, (0.0, 0.25, 0.0), 1.0, 0, scene.extent,
                                        generator=torch.Generator().manual_seed(0))
    frames = scene.frames_test[:2]
    images = FrameImages(frames, model.device)
    bg = torch.ones(3)
    assert evaluate_model(model, frames, images, bg)["lpips"] is None
    monkeypatch.setenv(L.ENV_DIR, str(write_fake_weights(tmp_path / "w")))
    result = evaluate_model(model, frames, images, bg)
    assert result["lpips"] is not None and result["lpips"] > 0
    assert all(v["lpips"] is not None for v in result["per_view"])

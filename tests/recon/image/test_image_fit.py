"""recon.image.fit: the GaussianImage fit loop converges on small images (both initialisations, both losses)."""

import math

import pytest
import torch

from recon.image.fit import FitConfig, GaussianParams, fit_image, psnr


def synthetic_image(width=48, height=40, channels=3):
    """Smooth gradients and a disc: something a few hundred Gaussians can fit well."""
    ys, xs = torch.meshgrid(torch.linspace(0, 1, height), torch.linspace(0, 1, width), indexing="ij")
    disc = (((xs - 0.6) ** 2 + (ys - 0.45) ** 2) < 0.06).float()
    planes = [0.2 + 0.6 * xs, 0.3 + 0.5 * ys * disc, 0.5 + 0.3 * torch.sin(6 * xs) * (1 - disc), 0.9 - 0.5 * ys]
    return torch.stack(planes[:channels], dim=-1)


@pytest.mark.parametrize("init", ["image", "gaussianimage"])
def test_fit_converges(init):
    target = synthetic_image()
    steps = 200 if init == "image" else 400
    result = fit_image(target, FitConfig(gaussians=400, steps=steps, init=init))
    first = result.history[0][1]
    assert result.psnr > 27.0, result.history
    assert result.psnr > first + 3.0
    assert result.model.n == 400 and result.model.layout == "RGB"
    assert result.model.width == 48 and result.model.height == 40
    assert not result.model.means.requires_grad
    assert float(result.model.means.abs().max()) <= 1.0


def test_fit_render_is_the_saved_models_render():
    target = synthetic_image()
    result = fit_image(target, FitConfig(gaussians=200, steps=50))
    assert result.psnr == pytest.approx(psnr(result.model.render(), target), abs=0)


def test_fit_other_channel_counts_and_ssim_loss():
    for channels in (1, 4):
        result = fit_image(synthetic_image(channels=channels), FitConfig(gaussians=200, steps=120, loss="l1+ssim"))
        assert result.model.colors.shape == (200, channels)
        assert result.model.layout == {1: "L", 4: "RGBA"}[channels]
        assert result.psnr > 22.0


def test_diagonal_kept_away_from_zero():
    p = GaussianParams(torch.zeros(3, 2), torch.tensor([[-0.5, 0.3, -0.45], [-0.55, 0.0, 1.0], [2.0, 0.0, -0.6]]),
                       torch.ones(3, 3), 10, 10)
    p.keep_diagonal()
    chol_px = p.raw_cholesky.detach() + torch.tensor([0.5, 0.0, 0.5])
    assert bool((chol_px[:, [0, 2]].abs() >= 0.1 - 1e-7).all())
    assert float(chol_px[2, 0]) == pytest.approx(2.5)
    cov_det = (chol_px[:, 0] * chol_px[:, 2]) ** 2
    assert bool((cov_det > 0).all()) and math.isfinite(float(cov_det.sum()))

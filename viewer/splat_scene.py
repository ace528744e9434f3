"""The records of what the viewer shows: :class:`SplatScene` (a splat model, its source and training
cameras; the time hook that 4D scenes override), :class:`BrowserSplats` (the arrays viser's WebGL splat renderer
needs) and :class:`TrainingCamera`. Loading them from files and runs is :mod:`viewer.scene`.

All positions are in the model's world frame (OpenCV: x right, y down, z forward); nothing is
re-oriented, the viewer only tells viser which way is up. The browser renders degree-0 colour (the
SH DC term) only; full-quality renders go through :mod:`rasterizer`.

Time hook: :meth:`SplatScene.set_time` is a no-op for static scenes; a dynamic (4D) scene subclasses
:class:`SplatScene`, sets ``dynamic = True`` and overrides ``set_time(t)`` (t in [0, 1], see
rasterizer/CONVENTIONS.md) to change what :meth:`SplatScene.browser` returns and return True, after which
the viewer re-sends the splats (:class:`viewer.spacetime.SpaceTimeScene`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rasterizer.camera import Camera
from rasterizer.quaternions import quat_to_rotmat_np
from recon.export import SplatData
from recon.export.splats import SH_C0
from viewer.crop import CropBox, crop_keep


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass
class BrowserSplats:
    """Arrays for ``viser.scene.add_gaussian_splats`` (float32, world frame).

    centers [N, 3]; covariances [N, 3, 3] = R diag(s^2) R^T; rgbs [N, 3] in [0, 1] from the SH DC term;
    opacities [N, 1] activated.
    """

    centers: np.ndarray
    covariances: np.ndarray
    rgbs: np.ndarray
    opacities: np.ndarray

    def __len__(self) -> int:
        return len(self.centers)


def shown_mask(data: SplatData, min_opacity: float = 0.0, crop: CropBox | None = None,
               opacities: np.ndarray | None = None) -> np.ndarray:
    """bool [N]: the splats the viewer's filters keep (opacity >= ``min_opacity``, centre inside ``crop``);
    ``opacities`` [N] (the sigmoid of the logits) when the caller has them already."""
    if opacities is None:
        opacities = _sigmoid(data.logit_opacities.astype(np.float64))
    keep = opacities >= min_opacity
    inside = crop_keep(data.means, crop)
    return keep if inside is None else keep & inside


def browser_splats(data: SplatData, scale_factor: float = 1.0, min_opacity: float = 0.0,
                   crop: CropBox | None = None) -> BrowserSplats:
    """Splats in viser's format: scales multiplied by ``scale_factor``; splats with opacity below
    ``min_opacity`` or centres outside ``crop`` (:mod:`viewer.crop`) dropped."""
    opac = _sigmoid(data.logit_opacities.astype(np.float64))
    keep = shown_mask(data, min_opacity, crop, opac)
    R = quat_to_rotmat_np(data.quats[keep].astype(np.float64))
    s2 = (np.exp(data.log_scales[keep].astype(np.float64)) * scale_factor) ** 2
    cov = np.einsum("nij,nj,nkj->nik", R, s2, R)
    rgb = np.clip(0.5 + SH_C0 * data.sh[keep, 0].astype(np.float64), 0.0, 1.0)
    return BrowserSplats(data.means[keep].astype(np.float32), cov.astype(np.float32),
                         rgb.astype(np.float32), opac[keep, None].astype(np.float32))


def robust_bounds(points: np.ndarray, lo: float = 5.0, hi: float = 95.0) -> tuple[np.ndarray, float]:
    """(centre [3], radius): middle of the per-axis ``lo``..``hi`` percentile box of [N, 3] points and half
    its diagonal (floored at 1e-3), so stray far-away splats do not shrink the initial view."""
    if len(points) == 0:
        return np.zeros(3), 1.0
    a, b = np.percentile(points, [lo, hi], axis=0)
    return 0.5 * (a + b), max(0.5 * float(np.linalg.norm(b - a)), 1e-3)


@dataclass
class TrainingCamera:
    """A training view for frustum display: the frame's name and its :class:`Camera` (OpenCV axes)."""

    name: str
    camera: Camera


@dataclass
class SplatScene:
    """A static splat model with its source description and optional training cameras.

    Attributes:
        splats: the model (raw parameters, OpenCV world).
        source: file the splats came from.
        run_dir: training run folder, when the viewer was pointed at one.
        cameras: training cameras of the run (empty when unknown).
        up: world up direction (unit [3]); -y of the OpenCV world unless the run says otherwise.
        up_known: whether ``up`` came from the run's cameras or a view sidecar (else the viewer estimates it,
            :mod:`viewer.framing`).
        start_camera: index into ``cameras`` of the camera the viewer starts at (a run: 0; a file: its view
            sidecar's), or None (the viewer frames the splats).
    """

    splats: SplatData
    source: Path
    run_dir: Path | None = None
    cameras: list[TrainingCamera] = field(default_factory=list)
    up: np.ndarray = field(default_factory=lambda: np.array([0.0, -1.0, 0.0]))
    dynamic: bool = False
    up_known: bool = False
    start_camera: int | None = None

    def set_time(self, t: float) -> bool:
        """Show the model at normalised time ``t`` in [0, 1]; returns True when ``splats`` changed.
        Static scenes: nothing to do."""
        del t
        return False

    def total(self) -> int:
        """How many splats the model holds (before filters)."""
        return len(self.splats.means)

    def browser(self, scale_factor: float = 1.0, min_opacity: float = 0.0,
                crop: CropBox | None = None) -> BrowserSplats:
        """What the browser draws now (:func:`browser_splats` of ``splats``)."""
        return browser_splats(self.splats, scale_factor, min_opacity, crop)

    def render_image(self, frame, background, device, min_opacity: float = 0.0,
                     crop: CropBox | None = None) -> np.ndarray:
        """[H, W, 3] float32 sRGB render of ``splats`` (all SH degrees) into ``frame`` (a Camera) over
        ``background`` (RGB), with :mod:`rasterizer` on ``device``; splats with opacity below ``min_opacity``
        or centres outside ``crop`` left out, as the browser's filters leave them out."""
        import torch

        from rasterizer import rasterize_gaussians

        s = self.splats
        if min_opacity > 0.0 or crop is not None:
            keep = shown_mask(s, min_opacity, crop)
            if not keep.any():
                return np.broadcast_to(np.asarray(background, np.float32), (frame.height, frame.width, 3)).copy()
            s = s.subset(keep)
        degree = int(round(np.sqrt(s.sh.shape[1]))) - 1
        t = lambda a: torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float32, device=device)  # noqa: E731
        cam = frame.to(device=device, dtype=torch.float32)
        with torch.no_grad():
            render, _, _ = rasterize_gaussians(
                t(s.means), t(s.quats), torch.exp(t(s.log_scales)), torch.sigmoid(t(s.logit_opacities)),
                t(s.sh), cam.world_to_cam[None], cam.K[None], cam.width, cam.height,
                sh_degree=degree, backgrounds=t([background]),
                rasterize_mode="antialiased" if s.antialiased else "classic")  # backend auto: cuda on a GPU
        return render[0].clamp(0, 1).cpu().numpy()

    def facts(self) -> dict[str, str]:
        """Human-readable facts for the GUI panel."""
        s = self.splats
        degree = int(round(np.sqrt(s.sh.shape[1]))) - 1
        size = self.source.stat().st_size if self.source.exists() else 0
        return {"file": str(self.source), "splats": f"{len(s.means):,}", "SH degree": str(degree),
                "file size": f"{size / 1e6:.1f} MB", "training cameras": str(len(self.cameras))}

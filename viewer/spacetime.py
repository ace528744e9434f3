"""A 4D (space-time) model in the viewer: :class:`SpaceTimeScene`, sliced on the server at the GUI's time.

The browser draws 3D Gaussians only, so each time the slider (or playback) moves, the server slices the
4D model (:func:`rasterizer.spacetime.slice_gaussians_4d`, through the model's ``slice``) and re-sends the
slice: centres and conditional covariances come straight from the slice (no eigen-decomposition), the
colour from the SH DC term, opacities with the temporal factor applied (Gaussians whose factor is below
1/255 are culled by the slice). The full-quality "render" button renders the 4D model at the current time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from viewer.scene import BrowserSplats, SplatScene

SH_C0 = 0.28209479177387814


@dataclass
class SpaceTimeScene(SplatScene):
    """A :class:`SplatScene` whose splats move with time: ``model`` is a
    :class:`recon.models.SpaceTimeGaussians` (on the CPU or GPU), ``time`` the normalised time shown.
    ``splats`` holds the 3D slice at the time the scene was opened (framing and facts only)."""

    model: Any = None
    time: float = 0.0
    _slice: Any = field(default=None, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_model(cls, model, source: Path, run_dir: Path | None = None, time: float = 0.0) -> "SpaceTimeScene":
        """The scene of a 4D ``model`` read from ``source``, showing normalised ``time`` first."""
        scene = cls(model.to_splat_data(time), Path(source), run_dir, dynamic=True, model=model, time=float(time))
        scene.set_time(time)
        return scene

    def set_time(self, t: float) -> bool:
        """Slice the model at normalised time ``t`` (clamped into [0, 1]); True (the splats changed)."""
        import torch

        t = min(max(float(t), 0.0), 1.0)
        with torch.no_grad():
            sliced = self.model.slice(t)
        with self._lock:
            self._slice, self.time = sliced, t
        return True

    def total(self) -> int:
        return len(self.model)

    def browser(self, scale_factor: float = 1.0, min_opacity: float = 0.0) -> BrowserSplats:
        """The current slice in viser's format (covariances scaled by ``scale_factor`` squared; Gaussians
        below ``min_opacity`` after the temporal factor dropped)."""
        import torch

        with self._lock:
            s = self._slice
        with torch.no_grad():
            opac = s.opacities
            keep = (opac >= min_opacity).nonzero()[:, 0]
            dc = self.model.params["sh0"][s.indices.index_select(0, keep), 0]
            rgb = (0.5 + SH_C0 * dc).clamp(0.0, 1.0)
            cov = s.covars.index_select(0, keep) * float(scale_factor) ** 2
            as_np = lambda x: np.ascontiguousarray(x.detach().float().cpu().numpy())  # noqa: E731
            return BrowserSplats(as_np(s.means.index_select(0, keep)), as_np(cov), as_np(rgb),
                                 as_np(opac.index_select(0, keep))[:, None])

    def render_image(self, frame, background, device) -> np.ndarray:
        """[H, W, 3] float32 render of the 4D model at the current time into ``frame`` (a Camera)."""
        import torch

        model = self.model.to(device)
        cam = frame.to(device=device, dtype=torch.float32)
        with torch.no_grad():
            rgb, _, _ = model.render([cam], None, torch.as_tensor(background, dtype=torch.float32, device=device),
                                     t=self.time)
        return rgb[0].clamp(0, 1).cpu().numpy()

    def facts(self) -> dict[str, str]:
        facts = super().facts()
        facts["splats"] = f"{len(self.model):,} 4D Gaussians"
        facts["SH degree"] = str(self.model.sh_degree)
        return facts


def load_spacetime_scene(source: Path, run_dir: Path | None = None) -> SpaceTimeScene:
    """The 4D scene of a 4D run (``run_dir``: its splats4d.ply, else its newest checkpoint) or a ply4d file
    (``source``), on the CPU."""
    if run_dir is not None:
        from recon.run import Run

        model = Run.open(run_dir).load_model()
    else:
        from recon.export import read_ply4d
        from recon.models.base import model_class

        model = model_class("4dgs").from_spacetime_data(read_ply4d(source))
    return SpaceTimeScene.from_model(model, source, run_dir)

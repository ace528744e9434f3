"""A 4D (space-time) model in the viewer: :class:`SpaceTimeScene`, sliced on the server at the GUI's time.

The browser draws 3D Gaussians only, so each time the slider (or playback) moves, the server slices the
4D model (the steps of :func:`rasterizer.spacetime.slice_gaussians_4d`, with the time-independent part
computed once per model) and re-sends the slice: centres and conditional covariances come straight from
the slice (no eigen-decomposition), the colour from the SH DC term, opacities with the temporal factor
applied (Gaussians whose factor is below 1/255 are culled by the slice). The full-quality "render"
button renders the 4D model at the current time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from recon.export.splats import SH_C0
from viewer.splat_scene import BrowserSplats, SplatScene


@dataclass
class SpaceTimeScene(SplatScene):
    """A :class:`SplatScene` whose splats move with time: ``model`` is a
    :class:`recon.models.SpaceTimeGaussians` (on the CPU or GPU), ``time`` the normalised time shown.
    ``splats`` holds the 3D slice at the time the scene was opened (framing and facts only)."""

    model: Any = None
    time: float = 0.0
    _slice: Any = field(default=None, repr=False)  # (SlicedGaussians, the cache it came from)
    _cache: Any = field(default=None, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_model(cls, model, source: Path, run_dir: Path | None = None, time: float = 0.0) -> "SpaceTimeScene":
        """The scene of a 4D ``model`` read from ``source``, showing normalised ``time`` first."""
        scene = cls(model.to_splat_data(time), Path(source), run_dir, dynamic=True, model=model, time=float(time))
        scene.set_model(model)
        return scene

    def set_model(self, model) -> None:
        """Show ``model`` (a new snapshot while training) at the current time. Its time-independent part
        (conditional covariances, velocities, temporal variances: :func:`rasterizer.spacetime.condition_on_time`),
        activated opacities and DC colours are computed here once, so each new time costs only the O(N)
        temporal step (:func:`rasterizer.spacetime.slicing.slice_at`)."""
        import torch

        from rasterizer.spacetime import condition_on_time

        with torch.no_grad():
            p = model.params
            cache = {"means4": p["means4"].detach(), "opacities": model.opacities.detach(),
                     "conditioned": condition_on_time(p["quats_left"].detach(), p["quats_right"].detach(),
                                                      model.scales.detach()),
                     "rgb": (0.5 + SH_C0 * p["sh0"].detach()[:, 0]).clamp(0.0, 1.0)}
        with self._lock:
            self.model, self._cache = model, cache
        self.set_time(self.time)

    def set_time(self, t: float) -> bool:
        """Slice the model at normalised time ``t`` (clamped into [0, 1]); True (the splats changed)."""
        import torch

        from rasterizer.spacetime import CULL_THRESHOLD
        from rasterizer.spacetime.slicing import slice_at

        t = min(max(float(t), 0.0), 1.0)
        with self._lock:
            cache = self._cache
        with torch.no_grad():
            sliced = slice_at(cache["means4"], cache["opacities"], cache["conditioned"], t, CULL_THRESHOLD)
        with self._lock:
            if cache is self._cache:  # not replaced by set_model meanwhile (which slices again itself)
                self._slice, self.time = (sliced, cache), t
        return True

    def total(self) -> int:
        return len(self.model)

    @staticmethod
    def shown(sliced, min_opacity: float = 0.0, crop=None):
        """bool [M] over the entries of a slice (a :class:`rasterizer.spacetime.SlicedGaussians`): opacity after
        the temporal factor at least ``min_opacity`` and sliced centre inside ``crop`` (a
        :class:`viewer.crop.CropBox`, or None); None when nothing is filtered. The one rule of what the browser
        draws and what the "render" button renders."""
        import torch

        if min_opacity <= 0.0 and crop is None:
            return None
        keep = sliced.opacities >= min_opacity
        if crop is not None:
            inside = crop.contains(sliced.means.double().cpu().numpy())
            keep = keep & torch.as_tensor(inside, device=keep.device)
        return keep

    def browser(self, scale_factor: float = 1.0, min_opacity: float = 0.0, crop=None) -> BrowserSplats:
        """The current slice in viser's format (covariances scaled by ``scale_factor`` squared; Gaussians
        below ``min_opacity`` after the temporal factor, or whose sliced centre is outside ``crop``
        (a :class:`viewer.crop.CropBox`), dropped: :meth:`shown`)."""
        import torch

        with self._lock:
            s, cache = self._slice
        with torch.no_grad():
            opac = s.opacities
            shown = self.shown(s, min_opacity, crop)
            keep = None if shown is None else shown.nonzero()[:, 0]
            pick = (lambda x: x) if keep is None else (lambda x: x.index_select(0, keep))  # noqa: E731
            rgb = cache["rgb"].index_select(0, pick(s.indices))
            cov = pick(s.covars) * float(scale_factor) ** 2
            as_np = lambda x: np.ascontiguousarray(x.float().cpu().numpy())  # noqa: E731
            return BrowserSplats(as_np(pick(s.means)), as_np(cov), as_np(rgb), as_np(pick(opac))[:, None])

    def render_image(self, frame, background, device, min_opacity: float = 0.0, crop=None) -> np.ndarray:
        """[H, W, 3] float32 render of the 4D model at the current time into ``frame`` (a Camera), leaving out
        the Gaussians the browser leaves out (:meth:`shown` of the slice at that time: ``min_opacity`` after
        the temporal factor, centres outside ``crop``), as the 3D scene's render does."""
        import torch

        model = self.model.to(device)
        cam = frame.to(device=device, dtype=torch.float32)
        with torch.no_grad():
            if min_opacity > 0.0 or crop is not None:
                sliced = model.slice(self.time)
                kept = sliced.indices[self.shown(sliced, min_opacity, crop)]  # 4D Gaussians shown now
                if len(kept) == 0:
                    return np.broadcast_to(np.asarray(background, np.float32), (frame.height, frame.width, 3)).copy()
                model = model.subset(kept)
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
        from recon.run.folder import Run

        model = Run.open(run_dir).load_model()
    else:
        from recon.export import read_ply4d
        from recon.models.base import model_class

        model = model_class("4dgs").from_spacetime_data(read_ply4d(source))
    return SpaceTimeScene.from_model(model, source, run_dir)

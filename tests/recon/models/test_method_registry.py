"""The method registry's proof (issue 15, item 1): a second method, defined and registered only in this
file, renders, trains, saves, resumes, evaluates, renders a video, exports and opens in the viewer.

``IsoGaussians`` is the worked example of recon/DESIGN.md ("How to add a primitive"): isotropic Gaussians
with a plain RGB colour, rendered through :func:`rasterizer.rasterize_gaussians`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

import numpy as np
import pytest
import torch

from rasterizer import rasterize_gaussians, stack_cameras
from recon.core.errors import ConfigValueError
from recon.export.splats import SH_C0, SplatData
from recon.models.base import MODELS, SceneModel, model_class, register_model
from recon.models.gaussians import knn_mean_distance, resize_optimizer_state

METHOD = "iso-test"
ISO_PARAMS = ("means", "log_scale", "logit_opacities", "rgb")


@dataclass
class IsoRates:
    means: float = 1e-3
    log_scale: float = 5e-3
    logit_opacities: float = 5e-2
    rgb: float = 2.5e-3


@register_model(METHOD)
class IsoGaussians(SceneModel):
    """Isotropic 3D Gaussians: ``means`` [N, 3], ``log_scale`` [N, 1], ``logit_opacities`` [N], ``rgb`` [N, 3]
    (linear colour, unclamped), one Adam group per parameter."""

    def __init__(self, params: dict, extent: float = 1.0):
        self.extent = float(extent)
        self.params = {n: torch.nn.Parameter(params[n].detach().float().contiguous()) for n in ISO_PARAMS}
        self.optimizer = self._make_optimizer()

    def _make_optimizer(self) -> torch.optim.Adam:
        return torch.optim.Adam([{"params": [self.params[n]], "lr": getattr(IsoRates(), n), "name": n}
                                 for n in ISO_PARAMS], eps=1e-15)

    @classmethod
    def initialize(cls, cfg, scene, generator, log=print) -> "IsoGaussians":
        from recon.models.init_region import random_init_region

        region = random_init_region(scene.frames_train, scene.source_format, scene.extent, cfg.init_box)
        n = cfg.init_num_random
        log(region.describe(n))
        half = torch.as_tensor(np.asarray(region.half, dtype=np.float32))
        means = torch.as_tensor(np.asarray(region.center, dtype=np.float32)) + \
            (torch.rand(n, 3, generator=generator) * 2 - 1) * half
        return cls({"means": means, "log_scale": torch.log(knn_mean_distance(means).clamp(min=1e-7))[:, None],
                    "logit_opacities": torch.full((n,), math.log(0.1 / 0.9)),
                    "rgb": torch.rand(n, 3, generator=generator)}, scene.extent)

    @classmethod
    def from_state_dict(cls, state, device="cpu") -> "IsoGaussians":
        model = cls(state["params"], state["extent"])
        model.optimizer.load_state_dict(state["optimizer"])
        return model.to(device)

    @classmethod
    def from_splat_data(cls, data: SplatData, extent: float = 1.0) -> "IsoGaussians":
        t = data.to_torch()
        return cls({"means": t["means"], "log_scale": t["log_scales"].mean(dim=1, keepdim=True),
                    "logit_opacities": t["logit_opacities"], "rgb": 0.5 + SH_C0 * t["sh"][:, 0]}, extent)

    def __len__(self) -> int:
        return int(self.params["means"].shape[0])

    def to(self, device) -> "IsoGaussians":
        device = torch.device(device)
        if device != self.device:
            state = self.optimizer.state_dict()
            self.params = {n: torch.nn.Parameter(p.detach().to(device)) for n, p in self.params.items()}
            self.optimizer = self._make_optimizer()
            self.optimizer.load_state_dict(state)
        return self

    def render(self, cameras, sh_degree=None, background=None, *, t=None, absgrad=False, backend="auto"):
        viewmats, Ks, W, H = stack_cameras(list(cameras))
        p, n = self.params, len(self)
        bg = None if background is None else torch.as_tensor(background, dtype=torch.float32).expand(len(cameras), 3)
        quats = p["means"].new_zeros(n, 4)
        quats[:, 0] = 1.0
        return rasterize_gaussians(p["means"], quats, torch.exp(p["log_scale"]).expand(n, 3),
                                   torch.sigmoid(p["logit_opacities"]), p["rgb"], viewmats.float(), Ks.float(),
                                   W, H, backgrounds=bg, backend=backend, absgrad=absgrad)

    @property
    def scales(self) -> torch.Tensor:  # what adaptive density control reads besides the signal
        return torch.exp(self.params["log_scale"]).expand(len(self), 3)

    @property
    def opacities(self) -> torch.Tensor:
        return torch.sigmoid(self.params["logit_opacities"])

    def update_params(self, fn_param, fn_state, names=ISO_PARAMS) -> None:
        for name in names:
            old = self.params[name]
            new = torch.nn.Parameter(fn_param(name, old.detach()).contiguous())
            resize_optimizer_state(self.optimizer, old, new, lambda key, v, _n=name: fn_state(_n, key, v))
            self.params[name] = new

    def state_dict(self) -> dict:
        return {"params": {n: p.detach().cpu() for n, p in self.params.items()},
                "optimizer": self.optimizer.state_dict(), "extent": self.extent, "rates": asdict(IsoRates())}

    def to_splat_data(self) -> SplatData:
        p, n = self.params, len(self)
        return SplatData.from_torch({
            "means": p["means"], "quats": torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(n, 4),
            "log_scales": p["log_scale"].expand(n, 3), "logit_opacities": p["logit_opacities"],
            "sh": ((p["rgb"] - 0.5) / SH_C0)[:, None, :]})


# ------------------------------------------------------------------------------------------ tests


def tiny_config(out, steps, **kw):
    from recon.training.trainer import TrainConfig

    return TrainConfig(method=METHOD, data="procedural", data_factor=4, init_num_random=300, steps=steps,
                       save_every=3, progress=False, out=out, **kw)


def test_registry_holds_both_methods():
    assert model_class("3dgs").__name__ == "GaussianModel" and model_class(METHOD) is IsoGaussians
    assert MODELS[METHOD].method == METHOD
    with pytest.raises(ConfigValueError, match=r"--method nope: not a registered method \(known: 2dgs, 3dgs, 4dgs, iso-test, meshgs, nerf, neus\)"):
        model_class("nope")
    with pytest.raises(ValueError, match="taken"):
        register_model("3dgs")(IsoGaussians)


def test_unknown_method_fails_before_the_scene_is_loaded(tmp_path, monkeypatch):
    from recon.training.trainer import TrainConfig, Trainer

    monkeypatch.setattr("recon.training.trainer.load_training_scene", lambda cfg: pytest.fail("scene loaded"))
    with pytest.raises(ConfigValueError, match="--method bogus"):
        Trainer(TrainConfig(method="bogus", out=tmp_path / "run"))


def test_second_method_end_to_end(tmp_path, capsys):
    from recon.outputs import files as rf
    from recon.commands.evaluate import _evaluate
    from recon.commands.export import ExportConfig, run_export
    from recon.run.folder import Run
    from recon.training.trainer import Trainer
    from recon.training.train_run import train_model
    from viewer.scene import load_scene
    from viewer.training import model_snapshot

    out = tmp_path / "run"
    lines = []
    # render: the initial model through the interface, at a time t (ignored by a static method)
    first = Trainer(tiny_config(out, 6), log=lines.append)
    assert isinstance(first.model, IsoGaussians) and len(first.model) == 300
    cam = first.scene.frames_train[0].camera
    rgb, alpha, meta = first.model.render([cam], None, torch.ones(3), t=0.5)
    assert rgb.shape == (1, cam.height, cam.width, 3) and "means2d" in meta
    # train, save, finish
    metrics = first.run()
    assert metrics["steps"] == 6 and rf.list_checkpoints(out)[-1][0] == 6
    assert rf.read_config_dict(out / rf.CONFIG_FILE)["method"] == METHOD
    # resume: the checkpoint goes back into the same method
    resumed = Trainer(tiny_config(out, 9), log=lines.append)
    resumed.prepare_out()
    assert resumed.step == 6 and isinstance(resumed.model, IsoGaussians)
    metrics = train_model(tiny_config(out, 9), log=lines.append)
    assert metrics["steps"] == 9 and any("resuming" in line for line in lines)
    # the run object: config, method, model from splats.ply
    run = Run.open(out)
    model = run.load_model()
    assert run.model_class is IsoGaussians and isinstance(model, IsoGaussians) and len(model) == len(resumed.model)
    # evaluate: the run's own method reads splats.ply back; same PSNR as the training's final evaluation
    evaluated = _evaluate(out, None, None, None, None, "cpu")
    assert abs(evaluated["psnr"] - metrics["test"]["psnr"]) < 1e-3
    # export: PSNR before equals the run's, through the same method
    report = run_export(ExportConfig(input=out, out=tmp_path / "m.ply"))
    assert report.splats == len(model) and abs(report.psnr_before - metrics["test"]["psnr"]) < 1e-3
    # the viewer: the run folder opens (with its training cameras), and a live snapshot of the model
    from viewer.commands import ViewConfig, build_viewer

    assert build_viewer(ViewConfig(path=out, port=0), verbose=False).scene.run_dir == out
    scene = load_scene(out)
    assert len(scene.splats) == len(model) and len(scene.cameras) == len(run.scene.frames_train)
    snap = model_snapshot(resumed.model)
    assert len(snap) == len(resumed.model) and not np.shares_memory(snap.means, resumed.model.params["means"].detach().numpy())
    assert json.loads((out / rf.METRICS_FILE).read_text())["steps"] == 9


def test_second_method_renders_a_video(tmp_path):
    pytest.importorskip("imageio_ffmpeg")
    from recon.commands.render import render_video
    from recon.training.train_run import train_model

    out = tmp_path / "run"
    train_model(tiny_config(out, 2), log=lambda _: None)
    video = render_video(out, "orbit", tmp_path / "v.mp4", frames=2, progress=False, device="cpu")
    assert video.is_file() and video.stat().st_size > 0

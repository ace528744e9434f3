"""`splatforge eval`: PSNR / SSIM of a trained run or any splat file on a dataset's test views."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from recon.commands.train import USER_ERRORS, fail
from recon.errors import UsageError


def evaluate(run: Path | None = None, splats: Path | None = None, data: Path | None = None,
             data_factor: int | None = None, out: Path | None = None,
             device: Literal["auto", "cpu", "cuda"] = "auto") -> None:
    """Evaluate on the test views; writes OUT/metrics.json and OUT/renders/test_XXX.png.

    Args:
        run: a training run directory (its splats.ply and config.yaml give defaults for the others).
        splats: a splat file (.ply, .splat, .spz) to evaluate instead of a run's splats.ply.
        data: dataset folder or "procedural" (default: the run's).
        data_factor: image downscale factor (default: the run's, else 1).
        out: where metrics.json and renders/ go (default: RUN/eval, or next to the splat file).
        device: where to render: auto (the GPU when CUDA is available), cpu or cuda.
    """
    try:
        metrics = _evaluate(run, splats, data, data_factor, out, device)
    except USER_ERRORS as err:
        fail("eval", err)
    lp = "" if metrics["lpips"] is None else f", LPIPS {metrics['lpips']:.4f}"
    print(f"test PSNR {metrics['psnr']:.2f} dB, SSIM {metrics['ssim']:.4f}{lp} over {metrics['num_views']} views")
    if metrics["lpips"] is None:
        from recon.lpips import NOTE

        print(NOTE)


def saved_dataset(data: str, config_file: Path) -> Path:
    """The dataset named in a run's config.yaml; FileNotFoundError naming both and suggesting --data when
    it is not there (moved, or a relative path written by an older version from another folder)."""
    from recon.trainer import PROCEDURAL

    if str(data) != PROCEDURAL and not Path(data).exists():
        raise FileNotFoundError(f"{data}: the dataset named in {config_file} is not there; give its folder "
                                f"with --data DIR")
    return Path(data)


def _evaluate(run, splats, data, data_factor, out, device) -> dict:
    from recon import run_files as rf
    from recon.outputs import ensure_writable_folder
    from recon.evaluation import evaluate_splat_file
    from recon.trainer import TrainConfig, background_color, load_training_scene, resolve_device

    if run is None and splats is None:
        raise UsageError("give --run DIR or --splats FILE")
    saved, run_facts = {}, None
    if run is not None:
        config_file = Path(run) / rf.CONFIG_FILE
        if not config_file.is_file():
            raise FileNotFoundError(f"{config_file} not found: --run must be a training output directory")
        saved = rf.read_config_dict(config_file)
        if splats is None and (Path(run) / "metrics.json").is_file():
            import json

            run_facts = json.loads((Path(run) / "metrics.json").read_text())
        splats = splats or Path(run) / "splats.ply"
    if not Path(splats).is_file():
        raise FileNotFoundError(f"{splats}: no such splat file" + (" (has the run finished?)" if run else ""))
    if data is None and saved.get("data") is not None:
        data = saved_dataset(saved["data"], Path(run) / rf.CONFIG_FILE)
    if data is None:
        raise UsageError("no dataset: give --data DIR (or --run of a training run)")
    cfg = TrainConfig(data=Path(data), data_factor=data_factor or saved.get("data_factor", 1),
                      seed=saved.get("seed", 0), background=saved.get("background", "auto"))
    out = Path(out) if out is not None else (Path(run) / "eval" if run is not None else Path(splats).parent / "eval")
    ensure_writable_folder(out, "--out")  # before the slow loading
    scene = load_training_scene(cfg)
    background = background_color(cfg, scene).tolist()  # the run's fixed background (dataset's for auto/random)
    return evaluate_splat_file(splats, scene, out, background=background, device=resolve_device(device),
                               run_facts=run_facts)

"""`splatforge eval`: PSNR / SSIM of a trained run or any splat file on a dataset's test (or training) views."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from recon.commands.train import USER_ERRORS, fail
from recon.core.errors import UsageError


def evaluate(run: Path | None = None, splats: Path | None = None, data: Path | None = None,
             data_factor: int | None = None, out: Path | None = None,
             device: Literal["auto", "cpu", "cuda"] = "auto", split: Literal["test", "train"] = "test",
             every: int = 1) -> None:
    """Evaluate on the test views (or the training views: --split train); writes OUT/metrics.json and
    OUT/renders/test_XXX.png (--split train: OUT/metrics_train.json and OUT/renders/train_XXX.png). A
    frame-by-frame sequence run (--method neus on dynamic data) is evaluated frame by frame: OUT/frame_NNNNN/
    per frame and OUT/metrics.json with each frame's metrics and their mean
    (:mod:`recon.commands.evaluate_sequence`).

    Args:
        run: a training run directory (its splats.ply and config.yaml give defaults for the others).
        splats: a splat file (.ply, .splat, .spz) to evaluate instead of a run's splats.ply.
        data: dataset folder, "procedural" or "procedural-4d" (default: the run's). Views of a dynamic
            scene are rendered at their own times; metrics.json then adds per-time PSNR (a 4dgs run is
            read from its newest checkpoint: its splats.ply is one time's 3D slice).
        data_factor: image downscale factor (default: the run's, else 1).
        out: where metrics.json and renders/ go (default: RUN/eval, or next to the splat file).
        device: where to render: auto (the GPU when CUDA is available), cpu or cuda.
        split: which views to score: test (held out), or train (captures that ship no test views; the
            full-image PSNR that training reports on the same views).
        every: score every N-th view of the split (1: all of them).
    """
    try:
        metrics = _evaluate(run, splats, data, data_factor, out, device, split, every)
    except USER_ERRORS as err:
        fail("eval", err)
    lp = "" if metrics["lpips"] is None else f", LPIPS {metrics['lpips']:.4f}"
    print(f"{split} PSNR {metrics['psnr']:.2f} dB, SSIM {metrics['ssim']:.4f}{lp} over {metrics['num_views']} views")
    if metrics["lpips"] is None:
        from recon.losses.lpips import NOTE

        print(NOTE)


def _evaluate(run, splats, data, data_factor, out, device, split="test", every=1) -> dict:
    from recon.outputs import files as rf
    from recon.training.evaluation import evaluate_on_scene, split_frames
    from recon.outputs.paths import ensure_writable_folder
    from recon.run.folder import Run
    from recon.run.sequence import is_sequence_run
    from recon.core.devices import resolve_device

    if run is None and splats is None:
        raise UsageError("give --run DIR or --splats FILE")
    if run is None and data is None:
        raise UsageError("no dataset: give --data DIR (or --run of a training run)")
    if run is not None and splats is None and is_sequence_run(run):
        from recon.commands.evaluate_sequence import evaluate_sequence

        return evaluate_sequence(Path(run), data, data_factor, out, device, split, every)
    if run is not None:
        opened = Run.open(run, data=data, data_factor=data_factor)
    else:  # a bare splat file: a run-less "run" on --data, read as 3D Gaussians
        opened = bare_run(Path(splats), data, data_factor)
    model_file = opened.require_splats(splats)
    run_facts = opened.metrics() if run is not None and splats is None else None
    out = Path(out) if out is not None else (opened.eval_dir if run is not None else model_file.parent / rf.EVAL_DIR)
    ensure_writable_folder(out, "--out")  # before the slow loading
    scene = opened.scene
    split_frames(scene, split, every)  # a bad --split / --every or an empty split fails before the model loads
    background = opened.background().tolist()  # the run's fixed background (dataset's for auto/random)
    model = opened.load_model(splats, resolve_device(device), extent=scene.extent)  # None: the run's own model
    return evaluate_on_scene(model, scene, out, background, source=str(model_file), run_facts=run_facts,
                             supersample=opened.config.supersample,  # as the run trained (1 for a bare file)
                             split=split, every=every)


def bare_run(splats: Path, data: Path, data_factor: int | None):
    """A :class:`recon.run.folder.Run` for a splat file outside any run: default config on ``data``."""
    from recon.run.folder import Run
    from recon.training.trainer import TrainConfig

    cfg = TrainConfig(data=Path(data), data_factor=data_factor or 1, out=splats.parent)
    return Run(splats.parent, cfg, has_config=False, dataset_known=True)

"""`splatforge eval RUN` on a frame-by-frame sequence run (``--method neus`` on dynamic data, issue 50).

Each frame's model (its folder's newest checkpoint) is evaluated as ``splatforge eval`` evaluates a single run
(:func:`recon.training.evaluation.evaluate_on_scene`) on the frame's own views (the test views nearest its time:
:func:`recon.training.frame_sequence.frame_scene`), into OUT/frame_NNNNN/ (metrics.json, renders/). OUT/metrics.json
(OUT defaults to RUN/eval) holds every frame's line and, under the split's name, their mean over the frames that
have views (PSNR, SSIM, LPIPS) and the views' total. A frame without a checkpoint is one line in the log and a
``"missing": true`` line in the file; a frame without views of the split has ``num_views`` 0 and no scores.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from recon.core.devices import resolve_device
from recon.data.scene import DataFormatError
from recon.outputs import files as rf
from recon.outputs.paths import ensure_writable_folder
from recon.run.sequence import SequenceRun
from recon.training.evaluation import evaluate_on_scene, metrics_file_name, split_frames

SCORES = ("psnr", "ssim", "lpips")


def frame_line(k: int, t: float, metrics: dict | None, missing: bool = False) -> dict:
    """One frame's entry of OUT/metrics.json (``metrics``: evaluate_on_scene's dict, None without views)."""
    scores = {s: None if metrics is None else metrics[s] for s in SCORES}
    return {"frame": k, "time": t, **scores, "num_views": 0 if metrics is None else metrics["num_views"],
            **({"missing": True} if missing else {})}


def mean_scores(frames: list[dict]) -> dict:
    """{psnr, ssim, lpips: means over the frames scored (None when none / no LPIPS), num_views: their sum,
    num_frames: frames scored}."""
    scored = [f for f in frames if f["psnr"] is not None]
    out = {s: (float(np.mean([f[s] for f in scored])) if scored and all(f[s] is not None for f in scored) else None)
           for s in SCORES}
    return {**out, "num_views": sum(f["num_views"] for f in frames), "num_frames": len(scored)}


def evaluate_sequence(path: Path, data=None, data_factor=None, out: Path | None = None, device: str = "auto",
                      split: str = "test", every: int = 1, log=print) -> dict:
    """Evaluate every frame of sequence run ``path`` (module docstring); returns :func:`mean_scores`.
    DataFormatError when no frame could be scored."""
    seq = SequenceRun.open(path, data=data, data_factor=data_factor)
    out = Path(out) if out is not None else seq.run.eval_dir
    ensure_writable_folder(out, "--out")  # before the slow loading
    split_frames(seq.scene, split, every)  # a bad --split / --every, or no views at all, fails here
    background = seq.run.background().tolist()
    dev = resolve_device(device)
    frames = []
    for k, t in enumerate(seq.times):
        why = seq.missing(k)
        if why is not None:
            log(why)
            frames.append(frame_line(k, t, None, missing=True))
            continue
        frame = seq.frame_run(k)
        views = frame.scene.frames_test if split == "test" else frame.scene.frames_train
        if not views:
            log(f"frame {k} (time {t:g}): no {split} views at this time")
            frames.append(frame_line(k, t, None))
            continue
        model = frame.load_model(device=dev, extent=seq.scene.extent)
        metrics = evaluate_on_scene(model, frame.scene, out / frame.dir.name, background, source=str(frame.dir),
                                    run_facts=frame.metrics(), supersample=seq.run.config.supersample,
                                    split=split, every=every)
        frames.append(frame_line(k, t, metrics))
        log(f"frame {k} (time {t:g}): {split} PSNR {metrics['psnr']:.2f} dB over {metrics['num_views']} views")
    summary = mean_scores(frames)
    if summary["num_frames"] == 0:
        raise DataFormatError(f"{seq.dir}: no frame could be evaluated (none has a checkpoint and {split} views)")
    rf.write_json(out / metrics_file_name(split), {split: summary, "frames": frames, "source": str(seq.dir),
                                                   **({} if every == 1 else {"every": int(every)})})
    return summary

"""`splatforge demo`: train on the built-in procedural scene (about 2 minutes on 2 CPU cores), then
evaluate, export and render a turntable video. Needs no files or downloads."""

from __future__ import annotations

import time
from pathlib import Path

from recon.commands.train import USER_ERRORS, fail

DEMO_STEPS = 1000  # measured: about 2 minutes on 2 shared CPU cores at 128 x 128 (see the report)


def demo(out: Path = Path("demo_output"), steps: int = DEMO_STEPS, video: bool = True, progress: bool = True) -> None:
    """Train 3DGS on a procedural scene (coloured spheres and a box on a checkered floor).

    Args:
        out: output folder (splats.ply, metrics.json, loss.png, renders/, turntable.mp4).
        steps: training steps.
        video: also render a turntable video.
    """
    from recon.commands.render import render_video
    from recon.data.data_arg import PROCEDURAL
    from recon.training.trainer import TrainConfig
    from recon.training.train_run import train_model

    cfg = TrainConfig(data=Path(PROCEDURAL), out=Path(out), steps=steps, save_every=max(1, steps // 2),
                      progress=progress)
    t0 = time.perf_counter()
    try:
        metrics = train_model(cfg)
        movie = (render_video(cfg.out, "orbit", cfg.out / "turntable.mp4", frames=90, progress=progress, force=True)
                 if video else None)
    except USER_ERRORS as err:
        fail("demo", err)
    print(f"\ntest PSNR {metrics['test']['psnr']:.2f} dB (SSIM {metrics['test']['ssim']:.3f}) after "
          f"{metrics['steps']} steps, {metrics['num_gaussians']:,} Gaussians, {time.perf_counter() - t0:.0f} s")
    print(f"outputs in {cfg.out}/: splats.ply, metrics.json, loss.png, renders/ (ground truth | render | error)"
          + (f", {movie.name}" if movie else ""))
    print(f"view it:    splatforge view {cfg.out}/splats.ply")
    print(f"export it:  splatforge export {cfg.out} --format spz --out scene.spz")

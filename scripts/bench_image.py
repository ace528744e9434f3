#!/usr/bin/env python
"""Benchmark images as 2D Gaussians (issue 19): fit quality and time, render speed, scale behaviour; prints JSON.

  python scripts/bench_image.py fit [--gpp 0.1] [--steps 3000] [--images DIR]   # every image of kodak12
  python scripts/bench_image.py render [--gaussians 25000] [--model /tmp/m.gimg] # render speed, scale checks

`fit` fits each image with round(gpp x H x W) Gaussians (recon.image.fit defaults otherwise) and prints one JSON
line per image (PSNR, MS-SSIM, seconds) and a summary line with the means. `render` fits kodim01 (or --image)
with --gaussians for --fit-steps (or reads that fit from --model, where an earlier run wrote it), then times
sum-mode renders at 1x (500x500) and 4x (2000x2000) (median of --repeats after a warm-up) and checks that a scale-1 render reproduces the fit's own render exactly and that a
scale-2 render box-downsampled by 2 is within 0.5 dB of the scale-1 render's PSNR.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import rasterizer  # noqa: E402,F401  (before torch: sets GOMP_SPINCOUNT, as the splatforge command does)

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

import imageio.v3 as iio  # noqa: E402
import torch  # noqa: E402

from bench_rasterizer import machine  # noqa: E402
from recon.image.fit import FitConfig, fit_image, psnr  # noqa: E402
from recon.image.gimg import decode_gimg, encode_gimg, read_gimg, write_gimg  # noqa: E402

KODAK = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "images2d" / "kodak12"


def load(path: Path) -> torch.Tensor:
    """An 8-bit RGB image as float32 [H, W, 3] in [0, 1]."""
    return torch.from_numpy(iio.imread(path)[..., :3].copy()).float() / 255.0


def ms_ssim(a: torch.Tensor, b: torch.Tensor) -> float:
    from pytorch_msssim import ms_ssim as _ms_ssim

    return float(_ms_ssim(a.clamp(0, 1).permute(2, 0, 1)[None], b.permute(2, 0, 1)[None], data_range=1.0))


class TimeToPsnr:
    """A fit_image progress callback (called every 50 steps) that notes when the PSNR first reaches ``target``:
    the seconds since construction (just before the fit starts) and the step."""

    def __init__(self, target: float):
        self.target, self.t0, self.seconds, self.step = target, time.perf_counter(), None, None

    def __call__(self, step: int, value: float) -> None:
        if self.seconds is None and value >= self.target:
            self.seconds, self.step = round(time.perf_counter() - self.t0, 2), step


def bench_fit(args) -> None:
    files = sorted(Path(args.images).glob("*.png"))[:args.limit]
    if not files:
        raise SystemExit(f"bench_image: no PNG images in {args.images} (the kodak12 folder of ../shared/data)")
    rows = []
    for path in files:
        target = load(path)
        H, W, _ = target.shape
        cfg = FitConfig(gaussians=round(args.gpp * H * W), steps=args.steps, backend=args.backend, device=args.device)
        reached = TimeToPsnr(args.target_psnr)
        result = fit_image(target, cfg, progress=reached)
        with torch.no_grad():
            render = result.model.to(args.device).render(backend=args.backend).cpu()
        row = {"image": path.name, "gaussians": cfg.gaussians, "steps": cfg.steps, "psnr": round(result.psnr, 3),
               "ms_ssim": round(ms_ssim(render, target), 5), "seconds": round(result.seconds, 1),
               f"seconds_to_{args.target_psnr:g}db": reached.seconds, f"step_to_{args.target_psnr:g}db": reached.step}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"summary": "fit", "gpp": args.gpp, "images": len(rows), "steps": args.steps,
                      "mean_psnr": round(statistics.mean(r["psnr"] for r in rows), 3),
                      "mean_ms_ssim": round(statistics.mean(r["ms_ssim"] for r in rows), 5),
                      "max_seconds": max(r["seconds"] for r in rows),
                      "mean_seconds": round(statistics.mean(r["seconds"] for r in rows), 1),
                      f"images_reaching_{args.target_psnr:g}db": sum(r[f"step_to_{args.target_psnr:g}db"] is not None
                                                                     for r in rows),
                      "machine": machine()}))


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(1000 * statistics.median(times), 2)


def box_down(img: torch.Tensor, k: int) -> torch.Tensor:
    H, W, C = img.shape
    return img.reshape(H // k, k, W // k, k, C).mean(dim=(1, 3))


def fitted_model(args, target: torch.Tensor):
    """(model, its PSNR, where it came from): read from ``--model`` when that file holds a fit of the same image,
    Gaussian count and steps, else fitted now (and written to ``--model`` when given)."""
    key = {"image": Path(args.image).name, "gaussians": args.gaussians, "fit_steps": args.fit_steps}
    if args.model and Path(args.model).is_file():
        model = read_gimg(args.model)
        if model.source.get("bench_render") == key:
            with torch.no_grad():
                return model, psnr(model.to(args.device).render(backend=args.backend).cpu(), target), f"read {args.model}"
    result = fit_image(target, FitConfig(gaussians=args.gaussians, steps=args.fit_steps, backend=args.backend,
                                         device=args.device))
    if args.model:
        write_gimg(args.model, replace(result.model, source={"bench_render": key}), force=True)
    return result.model, result.psnr, "fitted" + (f", written to {args.model}" if args.model else "")


def bench_render(args) -> None:
    torch.set_num_threads(args.torch_threads)
    target = load(Path(args.image))
    H, W, _ = target.shape
    fitted, fit_psnr, origin = fitted_model(args, target)
    model = fitted.to(args.device)
    out = {"image": Path(args.image).name, "gaussians": model.n, "fit_steps": args.fit_steps,
           "fit_psnr": round(fit_psnr, 3), "model": origin}
    with torch.no_grad():
        sync = torch.cuda.synchronize if model.means.is_cuda else (lambda: None)
        for k in (1, 4):
            out[f"render_{W * k}x{H * k}_ms"] = median_ms(
                lambda: (model.render(W * k, H * k, backend=args.backend), sync()), args.repeats)
        scale1 = model.render(backend=args.backend).cpu()
        stored = decode_gimg(encode_gimg(fitted.detached()))  # what `image fit` writes and `render` reads
        out["scale1_equals_fit_render"] = bool(torch.equal(stored.to(args.device).render(backend=args.backend).cpu(),
                                                           scale1))
        up = box_down(model.render(2 * W, 2 * H, backend=args.backend).cpu(), 2)
        out["psnr_scale1"] = round(psnr(scale1, target), 3)
        out["psnr_scale2_boxdown2"] = round(psnr(up, target), 3)
        out["scale2_within_0p5_db"] = abs(out["psnr_scale2_boxdown2"] - out["psnr_scale1"]) <= 0.5
    out["machine"] = machine()
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    fit = sub.add_parser("fit")
    fit.add_argument("--images", default=str(KODAK))
    fit.add_argument("--gpp", type=float, default=0.1, help="Gaussians per pixel")
    fit.add_argument("--steps", type=int, default=FitConfig.steps)
    fit.add_argument("--backend", default="cpu")
    fit.add_argument("--device", default="cpu", help="cpu, cuda or auto: where the fit runs (with --backend cuda: cuda)")
    fit.add_argument("--target-psnr", type=float, default=36.0, help="report the seconds and step to reach this PSNR")
    fit.add_argument("--limit", type=int, default=None, help="fit only the first LIMIT images")
    ren = sub.add_parser("render")
    ren.add_argument("--image", default=str(KODAK / "kodim01.png"))
    ren.add_argument("--gaussians", type=int, default=25_000)
    ren.add_argument("--fit-steps", type=int, default=1000)
    ren.add_argument("--repeats", type=int, default=15)
    ren.add_argument("--backend", default="cpu")
    ren.add_argument("--device", default="cpu", help="cpu, cuda or auto (with --backend cuda: cuda)")
    ren.add_argument("--model", help="a .gimg file (e.g. under /tmp): the fitted model is read from it when it holds "
                     "a fit of the same --image, --gaussians and --fit-steps, else fitted and written there, so "
                     "repeated timings do not refit")
    ren.add_argument("--torch-threads", type=int, default=1,
                     help="PyTorch threads (the render's PyTorch ops are on N-element tensors: on the 2-core machine "
                          "one thread was faster, 7.8 vs 11.6 ms at 500x500; the Numba kernels use all cores)")
    args = ap.parse_args()
    if args.what == "fit":
        bench_fit(args)
    else:
        bench_render(args)


if __name__ == "__main__":
    main()

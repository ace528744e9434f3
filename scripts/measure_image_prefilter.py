"""Measure the anti-aliasing prefilter of `splatforge image render` (recon/image/resample.py); prints JSON.

Fits IMAGE (optionally a centre crop) with N Gaussians for S steps, or reads a .gimg model (--model), then for
each scale s < 1 renders the model at s with the derived prefilter (variance (1 - s^2) / 12 output pixels^2), the
one used (ANTIALIAS_GAIN times that), without it (point sampling), and with other variances for comparison
(half and twice the derived one, 1/12), and reports the PSNR of each against the
box-downsampled original image and against the box-downsampled scale-1 render (which isolates the resampling
error from the fit error). Also: PSNR of the scale-2 render box-downsampled by 2 against the scale-1 render
and against the image.

    PYTHONPATH=$PWD python scripts/measure_image_prefilter.py ../shared/data/images2d/kodak12/kodim05.png \
        --crop 256 --gaussians 6554 --steps 1000
"""

from __future__ import annotations

import argparse
import json
import time

from recon.image.fit import FitConfig, fit_image
from recon.image.gimg import read_gimg, write_gimg
from recon.image.io import read_image
from recon.image.model import render_image
from recon.image.resample import box_downsample, prefilter_variance, psnr

SCALES = (0.5, 0.25, 0.125)  # exact boxes when the side is a multiple of 8 (--crop 256)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--model", default=None, help="a .gimg fitted to IMAGE (skips fitting)")
    ap.add_argument("--crop", type=int, default=0, help="centre crop side in pixels (0: the whole image)")
    ap.add_argument("--gaussians", type=int, default=6554)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--save", default=None, help="write the fitted model to this .gimg (float32)")
    args = ap.parse_args()
    target = read_image(args.image).pixels
    if args.crop:
        H, W, _ = target.shape
        top, left = (H - args.crop) // 2, (W - args.crop) // 2
        target = target[top:top + args.crop, left:left + args.crop].contiguous()
    H, W, _ = target.shape
    started = time.perf_counter()
    if args.model:
        model = read_gimg(args.model)
    else:
        model = fit_image(target, FitConfig(gaussians=args.gaussians, steps=args.steps, pixel_variance=0.0)).model  # point samples: the models this prefilter is for
        if args.save:
            write_gimg(args.save, model, force=True)
    fit_seconds = time.perf_counter() - started
    full = render_image(model)
    result = {"image": args.image, "size": [W, H], "gaussians": model.n, "steps": args.steps,
              "fit_seconds": round(fit_seconds, 1), "psnr_scale1": round(psnr(full, target), 3), "scales": []}
    for s in SCALES:
        w, h = round(W * s), round(H * s)
        box_image, box_render = box_downsample(target, w, h), box_downsample(full, w, h)
        derived, used = prefilter_variance(W, H, w, h, gain=1.0), prefilter_variance(W, H, w, h)
        row = {"scale": round(s, 4), "size": [w, h], "derived_variance": round(derived, 4),
               "used_variance": round(used, 4)}
        # alternatives: half and twice the derived variance; 1/12, the box of one output pixel alone
        # (forgetting that the fitted pixels are already box-filtered)
        for label, v in (("none", 0.0), ("derived", derived), ("used", used), ("half", derived / 2),
                         ("twice", 2 * derived), ("1/12", 1 / 12)):
            out = render_image(model, w, h, prefilter_variance=v)
            row[label] = {"variance": round(v, 4), "psnr_vs_box_image": round(psnr(out, box_image), 3),
                          "psnr_vs_box_render": round(psnr(out, box_render), 3)}
        result["scales"].append(row)
    double = box_downsample(render_image(model, 2 * W, 2 * H), W, H)
    result["scale2_box_vs_scale1_render"] = round(psnr(double, full), 3)
    result["scale2_box_vs_image"] = round(psnr(double, target), 3)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

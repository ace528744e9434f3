"""Establish the encoding of NeRF-synthetic's test depth and normal PNGs from the data itself.

    python scripts/lego_gt_encoding.py [--data ../shared/data/lego_400] [--views 12]

The test split of lego (``r_K_depth_0001.png``, ``r_K_normal_0001.png``, 8-bit RGBA, documented nowhere)
is probed without any trained model, by consistency with the cameras of ``transforms_test.json``:

1. Depth: for a family of decodings ``d = a * g(v / 255) + b`` (``g`` identity, the sRGB-to-linear
   curve, or 1 / x; ``d`` the planar camera z or the distance along the ray), the parameters that make the views
   agree with each other are fitted: every object pixel of view i is lifted to 3D with its decoded depth,
   projected into a neighbouring view j, and its predicted depth there is compared with view j's decoded
   depth (robust loss; occlusions are outliers). The best hypothesis and its residual are reported.
2. Normals: with the fitted depth (blurred by :data:`SMOOTH_PX`: 8-bit depth is too coarse for
   neighbour differences), normals are computed from the depth maps
   (:func:`recon.geometry.metrics.depth_to_normal`) and compared with the PNG's unit-length vectors as
   world-frame and as camera-frame normals; the clipping hypothesis (value / 255 = max(n, 0)) is checked
   on the sign of the depth normals' components where the PNG has zero / positive ones; the fraction of
   unit PNG normals facing their camera (world frame); the most frequent colours.

Prints JSON; datasets/README.md states the conclusions.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "lego_400"


def srgb_to_linear(x: np.ndarray) -> np.ndarray:
    return np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)


TRUNC = 0.2  # scene units; residuals beyond count as occlusion outliers
CURVES = {"linear": lambda x: x, "srgb": srgb_to_linear, "inverse": lambda x: 1.0 / np.maximum(x, 1e-3)}


def load_views(data: Path, count: int):
    """[(c2w OpenGL [4, 4], f, valid [H, W] bool, depth_value [H, W] float in [0, 1], normal_value [H, W, 3])]."""
    import imageio.v3 as iio
    from scipy.ndimage import binary_erosion

    meta = json.loads((data / "transforms_test.json").read_text())
    frames = meta["frames"]
    picks = np.linspace(0, len(frames) - 1, count).round().astype(int)
    out = []
    for k in picks:
        fr = frames[k]
        stem = data / (fr["file_path"].lstrip("./"))
        rgba = iio.imread(stem.with_name(stem.name + ".png"))
        dep = iio.imread(stem.with_name(stem.name + "_depth_0001.png"))
        nor = iio.imread(stem.with_name(stem.name + "_normal_0001.png"))
        w = rgba.shape[1]
        f = 0.5 * w / math.tan(0.5 * meta["camera_angle_x"])
        # interior object pixels: opaque in the RGBA image and in its 3x3 neighbourhood (the 2x box
        # downscale mixed edge pixels with the background in the depth and normal images)
        valid = binary_erosion(rgba[..., 3] == 255, iterations=1) & (dep[..., 0] > 0)
        out.append((np.asarray(fr["transform_matrix"], dtype=np.float64), f, valid, dep[..., 0] / 255.0,
                    nor[..., :3] / 255.0))
    return out


def rays(shape, f):
    """Camera-frame (OpenGL) directions [H, W, 3] with unit forward component (z = -1)."""
    h, w = shape
    ys, xs = np.mgrid[0:h, 0:w] + 0.5
    return np.stack([(xs - w / 2) / f, -(ys - h / 2) / f, -np.ones_like(xs)], -1)


def planar_depth(value, params, curve, radial, dirs):
    a, b = params
    d = a * CURVES[curve](value) + b
    return d / np.linalg.norm(dirs, axis=-1) if radial else d


def pair_residuals(params, views, pairs, curve, radial, stride=3):
    res = []
    for i, j in pairs:
        c2w_i, f, valid_i, v_i, _ = views[i]
        c2w_j, _, valid_j, v_j, _ = views[j]
        dirs = rays(v_i.shape, f)
        z = planar_depth(v_i, params, curve, radial, dirs)
        mask = np.zeros_like(valid_i)
        mask[::stride, ::stride] = valid_i[::stride, ::stride]
        p_cam = dirs[mask] * z[mask, None]
        p_w = p_cam @ c2w_i[:3, :3].T + c2w_i[:3, 3]
        w2c_j = np.linalg.inv(c2w_j)
        q = p_w @ w2c_j[:3, :3].T + w2c_j[:3, 3]
        zj = -q[:, 2]
        h, w = v_j.shape
        x = q[:, 0] / zj * f + w / 2
        y = -q[:, 1] / zj * f + h / 2
        xi, yi = np.floor(x).astype(int), np.floor(y).astype(int)
        inside = (xi >= 0) & (xi < w) & (yi >= 0) & (yi < h) & (zj > 0)
        xi, yi, zj = xi[inside], yi[inside], zj[inside]
        ok = valid_j[yi, xi]
        dirs_j = rays(v_j.shape, f)[yi[ok], xi[ok]]
        zj_dec = planar_depth(v_j[yi[ok], xi[ok]], params, curve, radial, dirs_j)
        res.append(zj_dec - zj[ok])
    return np.concatenate(res)


def neighbour_pairs(views, per_view=2, min_angle_deg=5.0):
    """(i, j) pairs: each view with its ``per_view`` nearest views at least ``min_angle_deg`` away."""
    centres = np.stack([v[0][:3, 3] for v in views])
    unit = centres / np.linalg.norm(centres, axis=1, keepdims=True)
    ang = np.degrees(np.arccos(np.clip(unit @ unit.T, -1, 1)))
    pairs = []
    for i in range(len(views)):
        order = [j for j in np.argsort(ang[i]) if j != i and ang[i, j] > min_angle_deg]
        pairs += [(i, int(j)) for j in order[:per_view]]
    return pairs


STARTS = {"linear": [(-8.0, 8.0), (4.0, 2.0)], "srgb": [(-8.0, 8.0), (4.0, 2.0)], "inverse": [(2.0, 0.0)]}


def fit_depth(views, pairs, curve, radial):
    """Nelder-Mead on the truncated mean |residual| (TRUNC: occlusions count as outliers), from the
    :data:`STARTS` of ``curve`` (a coarse grid over slope and offset found the basins)."""
    from scipy.optimize import minimize

    def cost(p):
        r = pair_residuals(p, views, pairs, curve, radial, stride=8)
        return float(np.minimum(np.abs(r), TRUNC).mean()) if r.size > 3000 else TRUNC

    best = None
    for x0 in STARTS[curve]:
        r = minimize(cost, x0, method="Nelder-Mead", options={"xatol": 1e-3, "maxiter": 60})
        if best is None or r.fun < best.fun:
            best = r
    res = pair_residuals(best.x, views, pairs, curve, radial, stride=4)
    return {"a": float(best.x[0]), "b": float(best.x[1]), "median_abs_residual": float(np.median(np.abs(res))),
            "frac_within_0.02": float(np.mean(np.abs(res) < 0.02)), "pixels": int(res.size)}


def depth_sensitivity(views, pairs, a, b, curve, radial):
    """Median |residual| at the fit and with the offset moved by +-0.1 and the slope by +-2%."""
    out = {}
    for name, p in (("fit", (a, b)), ("b-0.1", (a, b - 0.1)), ("b+0.1", (a, b + 0.1)),
                    ("a*0.98", (a * 0.98, b)), ("a*1.02", (a * 1.02, b))):
        out[name] = float(np.median(np.abs(pair_residuals(p, views, pairs, curve, radial, stride=4))))
    return out


def centre_depths(views, a, b, curve, radial):
    """[(camera distance to the origin, decoded depth at the image centre)]: the object sits at the origin."""
    out = []
    for c2w, f, valid, v, _ in views:
        h, w = v.shape
        if valid[h // 2, w // 2]:
            d = planar_depth(v, (a, b), curve, radial, rays(v.shape, f))[h // 2, w // 2]
            out.append([round(float(np.linalg.norm(c2w[:3, 3])), 3), round(float(d), 3)])
    return out


SMOOTH_PX = 2.0  # Gaussian blur of the decoded depth before depth-to-normal (8-bit depth: 0.03-unit steps)


def smoothed_depth(z, valid):
    """(blurred camera z, usable mask): normalised Gaussian blur inside the object, minus pixels near the
    silhouette or a depth jump (local 5x5 range > 0.3 units)."""
    from scipy.ndimage import binary_erosion, gaussian_filter, maximum_filter, minimum_filter

    w = gaussian_filter(valid.astype(float), SMOOTH_PX)
    zs = gaussian_filter(np.where(valid, z, 0.0), SMOOTH_PX) / np.maximum(w, 1e-9)
    spread = maximum_filter(np.where(valid, z, -1e9), size=5) - minimum_filter(np.where(valid, z, 1e9), size=5)
    return zs, binary_erosion(valid, iterations=4) & (spread < 0.3)


def normal_check(views, params, curve, radial):
    """Depth-derived normals (blurred decoded depth) against the PNG: median angle on the PNG's unit-length
    pixels for "world" and "camera" (OpenGL) frames; clipping checks; world normals facing the camera."""
    import torch

    from recon.geometry.metrics import depth_to_normal

    ang = {"world": [], "camera": []}
    zero_comp, pos_comp, facing = [], [], []
    for c2w, f, valid, v, nval in views:
        dirs = rays(v.shape, f)
        z = planar_depth(v, params, curve, radial, dirs)
        zs, usable = smoothed_depth(z, valid)
        h, w = v.shape
        K = torch.tensor([[f, 0, w / 2], [0, f, h / 2], [0, 0, 1]], dtype=torch.float64)
        n_cv, ok = depth_to_normal(torch.from_numpy(np.where(usable, zs, 0.0)), K)
        ok = ok.numpy() & usable
        n_gl = n_cv.numpy() * np.array([1.0, -1.0, -1.0])  # OpenCV -> OpenGL camera axes
        n_world = n_gl @ c2w[:3, :3].T
        unit = ok & (np.abs(np.linalg.norm(nval, axis=-1) - 1) < 0.03)
        t = nval[unit] / np.linalg.norm(nval[unit], axis=-1, keepdims=True)
        for frame, n in (("world", n_world), ("camera", n_gl)):
            ang[frame].append(np.degrees(np.arccos(np.clip((t * n[unit]).sum(-1), -1, 1))))
        # clipping: a zero PNG component should be a non-positive true component, a positive one positive
        bright = ok & (np.linalg.norm(nval, axis=-1) > 0.2)
        zero_comp.append(n_world[bright][nval[bright] < 0.01] < 0.25)
        pos_comp.append(n_world[ok][nval[ok] > 0.05] > -0.25)
        # world-frame PNG normals (unit ones) should face the camera: n . (c - p) > 0
        uv = valid & (np.abs(np.linalg.norm(nval, axis=-1) - 1) < 0.03)
        to_cam = -((dirs[uv] * z[uv, None]) @ c2w[:3, :3].T)
        facing.append((nval[uv] * to_cam).sum(-1) > 0)
    out = {f"{k}_frame_median_deg": float(np.median(np.concatenate(a))) for k, a in ang.items()}
    out.update({
        "world_frame_within_10deg_frac": float(np.mean(np.concatenate(ang["world"]) < 10)),
        "unit_pixels_compared": int(sum(a.size for a in ang["world"])),
        "zero_component_true_below_0.25_frac": float(np.mean(np.concatenate(zero_comp))),
        "positive_component_true_above_-0.25_frac": float(np.mean(np.concatenate(pos_comp))),
        "world_unit_normals_facing_camera_frac": float(np.mean(np.concatenate(facing))),
    })
    return out


def colour_modes(views, top=6):
    """The most frequent normal-PNG colours on the object, with their pixel fractions."""
    colours, counts = np.unique(np.round(np.concatenate([n[m] for _, _, m, _, n in views]) * 255).astype(int),
                                axis=0, return_counts=True)
    order = np.argsort(-counts)[:top]
    return [[colours[i].tolist(), round(float(counts[i] / counts.sum()), 3)] for i in order]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--views", type=int, default=12)
    args = ap.parse_args(argv)
    views = load_views(args.data, args.views)
    pairs = neighbour_pairs(views)
    fits = {}
    for curve in CURVES:
        for radial in (False, True):
            fits[f"{curve}/{'ray_distance' if radial else 'camera_z'}"] = fit_depth(views, pairs, curve, radial)
    best_key = min(fits, key=lambda k: fits[k]["median_abs_residual"])
    curve, kind = best_key.split("/")
    best = fits[best_key]
    radial = kind == "ray_distance"
    normals = normal_check(views, (best["a"], best["b"]), curve, radial)
    sens = depth_sensitivity(views, pairs, best["a"], best["b"], curve, radial)
    centre = centre_depths(views, best["a"], best["b"], curve, radial)
    unit_frac = float(np.mean([np.mean(np.abs(np.linalg.norm(n[m], axis=1) - 1) < 0.03) for _, _, m, _, n in views]))
    print(json.dumps({"views": len(views), "pairs": len(pairs), "depth_fits": fits, "best_depth": best_key,
                      "best_depth_sensitivity": sens, "camera_distance_vs_centre_depth": centre,
                      "normal_checks": normals, "unit_normal_pixel_frac": unit_frac,
                      "normal_colour_modes": colour_modes(views)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

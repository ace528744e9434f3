"""Outputs of ``splatforge insert`` (see :mod:`recon.commands.insert`): the frame(s), depth (16-bit PNG or
float32 .npy, with a coloured preview; .npy / .mp4 for a path) and the asset-id mask, all written atomically."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def preview_path(path: Path) -> Path:
    """``depth.png`` -> ``depth.preview.png`` (the coloured preview beside a depth or mask file)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.preview.png")


def colourise_depth(depth: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] preview of ``depth`` [H, W] (0 = nothing, shown black): near yellow -> far purple
    (matplotlib's viridis reversed when available, else grey), range = the 1..99 % quantiles of the valid
    depths."""
    valid = depth > 0
    out = np.zeros((*depth.shape, 3), np.uint8)
    if not valid.any():
        return out
    lo, hi = np.quantile(depth[valid], [0.01, 0.99])
    x = np.clip((depth - lo) / max(hi - lo, 1e-12), 0, 1)
    try:
        from matplotlib import colormaps

        rgb = colormaps["viridis"](1.0 - x)[..., :3]
    except ImportError:  # matplotlib missing: grey
        rgb = np.repeat((1.0 - x)[..., None], 3, axis=2)
    out[valid] = (rgb[valid] * 255 + 0.5).astype(np.uint8)
    return out


MASK_COLOURS = np.array([[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200], [245, 130, 48],
                         [145, 30, 180], [70, 240, 240], [240, 50, 230]], np.uint8)


def colourise_mask(mask: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3]: black where no asset, a distinct colour per asset id."""
    return MASK_COLOURS[np.where(mask < 0, 0, mask % (len(MASK_COLOURS) - 1) + 1)]


def png_bytes(array: np.ndarray, text: dict | None = None) -> bytes:
    """PNG of a uint8 [H, W(, 3)] or uint16 [H, W] array, with optional text chunks."""
    import io

    from PIL import Image, PngImagePlugin

    info = None
    if text:
        info = PngImagePlugin.PngInfo()
        for k, v in text.items():
            info.add_text(k, str(v))
    if array.dtype == np.uint16:
        image = Image.fromarray(np.ascontiguousarray(array, np.uint16))
    else:
        image = Image.fromarray(array)
    buf = io.BytesIO()
    image.save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def depth_png16(depth: np.ndarray, scale: float, warn) -> np.ndarray:
    """uint16 [H, W] ``round(depth * scale)`` (0 = nothing); values past 65535 are clipped with a warning."""
    scaled = np.round(np.where(depth > 0, depth, 0.0) * scale)
    if scaled.max(initial=0) > 65535:
        warn(f"--depth: depths up to {depth.max():.4g} exceed the 16-bit range at --depth-scale {scale:g} "
             f"(max {65535 / scale:.4g}); they are clipped: lower --depth-scale or write .npy")
    return np.clip(scaled, 0, 65535).astype(np.uint16)


def write_outputs(p, frames: dict, warn) -> list[Path]:
    """Write --out, --depth (+ preview), --mask (+ preview) of plan ``p`` (:class:`recon.commands.insert.InsertPlan`:
    its ``cfg`` and output ``kind``) atomically; ``frames`` as :func:`recon.commands.insert.render_frames` returns
    them. Returns the paths written."""
    from recon.core.atomic import atomic_write_bytes
    from recon.commands.render import write_frame_folder, write_image, write_video

    cfg, force, written = p.cfg, p.cfg.force, []
    if p.kind == "image":
        written.append(write_image(Path(cfg.out), frames["rgb"][0], force=force))
    elif p.kind == "folder":
        written.append(write_frame_folder(Path(cfg.out), frames["rgb"], force=force))
    elif p.kind == "video":
        written.append(write_video(Path(cfg.out), frames["rgb"], cfg.fps, force=force))
    single = p.kind == "image"
    if cfg.depth is not None:
        path, suffix = Path(cfg.depth), Path(cfg.depth).suffix.lower()
        if single and suffix == ".png":
            data = png_bytes(depth_png16(frames["depth"][0], cfg.depth_scale, warn),
                             {"depth_scale": cfg.depth_scale, "meaning": "camera z * depth_scale; 0 = nothing"})
            atomic_write_bytes(path, data, force=force)
        elif suffix == ".npy":
            stack = frames["depth"][0] if single else np.stack(frames["depth"])
            atomic_write_bytes(path, npy_bytes(stack.astype(np.float32)), force=force)
        else:  # .mp4 of a path
            write_video(path, [colourise_depth(d) for d in frames["depth"]], cfg.fps, force=force)
        written.append(path)
        if single:
            atomic_write_bytes(preview_path(path), png_bytes(colourise_depth(frames["depth"][0])), force=force)
            written.append(preview_path(path))
    if cfg.mask is not None:
        path, suffix = Path(cfg.mask), Path(cfg.mask).suffix.lower()
        if single and suffix == ".png":
            ids = np.clip(frames["mask"][0] + 1, 0, 255).astype(np.uint8)
            atomic_write_bytes(path, png_bytes(ids, {"meaning": "0 = no asset, k = the k-th --asset"}), force=force)
            atomic_write_bytes(preview_path(path), png_bytes(colourise_mask(frames["mask"][0])), force=force)
            written += [path, preview_path(path)]
        elif suffix == ".npy":
            stack = frames["mask"][0] if single else np.stack(frames["mask"])
            atomic_write_bytes(path, npy_bytes(stack.astype(np.int32)), force=force)
            written.append(path)
        else:
            write_video(path, [colourise_mask(m) for m in frames["mask"]], cfg.fps, force=force)
            written.append(path)
    return written

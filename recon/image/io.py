"""Image files for `splatforge image`: read one for fitting, write renders (atomically).

Reading (:func:`read_image`) gives float32 [H, W, C] in [0, 1], the layout ("L", "RGB", "RGBA") and source
facts kept in the .gimg file. How each kind of file is handled:

- 8-bit grey ("L", also 1-bit): fitted as 1 channel, layout "L"; values / 255.
- 8-bit RGB: 3 channels, layout "RGB"; values / 255. CMYK, YCbCr, LAB, HSV: converted to RGB by Pillow.
- RGBA (and grey + alpha, palette with transparency): 4 channels, layout "RGBA"; alpha is a fitted channel
  like the others (not premultiplied) and is written back as an RGBA PNG.
- palette ("P") images: converted to RGB (RGBA when the palette has transparency).
- 16-bit PNGs (grey, grey + alpha, RGB, RGBA; decoded by recon/image/png16.py since Pillow reads 16-bit RGB
  as 8-bit): values / 65535, kept as float32 (not rounded to 8 bits); renders of the model are written
  back as 16-bit PNGs. 16-bit grey from other formats (Pillow "I;16" / "I") likewise.
- floating-point images (Pillow "F") are refused: there is no agreed white level to scale by.

A file that is not an image, is empty or is cut short raises :class:`ImageFileError` naming the file, what is
wrong and what to do.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from recon.core.atomic import atomic_write_bytes
from recon.core.errors import UsageError
from recon.core.limits import (MAX_IMAGE_PIXELS, PNG_SIGNATURE, check_png_crcs, open_image, read_image_size,
                               require_regular_file, with_path)

from . import png16

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm", ".tga", ".gif")
LAYOUT_CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}
PIL_MODE_OF_LAYOUT = {"L": "L", "RGB": "RGB", "RGBA": "RGBA"}


class ImageFileError(UsageError):
    """An input image cannot be used for fitting (not an image, empty, damaged, an unsupported kind)."""


@dataclass(frozen=True)
class LoadedImage:
    """pixels [H, W, C] float32 in [0, 1]; layout "L" / "RGB" / "RGBA"; source: facts for the .gimg file
    (name, format, mode, bit_depth, note on how it was converted)."""

    pixels: Tensor
    layout: str
    source: dict

    @property
    def height(self) -> int:
        return self.pixels.shape[0]

    @property
    def width(self) -> int:
        return self.pixels.shape[1]

    @property
    def bit_depth(self) -> int:
        return int(self.source.get("bit_depth", 8))


def read_image(path: str | Path) -> LoadedImage:
    """Read ``path`` for fitting (see the module docstring for how each kind of image is handled)."""
    path = Path(path)
    if path.is_dir():
        raise ImageFileError(f"{path}: is a folder; give an image file (or use the folder form of the command)")
    if path.exists():  # a missing file: FileNotFoundError names it
        require_regular_file(path, "image file", with_path(ImageFileError))  # not /dev/zero or a FIFO
    data = path.read_bytes()  # FileNotFoundError / PermissionError name the file
    if not data:
        raise ImageFileError(f"{path}: the file is empty (0 bytes); give a PNG or JPEG image")
    if data.startswith(PNG_SIGNATURE):  # Pillow leaves the pixel chunks' CRCs unchecked
        check_png_crcs(data, path, error=with_path(ImageFileError))
    header = png16.png_header(data)
    if header is not None and header[2] == 16:
        return _read_png16(path, data)
    return _read_with_pillow(path, data)


def read_image_header(path: str | Path) -> tuple[int, int, int]:
    """(width, height, channels) that :func:`read_image` will give for ``path``, from the file's header only
    (nothing decoded): what `image fit` sizes its memory by before reading the pixels. Channels: 1 for grey
    (also 1-bit and 16-bit grey), 4 for anything with transparency (and palette images, which may have it:
    an upper bound), else 3. :class:`ImageFileError` naming the file for what :func:`read_image` would refuse
    before decoding (not an image, a folder or special file, more than MAX_IMAGE_PIXELS pixels)."""
    from PIL import Image

    path = Path(path)
    if path.is_dir():
        raise ImageFileError(f"{path}: is a folder; give an image file (or use the folder form of the command)")
    width, height = read_image_size(path, error=with_path(ImageFileError))
    with Image.open(path) as image:  # the header only: read_image_size opened it the same way
        mode, transparent = image.mode, "transparency" in image.info
    if mode in ("1", "L", "I", "F") or mode.startswith("I;16"):
        return width, height, 1
    # as _convert: a palette image is RGBA only with a transparent entry
    return width, height, 4 if mode in ("LA", "La", "PA", "RGBA", "RGBa") or (mode == "P" and transparent) else 3


def _read_png16(path: Path, data: bytes) -> LoadedImage:
    width, height = png16.png_header(data)[:2]
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageFileError(f"{path}: the image is {width}x{height} = {width * height:,} pixels, more than the "
                             f"{MAX_IMAGE_PIXELS:,} splatforge decodes; downscale it first")
    try:
        raw = png16.read_png16(data)
    except png16.PngError as err:
        raise ImageFileError(f"{path}: cannot read this 16-bit PNG: {err}; re-save the image") from None
    if raw.shape[2] == 2:  # grey + alpha -> RGBA
        raw = np.concatenate([raw[..., :1].repeat(3, axis=2), raw[..., 1:]], axis=2)
    layout = {1: "L", 3: "RGB", 4: "RGBA"}[raw.shape[2]]
    pixels = torch.from_numpy(raw.astype(np.float32) / 65535.0)
    note = "16-bit PNG: values / 65535, kept as float32; renders are written as 16-bit PNGs"
    return LoadedImage(pixels, layout, _source(path, "PNG", f"{layout};16", 16, note))


def _read_with_pillow(path: Path, data: bytes) -> LoadedImage:
    from PIL import Image, UnidentifiedImageError

    try:
        image = open_image(io.BytesIO(data), path, error=with_path(ImageFileError))
    except ImageFileError as err:
        if "not an image file" not in str(err):
            raise
        raise ImageFileError(f"{path}: not an image file that can be read (PNG, JPEG, BMP, TIFF, WebP, ...); "
                             f"give an image") from None
    except UnidentifiedImageError:
        raise ImageFileError(f"{path}: not an image file that can be read (PNG, JPEG, BMP, TIFF, WebP, ...); "
                             f"give an image") from None
    except (OSError, SyntaxError, ValueError) as err:  # Pillow: "image file is truncated", broken headers
        raise ImageFileError(f"{path}: the image cannot be decoded ({err}); the file may be cut short or "
                             f"damaged: re-save or re-download it") from None
    fmt, mode = image.format or "?", image.mode
    if mode == "F":
        raise ImageFileError(f"{path}: a floating-point image (mode F) has no white level to scale by; "
                             f"save it as an 8- or 16-bit PNG")
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        raw = np.asarray(image).astype(np.float64)
        if raw.min() < 0 or raw.max() > 65535:
            raise ImageFileError(f"{path}: 32-bit integer image with values outside 0..65535; save it as a "
                                 f"16-bit PNG")
        pixels = torch.from_numpy((raw / 65535.0).astype(np.float32))[..., None]
        note = "16-bit grey: values / 65535, kept as float32; renders are written as 16-bit PNGs"
        return LoadedImage(pixels, "L", _source(path, fmt, mode, 16, note))
    converted, layout, note = _convert(image)
    raw = np.asarray(converted, dtype=np.uint8)
    if raw.ndim == 2:
        raw = raw[..., None]
    pixels = torch.from_numpy(raw.astype(np.float32) / 255.0)
    return LoadedImage(pixels, layout, _source(path, fmt, mode, 8, note))


def _convert(image):
    """(Pillow image in mode L / RGB / RGBA, layout, note on the conversion)."""
    mode = image.mode
    if mode in ("L", "RGB", "RGBA"):
        notes = {"L": "grey: fitted as 1 channel", "RGB": "", "RGBA": "RGBA: alpha fitted as a 4th channel"}
        return image, mode, notes[mode]
    if mode == "1":
        return image.convert("L"), "L", "1-bit: fitted as 1 grey channel (0 or 1)"
    if mode in ("LA", "La", "PA", "RGBa") or (mode == "P" and "transparency" in image.info):
        return image.convert("RGBA"), "RGBA", f"{mode} with transparency: converted to RGBA, alpha fitted"
    return image.convert("RGB"), "RGB", f"{mode}: converted to RGB"


def _source(path: Path, fmt: str, mode: str, bit_depth: int, note: str) -> dict:
    facts = {"name": path.name, "format": fmt, "mode": mode, "bit_depth": bit_depth}
    if note:
        facts["note"] = note
    return facts


def image_files(folder: str | Path) -> list[Path]:
    """The image files (by suffix, :data:`IMAGE_SUFFIXES`) directly in ``folder``, sorted by name."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


# ------------------------------------------------------------------------------------------ writing


SAMPLE_ROWS_VALUES = 1 << 20  # values converted to PNG samples at a time (float64 temporaries: 8 MB each)


def png_samples(pixels: Tensor, dtype) -> np.ndarray:
    """[H, W, C] samples of ``dtype`` (np.uint8 or np.uint16): round(clamp(v, 0, 1) x max) in float64, a block of
    rows at a time, so the float64 temporaries stay small whatever the image's size (a render of tens of
    megapixels would otherwise hold several float64 copies of itself)."""
    top = float(np.iinfo(dtype).max)
    values = pixels.detach().cpu()
    height = values.shape[0]
    out = np.empty(tuple(values.shape), dtype)
    rows = max(1, SAMPLE_ROWS_VALUES // max(1, values[0].numel()))
    for y in range(0, height, rows):
        block = values[y:y + rows].to(torch.float64).clamp(0.0, 1.0).numpy()
        out[y:y + rows] = np.rint(block * top)
    return out


def encode_png(pixels: Tensor, layout: str, bit_depth: int = 8) -> bytes:
    """PNG bytes of ``pixels`` [H, W, C] (values clamped to [0, 1], C matching ``layout``), 8-bit (Pillow)
    or 16-bit (png16) by ``bit_depth``."""
    if layout not in LAYOUT_CHANNELS or pixels.shape[-1] != LAYOUT_CHANNELS[layout]:
        raise ValueError(f"encode_png: layout {layout!r} with {pixels.shape[-1]} channels")
    if bit_depth == 16:
        return png16.encode_png16(png_samples(pixels, np.uint16))
    from PIL import Image

    array = png_samples(pixels, np.uint8)
    image = Image.fromarray(array[..., 0] if layout == "L" else array, PIL_MODE_OF_LAYOUT[layout])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_png(path: str | Path, pixels: Tensor, layout: str, bit_depth: int = 8, force: bool = False) -> Path:
    """Write ``pixels`` [H, W, C] as a PNG at ``path`` atomically (recon.core.atomic); 16-bit when ``bit_depth``
    is 16 (a model fitted from a 16-bit source), else 8-bit."""
    atomic_write_bytes(path, encode_png(pixels, layout, 16 if bit_depth == 16 else 8), force=force)
    return Path(path)

"""`splatforge image fit | render | compare`: images as 2D Gaussians (GaussianImage, GSASR).

- ``splatforge image fit IMAGE --out model.gimg (--gaussians N | --bpp B) [--steps S] [--quantize]``: fit one
  image (progress bar with PSNR), write the .gimg model (recon/image/gimg.py; FORMAT.md), print PSNR,
  MS-SSIM, bits per pixel and seconds. ``IMAGE`` a folder: every image in it, ``--out`` a folder receiving
  ``<name>.gimg`` per image and report.json / report.csv (recon/image/report.py: per image and the mean).
  ``--bpp B`` chooses N = floor(B W H / nominal bits per Gaussian) of the encoding (recon/image/codec.py:
  32 (5 + C) bits for float32, 32 + 24 + 8 C bits quantised); quantised files come out below B (zstandard).
- ``splatforge image fit IMAGE --model rbf --out model.grbf [--params P] [--neurons K]``: a Gaussian RBF field
  instead (recon/image/rbf_fit.py; .grbf: recon/image/grbf.py), sized to P parameters (default: those of
  --gaussians N image Gaussians, N (5 + C)).
- ``splatforge image render MODEL (--scale S | --size WxH) --out out.png``: any size, up or down. The default
  fit's models are area-sampled (each pixel averages its own area, ``pixel_variance``), at every output size:
  that is the anti-aliasing. Point-sampled models (``--preset gaussianimage``) are low-passed below the fitted
  size (recon/image/resample.py: 1.2 (1 - s^2) / 12 output pixels^2; --no-antialias: off).
  Scales <= 0 and outputs whose memory estimate exceeds --max-memory-gb are refused.
- ``splatforge image compare MODEL IMAGE --out cmp.png``: the image, the render and the error (largest
  channel difference x ``ERROR_GAIN``) side by side.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

import tyro

from recon.core.errors import USER_ERRORS, UsageError, fail

ERROR_GAIN = 4.0  # the compare image's error panel: |render - image| x 4, clamped to 1
GAP_PIXELS = 4  # white columns between the compare panels


@dataclass
class FitArgs:
    """Fit an image (or each image in a folder) with 2D Gaussians and write .gimg model files."""

    input: Annotated[Path, tyro.conf.Positional]
    """an image file, or a folder of images (fitted one by one, with a report)."""
    out: Path
    """image: the .gimg file to write; folder: the folder receiving <name>.gimg, report.json, report.csv."""
    gaussians: Optional[int] = None
    """number of Gaussians (default 25,000 when --bpp is not given either)."""
    bpp: Optional[float] = None
    """target bits per pixel instead of --gaussians: N = floor(bpp W H / bits per Gaussian of the encoding)."""
    preset: Literal["default", "gaussianimage"] = "default"
    """settings (recon.image.fit.PRESETS): "default" is tuned for a CPU (colours sampled from the image, area-sampled
    pixels, 3,000 steps); "gaussianimage" is the paper's (random initialisation, point samples, lr 1e-3, 50,000 steps)."""
    steps: Optional[int] = None
    """optimisation steps per image (default: the preset's)."""
    quantize: bool = False
    """store quantised (float16 means, 8-bit Cholesky and colours, zstandard) instead of float32."""
    loss: Literal["l2", "l1+ssim"] = "l2"
    init: Optional[Literal["image", "gaussianimage"]] = None
    """initialisation (default: the preset's)."""
    seed: int = 0
    backend: Literal["auto", "reference", "cpu", "cuda"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "cpu"
    """where the fit runs ("auto": the GPU when there is one)."""
    progress: bool = True
    """show a progress bar with the PSNR."""
    force: bool = False
    """overwrite existing output files."""
    model: Literal["gaussians", "rbf"] = "gaussians"
    """gaussians: 2D Gaussians (.gimg); rbf: a Gaussian RBF field, low-resolution feature grids + one layer of
    Gaussian RBF neurons (.grbf; recon/image/rbf_fit.py), sized to the parameters of --gaussians N image
    Gaussians unless --params is given."""
    params: Optional[int] = None
    """--model rbf: parameter budget (default: that of --gaussians N image Gaussians, N (5 + C))."""
    neurons: Optional[int] = None
    """--model rbf: Gaussian RBF neurons (default: the fitter's, recon/image/rbf_fit.py RBFFitConfig.neurons)."""
    max_memory_gb: Optional[float] = None
    """refuse an image whose fit is estimated (from its header, before decoding) to need more than this many GiB
    of the process's peak memory (recon/image/fit_memory.py: 640 MB for the program, 88 bytes per pixel and
    channel, 512 per Gaussian). Default: 80% of the memory available when the command starts, at most 16 GiB,
    plus the program's 640 MB."""


@dataclass
class RenderArgs:
    """Render a .gimg model at any size (anti-aliased below the fitted size)."""

    model: Annotated[Path, tyro.conf.Positional]
    """a .gimg or .grbf file written by `splatforge image fit`."""
    scale: Optional[float] = None
    """output size = fitted size x scale (e.g. 0.5, 3.5); default 1."""
    size: Optional[str] = None
    """output size as WIDTHxHEIGHT instead of --scale."""
    out: Path = Path("render.png")
    """the PNG to write (16-bit when the model was fitted from a 16-bit image)."""
    antialias: bool = True
    """low-pass the Gaussians when rendering below the fitted size (--no-antialias: point sampling)."""
    max_memory_gb: float = 1.0
    """refuse renders whose memory estimate (recon/image/resample.py: W H C x 4 bytes x 3, plus 512 bytes per
    Gaussian and 32 MB of tile lists), made from the file's header before its arrays are decoded, is above this
    many GiB."""
    backend: Literal["auto", "reference", "cpu", "cuda"] = "auto"
    force: bool = False


@dataclass
class CompareArgs:
    """The image, the model's render and the error, side by side in one PNG."""

    model: Annotated[Path, tyro.conf.Positional]
    """a .gimg or .grbf file."""
    image: Annotated[Path, tyro.conf.Positional]
    """the image it was fitted to."""
    out: Path = Path("compare.png")
    backend: Literal["auto", "reference", "cpu", "cuda"] = "auto"
    force: bool = False


ImageCommand = Union[
    Annotated[FitArgs, tyro.conf.subcommand("fit")],
    Annotated[RenderArgs, tyro.conf.subcommand("render")],
    Annotated[CompareArgs, tyro.conf.subcommand("compare")],
]


def image(cmd: Annotated[ImageCommand, tyro.conf.arg(name="")]) -> None:
    """Images as 2D Gaussians: fit (an image or a folder), render at any size, compare with the image."""
    name = {FitArgs: "fit", RenderArgs: "render", CompareArgs: "compare"}[type(cmd)]
    try:
        if isinstance(cmd, FitArgs):
            fit_command(cmd)
        elif isinstance(cmd, RenderArgs):
            render_command(cmd)
        else:
            compare_command(cmd)
    except USER_ERRORS as err:
        fail(f"image {name}", err)


# ------------------------------------------------------------------------------------------ fit


def encoding_of(args: FitArgs) -> str:
    return "quantized" if args.quantize else "float32"


def gaussian_count(args: FitArgs, width: int, height: int, channels: int) -> int:
    """N from --gaussians or --bpp (see the module docstring)."""
    from recon.image.codec import gaussians_for_bpp, nominal_bits_per_gaussian

    if args.gaussians is not None and args.bpp is not None:
        raise UsageError("--gaussians and --bpp: give one of them, not both")
    if args.bpp is not None:
        if not args.bpp > 0:
            raise UsageError(f"--bpp {args.bpp}: must be > 0")
        n = gaussians_for_bpp(args.bpp, width, height, encoding_of(args), channels)
        if n < 1:
            bits = nominal_bits_per_gaussian(encoding_of(args), channels)
            raise UsageError(f"--bpp {args.bpp}: {width}x{height} pixels at {args.bpp} bits each hold less than one "
                             f"Gaussian ({bits} bits); raise --bpp")
        return n
    n = 25_000 if args.gaussians is None else args.gaussians
    if n < 1:
        raise UsageError(f"--gaussians {n}: must be >= 1")
    return n


def check_fit_args(args: FitArgs) -> None:
    if args.max_memory_gb is not None and not args.max_memory_gb > 0:
        raise UsageError(f"--max-memory-gb {args.max_memory_gb}: must be > 0")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps {args.steps}: must be >= 1")
    if args.gaussians is not None and args.bpp is not None:
        raise UsageError("--gaussians and --bpp: give one of them, not both")
    if args.model == "rbf":
        for flag, given in (("--bpp", args.bpp is not None), ("--quantize", args.quantize),
                            ("--preset gaussianimage", args.preset != "default"), ("--init", args.init is not None),
                            ("--loss l1+ssim", args.loss != "l2")):
            if given:
                raise UsageError(f"{flag}: an option of the Gaussian fit; --model rbf takes --params, --neurons, "
                                 f"--steps and --seed")
        if args.params is not None and args.params < 1:
            raise UsageError(f"--params {args.params}: must be >= 1")
        if args.neurons is not None and args.neurons < 1:
            raise UsageError(f"--neurons {args.neurons}: must be >= 1")
    elif args.params is not None:
        raise UsageError("--params: the parameter budget of --model rbf; Gaussians are counted with --gaussians")


def check_image_memory(args: FitArgs, path: Path) -> None:
    """Refuse ``path`` before its pixels are decoded when its fit would need more than --max-memory-gb (the size
    and channels from its header; recon/image/fit_memory.py). A file that is not a readable image is left to
    read_image's own message."""
    from recon.image.fit_memory import check_fit_memory
    from recon.image.io import ImageFileError, read_image_header

    try:
        width, height, channels = read_image_header(path)
    except ImageFileError:
        return  # read_image says what is wrong with the file
    check_fit_memory(path, width, height, channels, gaussian_count(args, width, height, channels), args.max_memory_gb)


def model_suffix(args: FitArgs) -> str:
    return ".grbf" if args.model == "rbf" else ".gimg"


def fit_command(args: FitArgs) -> None:
    from recon.image.io import read_image
    from recon.outputs.paths import check_output_file

    check_fit_args(args)
    source = Path(args.input)
    if source.is_dir():
        fit_folder(args)
        return
    if not source.exists():
        raise FileNotFoundError(f"{source}: no such file or folder; give an image or a folder of images")
    check_output_file(args.out, args.force, suffixes=(model_suffix(args),))
    check_image_memory(args, source)  # from the header, before decoding
    loaded = read_image(source)
    record = fit_one(args, loaded, Path(args.out))
    if args.model == "rbf":
        print(f"wrote {args.out}: Gaussian RBF field of {record.parameters:,} parameters, PSNR {record.psnr:.2f} dB, "
              f"MS-SSIM {record.ms_ssim:.4f}, {record.bpp:.3f} bits per pixel ({record.file_bytes:,} bytes), "
              f"{record.seconds:.1f} s")
        return
    print(f"wrote {args.out}: {record.gaussians:,} Gaussians, PSNR {record.psnr:.2f} dB, MS-SSIM "
          f"{record.ms_ssim:.4f}, {record.bpp:.3f} bits per pixel ({record.file_bytes:,} bytes, {record.encoding}), "
          f"{record.seconds:.1f} s")


def fit_one(args: FitArgs, loaded, out: Path, label: str = ""):
    """Fit ``loaded`` (recon.image.io.LoadedImage), write ``out`` and return its ImageRecord (measured on the
    file as read back)."""
    if args.model == "rbf":
        return fit_one_rbf(args, loaded, out, label)
    from recon.image.codec import bits_per_pixel
    from recon.image.fit import PRESETS, fit_image
    from recon.image.gimg import read_gimg, write_gimg
    from recon.image.model import render_image
    from recon.image.report import ImageRecord, ms_ssim
    from recon.image.resample import psnr

    n = gaussian_count(args, loaded.width, loaded.height, loaded.pixels.shape[2])
    if loaded.source.get("note"):  # how a 16-bit, grey, RGBA or palette image is handled
        print(f"{loaded.source.get('name', '')}: {loaded.source['note']}")
    preset = PRESETS[args.preset]
    cfg = dataclasses.replace(preset, gaussians=n, steps=args.steps or preset.steps, init=args.init or preset.init,
                              loss=args.loss, seed=args.seed, backend=args.backend, device=args.device)
    started = time.perf_counter()
    with FitProgress(args.progress, cfg.steps, label or loaded.source.get("name", "")) as on_step:
        result = fit_image(loaded.pixels, cfg, layout=loaded.layout, source=loaded.source, progress=on_step)
    seconds = time.perf_counter() - started
    size = write_gimg(out, result.model, encoding_of(args), force=args.force)
    stored = read_gimg(out)
    render = render_image(stored, backend=args.backend)
    value, window = ms_ssim(render, loaded.pixels)
    return ImageRecord(image=loaded.source.get("name", ""), model=out.name, width=loaded.width, height=loaded.height,
                       layout=loaded.layout, gaussians=n, steps=cfg.steps, encoding=encoding_of(args),
                       psnr=psnr(render, loaded.pixels), ms_ssim=value, ms_ssim_window=window, file_bytes=size,
                       bpp=bits_per_pixel(size, loaded.width, loaded.height), seconds=seconds,
                       parameters=n * (5 + loaded.pixels.shape[2]))


def rbf_backend(backend: str) -> str:
    """The RBF layer's implementation (recon/nerf/rbf.py) for the image commands' --backend: "cpu" -> the Numba
    kernels, "cuda" -> the matrix products, "auto" / "reference" as they are."""
    return backend if backend in ("reference", "auto") else ("numba" if backend == "cpu" else "matmul")


def fit_one_rbf(args: FitArgs, loaded, out: Path, label: str = ""):
    """:func:`fit_one` for --model rbf (recon/image/rbf_fit.py; the .grbf file, recon/image/grbf.py)."""
    from recon.image.codec import bits_per_pixel
    from recon.image.grbf import read_grbf, write_grbf
    from recon.image.rbf_fit import RBFFitConfig, fit_rbf_image
    from recon.image.rbf_image import render_rbf_image
    from recon.image.report import ImageRecord, ms_ssim
    from recon.image.resample import psnr

    channels = loaded.pixels.shape[2]
    budget = args.params if args.params is not None else gaussian_count(args, loaded.width, loaded.height,
                                                                        channels) * (5 + channels)
    backend = rbf_backend(args.backend)
    cfg = RBFFitConfig(parameters=budget, seed=args.seed, backend=backend)
    if args.neurons is not None:
        cfg.neurons = args.neurons
    if args.steps:
        cfg.steps = args.steps
    started = time.perf_counter()
    try:
        # the RBF fit steps on random pixels: its bar shows that batch's PSNR, named so; the whole image's
        # PSNR (the number in the report) is measured once, at the end
        with FitProgress(args.progress, cfg.steps, label or loaded.source.get("name", ""),
                         metric="batch PSNR") as on_step:
            result = fit_rbf_image(loaded.pixels, cfg, layout=loaded.layout, source=loaded.source, progress=on_step)
    except ValueError as err:  # a budget too small for the decoder
        raise UsageError(f"--params {budget}: {err}") from None
    seconds = time.perf_counter() - started
    size = write_grbf(out, result.model, force=args.force)
    stored = read_grbf(out)
    render = render_rbf_image(stored, backend=backend)
    value, window = ms_ssim(render, loaded.pixels)
    return ImageRecord(image=loaded.source.get("name", ""), model=out.name, width=loaded.width, height=loaded.height,
                       layout=loaded.layout, gaussians=0, steps=cfg.steps, encoding="float32",
                       psnr=psnr(render, loaded.pixels), ms_ssim=value, ms_ssim_window=window, file_bytes=size,
                       bpp=bits_per_pixel(size, loaded.width, loaded.height), seconds=seconds,
                       parameters=stored.parameters)


class FitProgress:
    """Context manager yielding the ``progress(step, value)`` callback of a fit: a rich bar with the value
    (``metric``, formatted with ``fmt``: the PSNR by default), or None when ``enabled`` is false."""

    def __init__(self, enabled: bool, steps: int, label: str, metric: str = "PSNR", fmt: str = "{:.2f} dB"):
        self.enabled, self.steps, self.label, self.metric, self.fmt = enabled, steps, label, metric, fmt
        self.bar = None

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                            TextColumn(f"{self.metric} {{task.fields[value]}}"), TimeElapsedColumn(),
                            TimeRemainingColumn())
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.steps, value="-")
        return lambda step, value: self.bar.update(task, completed=step, value=self.fmt.format(value))

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def fit_folder(args: FitArgs) -> None:
    """Fit every image in the folder ``args.input``; write <name>.gimg per image and the reports in --out."""
    from recon.core.atomic import refuse_overwrite
    from recon.image.io import image_files, read_image
    from recon.image.report import REPORT_CSV, REPORT_JSON, mean_record, write_reports
    from recon.outputs.paths import ensure_writable_folder

    files = image_files(args.input)
    if not files:
        raise UsageError(f"{args.input}: no image files in this folder (looked for .png, .jpg, ...)")
    stems = [f.stem for f in files]
    suffix = model_suffix(args)
    twins = sorted({s for s in stems if stems.count(s) > 1})
    if twins:
        raise UsageError(f"{args.input}: several images share the name {twins[0]!r} (e.g. .png and .jpg) and would "
                         f"write the same {twins[0]}{suffix}; keep one of them")
    out = Path(args.out)
    if out.suffix.lower() in (".gimg", ".grbf"):
        raise UsageError(f"--out {out}: for a folder of images give an output folder, not a {out.suffix} file")
    ensure_writable_folder(out)
    for name in [f"{s}{suffix}" for s in stems] + [REPORT_JSON, REPORT_CSV]:
        refuse_overwrite(out / name, args.force)  # before any fitting
    for f in files:  # every file's memory and Gaussian count (--bpp too low for a small image) from its header
        check_image_memory(args, f)
    for f in files:  # then every file decoded before the first fit, one at a time (not all held: memory)
        read_image(f)
    records = []
    for i, f in enumerate(files):
        record = fit_one(args, read_image(f), out / f"{f.stem}{suffix}", label=f"[{i + 1}/{len(files)}] {f.name}")
        records.append(record)
        size = f"{record.parameters:,} parameters" if args.model == "rbf" else f"{record.gaussians:,} Gaussians"
        print(f"{files[i].name}: PSNR {record.psnr:.2f} dB, MS-SSIM {record.ms_ssim:.4f}, {record.bpp:.3f} bpp, "
              f"{size}, {record.seconds:.1f} s")
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(args).items()}
    paths = write_reports(out, records, settings, force=args.force)
    mean = mean_record(records)
    print(f"mean over {mean['images']} images: PSNR {mean['psnr']:.2f} dB, MS-SSIM {mean['ms_ssim']:.4f}, "
          f"{mean['bpp']:.3f} bpp, {mean['seconds']:.1f} s; reports: {paths[0]}, {paths[1]}")


# ------------------------------------------------------------------------------------------ render


def read_image_model(path: Path):
    """The model in a .gimg (ImageGaussians) or .grbf (ImageRBF) file, told apart by the file's first bytes."""
    from recon.image import grbf
    from recon.image.gimg import read_gimg

    path = Path(path)
    if path.is_file():
        with open(path, "rb") as fh:
            if fh.read(len(grbf.MAGIC)) == grbf.MAGIC:
                return grbf.read_grbf(path)
    return read_gimg(path)


def render_at(model, out_width: int, out_height: int, antialias: bool = True, backend: str = "auto"):
    """[H, W, C] render of ``model`` at out_width x out_height, clamped to [0, 1]. An area-sampled model
    (``pixel_variance`` > 0, the default fit) averages each output pixel's own area at every size, which is the
    anti-aliasing; a point-sampled one (GaussianImage's) is low-passed below the fitted size when ``antialias``
    (recon/image/resample.py). A Gaussian RBF field is box-supersampled below its fitted size when ``antialias``
    (recon/image/rbf_image.py)."""
    from recon.image.model import render_image
    from recon.image.rbf_image import ImageRBF, render_rbf_image
    from recon.image.resample import prefilter_variance

    if isinstance(model, ImageRBF):
        return render_rbf_image(model, out_width, out_height, rbf_backend(backend), antialias)

    point_sampled = model.pixel_variance == 0.0
    variance = prefilter_variance(model.width, model.height, out_width, out_height) if antialias and point_sampled \
        else 0.0
    return render_image(model, out_width, out_height, prefilter_variance=variance, backend=backend)


def check_render_memory(args: RenderArgs, fitted_width: int, fitted_height: int, channels: int,
                        gaussians: int) -> tuple[int, int]:
    """The output (width, height) of a model of that fitted size, channels and Gaussian count; UsageError naming
    the model file when rendering it would need more than --max-memory-gb (recon/image/resample.py)."""
    from recon.image.resample import check_memory, output_size

    width, height = output_size(fitted_width, fitted_height, args.scale, args.size)
    try:
        check_memory(width, height, channels, args.max_memory_gb, gaussians)
    except UsageError as err:  # the size may be the file's own (no --scale/--size): name the file
        raise UsageError(f"{args.model} (fitted at {fitted_width}x{fitted_height}): {err}") from None
    return width, height


def render_command(args: RenderArgs) -> None:
    from recon.image.gimg import declared_size
    from recon.image.io import write_png
    from recon.outputs.paths import check_output_file

    if not args.max_memory_gb > 0:
        raise UsageError(f"--max-memory-gb {args.max_memory_gb}: must be > 0")
    if args.scale is not None and args.size is not None:
        raise UsageError("--scale and --size: give one of them, not both")
    if args.scale is not None and not args.scale > 0:  # refused before the model is read
        raise UsageError(f"--scale {args.scale}: must be a positive number (e.g. 0.5 to halve, 3.5 to enlarge)")
    check_output_file(args.out, args.force, suffixes=(".png",))
    declared = declared_size(args.model)  # a .gimg's header: sized before its arrays are decoded
    if declared is not None:
        check_render_memory(args, *declared)
    model = read_image_model(args.model)
    width, height = check_render_memory(args, model.width, model.height, model.channels, getattr(model, "n", 0))
    started = time.perf_counter()
    pixels = render_at(model, width, height, args.antialias, args.backend)
    seconds = time.perf_counter() - started
    write_png(args.out, pixels, model.layout, int(model.source.get("bit_depth", 8)), force=args.force)
    print(f"wrote {args.out}: {width}x{height} ({width / model.width:.3g}x the fitted {model.width}x{model.height}), "
          f"rendered in {seconds * 1000:.0f} ms")


# ------------------------------------------------------------------------------------------ compare


def side_by_side(original, render, layout: str):
    """[H, 3 W + 2 GAP, C]: original | render | error (largest channel difference x ERROR_GAIN, clamped; alpha 1
    in the error panel of an RGBA image); the gaps are white (opaque)."""
    import torch

    H, W, C = original.shape
    error = ((render - original).abs().amax(dim=2, keepdim=True) * ERROR_GAIN).clamp(0, 1).expand(H, W, C).clone()
    if layout == "RGBA":
        error[..., 3] = 1.0
    gap = original.new_ones(H, GAP_PIXELS, C)
    return torch.cat([original, gap, render, gap, error], dim=1)


def compare_command(args: CompareArgs) -> None:
    from recon.image.io import read_image, write_png
    from recon.image.resample import psnr
    from recon.outputs.paths import check_output_file

    check_output_file(args.out, args.force, suffixes=(".png",))
    model = read_image_model(args.model)
    loaded = read_image(args.image)
    if loaded.layout != model.layout:
        raise UsageError(f"{args.image}: a {loaded.layout} image, but {args.model} was fitted to a {model.layout} "
                         f"image; give the image it was fitted to")
    note = ""
    if (loaded.width, loaded.height) != (model.width, model.height):
        note = f" (the model was fitted at {model.width}x{model.height}; rendered at the image's size)"
    render = render_at(model, loaded.width, loaded.height, backend=args.backend)
    write_png(args.out, side_by_side(loaded.pixels, render, model.layout), model.layout, force=args.force)
    print(f"wrote {args.out}: image | render | error x {ERROR_GAIN:g}; PSNR {psnr(render, loaded.pixels):.2f} dB{note}")

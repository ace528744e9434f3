"""Peak resident memory of `splatforge image fit` / `image render` on valid inputs that need much memory (issue 52).

Each case runs ``recon.cli.main([...])`` in a child process of ``--code`` (a splatforge checkout: its ``recon``
is imported, so a worktree of main measures "before") and reads the child's own peak RSS and CPU time from
``os.wait4``. The inputs are written once into ``--work`` (never the repository):

- ``render-1e6x40``: a 1000x1000 RGB .gimg of 1,000,000 Gaussians of sigma 40 px (quantised, about 7 MB; 221M
  tile-list entries), ``image render X``;
- ``render-1e6x6``: the same with sigma 6 px;
- ``render-16-4000x3000``: an 8000x6000 .gimg of 16 Gaussians, ``image render X --size 4000x3000``;
- ``fit-16x16``: ``image fit`` of a 16x16 PNG, 16 Gaussians, 2 steps: the process baseline (imports, kernels);
- ``fit-1000x1000`` / ``fit-2000x1500``: 2 steps of a noise PNG with 2,000 Gaussians, with the estimate
  (recon/image/fit_memory.py) beside the measured peak;
- ``fit-12000x8000``: a flat 96 MP PNG (300 kB): must be refused with one line.

    python scripts/bench_image_memory.py --work /tmp/imgmem [--code BEFORE AFTER] [--cases render-1e6x40 ...] \\
        [--repeat 3] [--warmup]

Prints JSON: per case the exit status, peak RSS (MB), CPU seconds (user + system), wall seconds, the last
line of stderr, and for fits the estimate. Run with ``OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1`` for comparable
CPU times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CHILD = "import sys; from recon.cli import main; main(sys.argv[1:])"


def write_gimg_case(path: Path, n: int, sigma_px: float, width: int, height: int) -> None:
    """A ``width`` x ``height`` RGB .gimg of ``n`` random round Gaussians of ``sigma_px`` pixels."""
    import torch

    from recon.image.gimg import write_gimg
    from recon.image.model import ImageGaussians

    gen = torch.Generator().manual_seed(0)
    means = torch.rand(n, 2, generator=gen) * 2 - 1
    s = 2.0 * sigma_px / width
    cholesky = torch.tensor([s, 0.0, s * width / height]).repeat(n, 1)
    colors = torch.rand(n, 3, generator=gen) / max(1.0, n * (sigma_px / width) ** 2)
    write_gimg(path, ImageGaussians(means, cholesky, colors, width, height), "quantized", force=True)


def write_png_case(path: Path, width: int, height: int, noise: bool) -> None:
    import numpy as np
    from PIL import Image

    if noise:
        pixels = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    else:
        pixels = np.full((height, width, 3), (90, 140, 200), np.uint8)
    Image.fromarray(pixels).save(path)


def cases(work: Path) -> dict[str, tuple[list[str], callable]]:
    """{name: (CLI arguments, writer of the input)}."""
    g = lambda name, *a: (work / name, lambda p: write_gimg_case(p, *a))  # noqa: E731
    p = lambda name, *a: (work / name, lambda q: write_png_case(q, *a))  # noqa: E731
    inputs = {
        "render-1e6x40": g("m1e6s40.gimg", 1_000_000, 40.0, 1000, 1000),
        "render-1e6x6": g("m1e6s6.gimg", 1_000_000, 6.0, 1000, 1000),
        "render-16-4000x3000": g("m16.gimg", 16, 500.0, 8000, 6000),
        "fit-16x16": p("p16.png", 16, 16, True),
        "fit-1000x1000": p("p1000.png", 1000, 1000, True),
        "fit-2000x1500": p("p2000.png", 2000, 1500, True),
        "fit-12000x8000": p("p12000.png", 12000, 8000, False),
    }
    out = work / "out"
    args = {
        "render-1e6x40": ["image", "render", None, "--out", f"{out}.png", "--force"],
        "render-1e6x6": ["image", "render", None, "--out", f"{out}.png", "--force"],
        "render-16-4000x3000": ["image", "render", None, "--size", "4000x3000", "--out", f"{out}.png", "--force"],
        "fit-16x16": ["image", "fit", None, "--gaussians", "16", "--steps", "2"],
        "fit-1000x1000": ["image", "fit", None, "--gaussians", "2000", "--steps", "2"],
        "fit-2000x1500": ["image", "fit", None, "--gaussians", "2000", "--steps", "2"],
        "fit-12000x8000": ["image", "fit", None, "--gaussians", "2000", "--steps", "2"],
    }
    for name, a in args.items():
        a[2] = str(inputs[name][0])
        if a[1] == "fit":
            a += ["--out", f"{out}.gimg", "--force", "--no-progress"]
    return {name: (args[name], *inputs[name]) for name in args}


def fit_estimate(path: Path, gaussians: int) -> float | None:
    """The fit's estimated peak (MB) from recon/image/fit_memory.py of this checkout, from the image header."""
    from recon.image.fit_memory import fit_memory_bytes
    from recon.image.io import read_image_header

    w, h, c = read_image_header(path)
    return round(fit_memory_bytes(w, h, c, gaussians) / 2**20, 1)


def measure(code: Path, argv: list[str]) -> dict:
    """Run the CLI with ``argv`` in a child importing ``code``'s splatforge; its exit status, peak RSS, CPU time."""
    env = dict(os.environ, PYTHONPATH=str(code))
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *argv], cwd=code, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    return {"rc": proc.returncode, "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "wall_s": round(time.perf_counter() - started, 2),
            "stderr_last": lines[-1][:300] if lines else ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the inputs (outside the repository)")
    ap.add_argument("--code", type=Path, nargs="*", default=[ROOT],
                    help="splatforge checkouts to measure, interleaved per case (default: this one)")
    ap.add_argument("--cases", nargs="*", help="cases to run (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case (the median peak is reported)")
    ap.add_argument("--warmup", action="store_true",
                    help="run each case once first, not counted (Numba compiles kernels missing from its cache)")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    table = cases(args.work)
    names = args.cases or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        print(f"bench_image_memory: unknown case {unknown[0]!r}; choose from {', '.join(table)}", file=sys.stderr)
        return 2
    rows = []
    for name in names:
        cli, path, write = table[name]
        if not path.exists():
            write(path)
        for code in args.code:
            if args.warmup:
                measure(code.resolve(), cli)
        runs = {code: [] for code in args.code}
        for _ in range(args.repeat):  # the checkouts interleaved
            for code in args.code:
                runs[code].append(measure(code.resolve(), cli))
        for code, done in runs.items():
            done.sort(key=lambda r: r["peak_rss_mb"])
            row = {"case": name, "code": str(code), "input_bytes": path.stat().st_size, **done[len(done) // 2],
                   "peak_rss_mb_all": [r["peak_rss_mb"] for r in done]}
            if cli[1] == "fit":
                row["estimate_mb"] = fit_estimate(path, int(cli[cli.index("--gaussians") + 1]))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(json.dumps({"machine": platform.node(), "cpus": os.cpu_count(), "load": os.getloadavg(),
                      "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

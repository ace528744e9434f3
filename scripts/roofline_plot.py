"""roofline.png: arithmetic intensity (flops per byte) against achieved flop/s, with the machine's two
measured roofs (scripts/roofline.py). Kernels without flops (sorts, gathers) have no place on these
axes; the JSON lists them with their fraction of the bandwidth roof."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

MARKERS = {"3dgs": "o", "2dgs": "D", "4dgs": "v", "nerf": "s"}
COLOURS = {"3dgs": "tab:blue", "2dgs": "tab:green", "4dgs": "tab:purple", "nerf": "tab:orange"}


def plot_roofline(rows: list[dict], peak_flops: float, peak_bw: float, title: str, path: Path) -> None:
    """Write the plot of ``rows`` (the JSON's kernel entries of one thread count) to ``path``."""
    pts = [r for r in rows if r["flops"] > 0 and r["seconds"] > 0 and r["bytes"] > 0]
    lo = min([r["intensity"] for r in pts] + [0.05]) / 2
    hi = max([r["intensity"] for r in pts] + [peak_flops / peak_bw * 8]) * 2
    ai = np.logspace(np.log10(lo), np.log10(hi), 200)
    fig, ax = plt.subplots(figsize=(9, 6), dpi=90)
    ax.loglog(ai, np.minimum(peak_flops, ai * peak_bw) / 1e9, "k-", lw=2)
    ax.text(lo * 1.2, lo * 1.2 * peak_bw / 1e9 * 1.3, f"memory {peak_bw / 1e9:.1f} GB/s", fontsize=8)
    ax.text(hi / 30, peak_flops / 1e9 * 1.1, f"compute {peak_flops / 1e9:.0f} Gflop/s", fontsize=8)
    for r in pts:
        ax.loglog(r["intensity"], r["flops_per_s"] / 1e9, MARKERS.get(r["group"], "^"), ms=5 + 30 * r["share"],
                  alpha=0.7, color=COLOURS.get(r["group"], "tab:gray"))
        ax.annotate(f'{r["group"]}: {r["kernel"]} ({100 * r["share"]:.0f}%)', (r["intensity"], r["flops_per_s"] / 1e9),
                    fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("arithmetic intensity (flops / byte)")
    ax.set_ylabel("achieved Gflop/s")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.2)
    ax.set_ylim(bottom=min([r["flops_per_s"] / 1e9 for r in pts] + [1.0]) / 3, top=peak_flops / 1e9 * 3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

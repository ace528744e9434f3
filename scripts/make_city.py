"""Generate the synthetic street scene of recon.data.procedural_city as a COLMAP folder; prints a JSON summary.

    python scripts/make_city.py --out /tmp/city                       # ~330 images, 96 x 64, seconds
    python scripts/make_city.py --out /tmp/city_big --nx 8 --ny 6 --spacing 0.4 --width 160 --height 112
    python scripts/make_city.py --out /tmp/city_exp --exposure 0.4    # per-image exposure changes
"""

from __future__ import annotations

import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)
import json
from pathlib import Path

import tyro

from recon.data.procedural_city import CityConfig, make_city


def main(out: Path, city: CityConfig = CityConfig(), progress: bool = True) -> None:
    """Write OUT/images/*.png and OUT/sparse/0/{cameras,images,points3D}.bin."""
    summary = make_city(out, city, progress=progress)
    print(json.dumps({"out": str(out), **summary}))


if __name__ == "__main__":
    tyro.cli(main, config=(tyro.conf.OmitArgPrefixes,))

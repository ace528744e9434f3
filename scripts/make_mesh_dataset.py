"""Render a Blender-format dataset (like lego_400) from a (textured) mesh, with ground-truth depth and normals.

    python scripts/make_mesh_dataset.py MESH [--views 100] [--test-views N] [--size 400] --out DIR

Input checks, normalisation (``mesh_to_world``), cameras and rendering: recon/data/mesh_render.py (its module
docstring; `splatforge mesh2splat` renders the same way).

Output (``DIR``), as lego_400: ``transforms_train.json``, ``transforms_test.json`` with ``camera_angle_x``
and ``frames`` of ``file_path`` (``./train/r_0``, no extension) and ``transform_matrix`` (camera-to-world,
OpenGL/Blender axes: x right, y up, looking along -z). Per frame:

- ``r_K.png``: RGBA, 8 bit, straight (not premultiplied) colour; alpha = the share of the pixel's rays
  that hit the mesh (255: all of them; colour 0 where none does);
- ``r_K_depth.png``: 16-bit grey, camera z depth (along the optical axis, scene units) =
  value / ``depth_scale`` (recorded in the JSON, 10000: 0.1 mm-equivalent steps up to 6.5 units); 0 = no hit;
- ``r_K_normal.png``: 8-bit RGB, world-frame unit face normal n encoded as round((n + 1) / 2 x 255);
  (0, 0, 0) where there is no hit (alpha tells).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when splatforge is not installed
from recon.core.open3d_import import Open3DMissingError  # noqa: E402
from recon.data.mesh_render import (  # noqa: E402,F401  (the script's API: tests/scripts use these names)
    FOV_X,
    CAMERA_RADIUS,
    DEPTH_SCALE,
    AMBIENT,
    LIGHT,
    DEFAULT_SAMPLES,
    MeshInputError,
    load_mesh,
    drop_duplicate_faces,
    check_mesh,
    normalisation,
    sphere_cameras,
    bilinear,
    MeshShader,
    cast_pixels,
    shade,
    render_view,
    write_png,
    write_split,
    make_dataset,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mesh", type=Path)
    parser.add_argument("--views", type=int, default=100, help="training views (default 100)")
    parser.add_argument("--test-views", type=int, default=None, help="test views (default views / 5)")
    parser.add_argument("--size", type=int, default=400, help="image width = height in pixels (default 400)")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                        help=f"rays per pixel side for colour and alpha (box filter; default {DEFAULT_SAMPLES}, "
                             f"1 = one ray through the pixel centre, aliased edges)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from rich.progress import Progress

    try:
        with Progress(transient=True) as bar:
            total = args.views + (max(1, args.views // 5) if args.test_views is None else args.test_views)
            task = bar.add_task("rendering", total=total)
            info = make_dataset(args.mesh, args.out, args.views, args.test_views, args.size,
                                lambda: bar.advance(task, 1), args.samples)
    except (MeshInputError, Open3DMissingError, OSError) as err:
        print(f"make_mesh_dataset: {err}", file=sys.stderr)
        return 1
    print(json.dumps({"out": str(args.out), **info}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

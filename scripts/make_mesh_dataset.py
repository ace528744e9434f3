"""Render a Blender-format dataset (like lego_400) from a (textured) mesh, with ground-truth depth and normals.

    python scripts/make_mesh_dataset.py MESH [--views 100] [--test-views N] [--size 400] --out DIR

Input: a mesh trimesh can load (OBJ with its MTL and texture PNG, PLY, GLB, ...). It must have triangles
and be edge-manifold (no edge shared by more than two faces); the error names the failed check.

Scene: the mesh is normalised (bounding-box centre to the origin, farthest vertex at distance 1); the map
from mesh to world coordinates is recorded as ``mesh_to_world`` (4x4, row-major, world = M @ [x, y, z, 1])
in both transforms files. Cameras look at the origin from a sphere of radius ``CAMERA_RADIUS`` (Fibonacci
points; the test split uses a rotated set, so no test view repeats a training view), with
``camera_angle_x`` = ``FOV_X`` (lego's).

Rendering (open3d ``RaycastingScene``): colour = texture at the interpolated UV (bilinear; the vertex colour
or a flat grey without one) x (AMBIENT + (1 - AMBIENT) x max(0, n . L)) with a fixed world light direction
L (view-independent Lambert, so every view agrees) and the interpolated vertex normal n. Colour and alpha
average ``--samples`` x ``--samples`` rays on a regular grid inside each pixel (default 4 x 4: a box
filter, as a camera pixel integrates light, so silhouettes are antialiased like lego_400's Blender
renders); depth and normal are those of the ray through the pixel centre. ``--samples 1`` is one ray
per pixel centre (hard, aliased silhouettes).

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

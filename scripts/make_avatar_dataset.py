"""Render a multi-view, multi-pose avatar dataset from a textured mesh rigged with a procedural bone chain.

    python scripts/make_avatar_dataset.py MESH [--poses 8] [--unseen 4] [--views 24] [--size 200] [--corrective A] --out DIR

MESH is a mesh trimesh reads (e.g. ../shared/data/meshes/spot/spot_triangulated.obj, textured), or a rigged
GLB (skin, joints, inverse bind matrices, JOINTS_0 / WEIGHTS_0; recon/avatar/gltf_skin.py). It is normalised
into the unit sphere and rigged with a bone chain along its principal axis (recon/avatar/bone_chain.py)
unless --skin gives a skin file for it or the GLB holds its skin; N training and U unseen poses bend the chain's joints by up to 25
degrees each (--corrective A adds a bulge near each bent joint that skinning cannot produce); every pose is rendered from V cameras (every 4th a test camera). The layout written (template.obj,
skin.json, poses.json, cameras.json, images/<pose>/<camera>.png) is described in docs/avatars.md;
`splatforge train --method meshgs --data DIR` trains on it. Prints a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, when splatforge is not installed
from recon.avatar.skin_file import AvatarInputError  # noqa: E402
from recon.core.open3d_import import Open3DMissingError  # noqa: E402
from recon.data.avatar_dataset import make_avatar_dataset  # noqa: E402
from recon.data.mesh_render import DEFAULT_SAMPLES, MeshInputError  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mesh", type=Path, help="a mesh (OBJ, PLY, ...) or a rigged GLB (its skin is used)")
    parser.add_argument("--poses", type=int, default=8, help="training poses (default 8)")
    parser.add_argument("--unseen", type=int, default=4, help="held-out poses, only in the test split (default 4)")
    parser.add_argument("--views", type=int, default=24, help="cameras per pose (default 24; every 4th is a test camera)")
    parser.add_argument("--size", type=int, default=200, help="image width = height in pixels (default 200)")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES,
                        help=f"rays per pixel side (antialiasing; default {DEFAULT_SAMPLES})")
    parser.add_argument("--joints-per-side", type=int, default=2, help="bone chain joints on each side of the root")
    parser.add_argument("--skin", type=Path, default=None, help="a skin.json for MESH instead of the bone chain")
    parser.add_argument("--corrective", type=float, default=0.0, metavar="A",
                        help="add a pose-dependent bulge along the normals near each bent joint, A (mesh radii) per "
                             "radian of bend (recon/avatar/correctives.py; default 0: plain skinning)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from rich.progress import Progress

    try:
        with Progress(transient=True) as bar:
            task = bar.add_task("rendering", total=(args.poses + args.unseen) * args.views)
            info = make_avatar_dataset(args.mesh, args.out, args.poses, args.unseen, args.views, args.size,
                                       args.samples, args.seed, args.joints_per_side, args.skin,
                                       lambda: bar.advance(task, 1), args.corrective)
    except (MeshInputError, AvatarInputError, Open3DMissingError, OSError) as err:
        print(f"make_avatar_dataset: {err}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())

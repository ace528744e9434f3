"""A tiny avatar capture (a stretched, vertex-coloured sphere rigged with a bone chain), written once per session."""

import numpy as np
import pytest


def make_tiny_mesh(path):
    """A capsule-like ellipsoid with smooth vertex colours, as a PLY trimesh reads."""
    import trimesh

    mesh = trimesh.creation.icosphere(subdivisions=2)
    mesh.apply_scale([1.6, 0.6, 0.5])
    v = np.asarray(mesh.vertices)
    colors = np.clip(0.5 + 0.5 * np.stack([np.sin(3 * v[:, 0]), np.cos(4 * v[:, 1]), np.sin(2 * v[:, 2] + 1)], 1),
                     0, 1)
    mesh.visual.vertex_colors = np.concatenate([colors * 255, np.full((len(v), 1), 255)], 1).astype(np.uint8)
    mesh.export(path)
    return path


@pytest.fixture(scope="session")
def tiny_avatar(tmp_path_factory):
    pytest.importorskip("open3d")
    from recon.data.avatar_dataset import make_avatar_dataset

    root = tmp_path_factory.mktemp("avatar")
    mesh = make_tiny_mesh(root / "blob.ply")
    out = root / "capture"
    make_avatar_dataset(mesh, out, poses=3, unseen=1, views=9, size=24, samples=1, seed=0, per_side=1)
    return out

"""Skinning, triangle frames and the binding of Gaussians to triangles (recon/avatar)."""

import math

import numpy as np
import pytest
import torch

from recon.avatar.binding import PosedTriangles, WorldGaussians, bind, plane_distances, unbind
from recon.avatar.bone_chain import bone_chain, random_poses
from recon.avatar.quaternions import axis_angle, from_rotmat, multiply, normalize, to_rotmat
from recon.avatar.skinning import joint_transforms, pose_vertices, skin_vertices
from tests.tolerances import TOL

D = torch.float64


def random_mesh(gen, faces=6, dtype=D):
    """Separate random triangles (F faces, 3F vertices) of reasonable shape."""
    verts = torch.randn(faces, 3, 3, generator=gen, dtype=dtype)
    verts[:, 1] += torch.tensor([1.0, 0, 0], dtype=dtype)
    verts[:, 2] += torch.tensor([0, 1.0, 0], dtype=dtype)
    return verts.reshape(-1, 3), torch.arange(3 * faces).reshape(faces, 3)


def random_bound(gen, faces, n=20, dtype=D):
    face_ids = torch.randint(0, faces, (n,), generator=gen)
    bary = torch.softmax(torch.randn(n, 3, generator=gen, dtype=dtype), -1)
    offset = torch.randn(n, generator=gen, dtype=dtype) * 0.3
    quat = normalize(torch.randn(n, 4, generator=gen, dtype=dtype))
    log_scales = torch.randn(n, 3, generator=gen, dtype=dtype) * 0.3 - 1
    return face_ids, bary, offset, quat, log_scales


def random_rotation(gen, dtype=D):
    return to_rotmat(normalize(torch.randn(4, generator=gen, dtype=dtype)))


def test_quaternion_matrix_round_trip():
    gen = torch.Generator().manual_seed(0)
    q = normalize(torch.randn(500, 4, generator=gen, dtype=D))
    q = torch.where(q[:, :1] < 0, -q, q)
    assert torch.allclose(from_rotmat(to_rotmat(q)), q, **TOL[D])
    a, b = q[:250], q[250:]
    assert torch.allclose(to_rotmat(multiply(a, b)), to_rotmat(a) @ to_rotmat(b), **TOL[D])


def test_gaussian_on_rigidly_moved_triangle_moves_exactly_with_it():
    gen = torch.Generator().manual_seed(1)
    verts, faces = random_mesh(gen)
    ids, bary, offset, quat, log_scales = random_bound(gen, len(faces))
    before = bind(PosedTriangles.of(verts, faces), ids, bary, offset, quat, log_scales)
    R, t = random_rotation(gen), torch.randn(3, generator=gen, dtype=D)
    after = bind(PosedTriangles.of(verts @ R.T + t, faces), ids, bary, offset, quat, log_scales)
    assert torch.allclose(after.means, before.means @ R.T + t, **TOL[D])
    assert torch.allclose(to_rotmat(after.quats), R @ to_rotmat(before.quats), **TOL[D])
    assert torch.allclose(after.log_scales, before.log_scales, **TOL[D])


def test_uniform_stretch_scales_the_gaussians():
    gen = torch.Generator().manual_seed(2)
    verts, faces = random_mesh(gen)
    ids, bary, offset, quat, log_scales = random_bound(gen, len(faces))
    before = bind(PosedTriangles.of(verts, faces), ids, bary, offset, quat, log_scales)
    after = bind(PosedTriangles.of(verts * 2.5, faces), ids, bary, offset, quat, log_scales)
    assert torch.allclose(after.means, before.means * 2.5, **TOL[D])
    assert torch.allclose(after.log_scales, before.log_scales + math.log(2.5), **TOL[D])


def test_barycentric_normal_offset_round_trip():
    gen = torch.Generator().manual_seed(3)
    verts, faces = random_mesh(gen)
    tri = PosedTriangles.of(verts, faces)
    ids, bary, offset, quat, log_scales = random_bound(gen, len(faces))
    world = bind(tri, ids, bary, offset, quat, log_scales)
    b2, o2, q2, s2 = unbind(tri, ids, world)
    assert torch.allclose(b2, bary, **TOL[D]) and torch.allclose(o2, offset, **TOL[D])
    assert torch.allclose(q2 * torch.sign(q2[:, :1] * quat[:, :1]), quat, **TOL[D])
    assert torch.allclose(s2, log_scales, **TOL[D])
    # and from world points: any point binds to a triangle and comes back
    points = torch.randn(20, 3, generator=gen, dtype=D)
    back = unbind(tri, ids, WorldGaussians(points, quat, log_scales))
    again = bind(tri, ids, back[0], back[1], back[2], back[3])
    assert torch.allclose(again.means, points, **TOL[D])
    k = torch.exp(tri.log_sizes[ids])
    assert torch.allclose(plane_distances(tri, ids, points), back[1].abs() * k, **TOL[D])


def test_binding_gradients_match_finite_differences():
    gen = torch.Generator().manual_seed(4)
    verts, faces = random_mesh(gen, faces=3)
    ids, bary, offset, quat, log_scales = random_bound(gen, 3, n=5)
    inputs = [t.clone().requires_grad_(True) for t in (verts, bary, offset, quat, log_scales)]

    def f(v, b, o, q, s):
        w = bind(PosedTriangles.of(v, faces), ids, b, o, q, s)
        return w.means, w.quats, w.log_scales

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6)


def test_lbs_identity_pose_is_rest_and_rigid_root_moves_everything():
    gen = torch.Generator().manual_seed(5)
    verts = torch.randn(300, 3, generator=gen, dtype=D) * torch.tensor([1.0, 0.4, 0.3], dtype=D)
    skeleton, weights = bone_chain(verts.numpy(), per_side=2)
    w = torch.tensor(weights, dtype=D)
    assert torch.allclose(w.sum(1), torch.ones(300, dtype=D), atol=1e-6) and (np.count_nonzero(weights, 1) <= 4).all()
    w = w / w.sum(1, keepdim=True)  # float32 weights sum to 1 to float32 precision
    rest = torch.tensor([1.0, 0, 0, 0], dtype=D).repeat(skeleton.num_joints, 1)
    assert torch.allclose(pose_vertices(skeleton, verts, w, rest), verts, **TOL[D])
    # the root alone rotated (others at rest) plus a translation: a rigid motion of the whole mesh
    q = axis_angle(torch.tensor([0.3, 1.0, 0.2], dtype=D), torch.tensor(0.7, dtype=D))
    rot = rest.clone()
    rot[0] = q
    t = torch.tensor([0.1, -0.2, 0.3], dtype=D)
    posed = pose_vertices(skeleton, verts, w, rot, t)
    c = skeleton.rest_positions[0].to(D)
    assert torch.allclose(posed, (verts - c) @ to_rotmat(q).T + c + t, **TOL[D])


def test_bent_chain_keeps_the_root_slab_and_moves_the_end():
    gen = torch.Generator().manual_seed(6)
    verts = torch.randn(400, 3, generator=gen, dtype=D) * torch.tensor([1.0, 0.3, 0.3], dtype=D)
    skeleton, weights = bone_chain(verts.numpy(), per_side=2)
    poses = random_poses(skeleton, 1, 30.0, np.array([[0, 1.0, 0], [0, 0, 1.0]]), np.random.default_rng(0))
    w = torch.tensor(weights, dtype=D)
    posed = pose_vertices(skeleton, verts, w / w.sum(1, keepdim=True), torch.tensor(poses[0], dtype=D))
    moved = (posed - verts).norm(dim=1)
    near_root = torch.tensor(weights[:, 0] > 0.98)
    assert near_root.any() and moved[near_root].max() < 0.05 * moved.max()
    assert moved.max() > 0.05


def test_skinning_is_differentiable_in_the_rotations():
    gen = torch.Generator().manual_seed(7)
    verts = torch.randn(30, 3, generator=gen, dtype=D) * torch.tensor([1.0, 0.3, 0.3], dtype=D)
    skeleton, weights = bone_chain(verts.numpy(), per_side=1)
    rot = normalize(torch.tensor([1.0, 0, 0, 0], dtype=D) + 0.2 * torch.randn(3, 4, generator=gen, dtype=D))
    w = torch.tensor(weights, dtype=D)
    assert torch.autograd.gradcheck(lambda r: skin_vertices(verts, w, joint_transforms(skeleton, r)),
                                    [rot.requires_grad_(True)], eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_numba_posing_kernel_matches_the_reference(dtype):
    from recon.avatar.posing_kernel import bind_numba

    gen = torch.Generator().manual_seed(8)
    verts, faces = random_mesh(gen, faces=7, dtype=dtype)
    tri = PosedTriangles.of(verts, faces)
    args = random_bound(gen, 7, n=200, dtype=dtype)
    args = (args[0], args[1], args[2], args[3] * 3.0, args[4])  # non-unit local quaternions
    ref, fused = bind(tri, *args), bind_numba(tri, *args)
    for a, b in ((ref.means, fused.means), (ref.quats, fused.quats), (ref.log_scales, fused.log_scales)):
        assert b.dtype == dtype
        torch.testing.assert_close(b, a, **TOL[dtype])

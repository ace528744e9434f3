"""Skinned meshes and Gaussians bound to their triangles (``--method meshgs``, docs/avatars.md).

- :mod:`recon.avatar.quaternions`: wxyz quaternion products and rotation-matrix conversions (PyTorch);
- :mod:`recon.avatar.skinning`: a skeleton, joint transforms from joint rotations, linear-blend skinning;
- :mod:`recon.avatar.bone_chain`: a procedural bone chain and smooth weights for an unrigged mesh (spot);
- :mod:`recon.avatar.triangle_frames`: per-triangle orthonormal frames and sizes;
- :mod:`recon.avatar.binding`: triangle-local Gaussians -> world means, wxyz quaternions, log-scales, and
  world points -> (triangle, barycentric, normal offset);
- :mod:`recon.avatar.skin_file`: the skin file (skeleton + weights, JSON) and pose records, with their checks;
- :mod:`recon.avatar.pose_time`: the pose at any time in [0, 1] (slerp / lerp between the captured poses);
- :mod:`recon.avatar.gltf_skin`: a rigged glTF document as a template (mesh, skeleton, weights);
- :mod:`recon.avatar.gltf_keyframes` and :mod:`recon.avatar.gltf_animation`: glTF animation samplers (STEP,
  LINEAR, CUBICSPLINE) and a glTF animation sampled into an avatar's poses (``render --animation FILE.glb``);
- :mod:`recon.avatar.correctives`: a pose-dependent bulge for synthetic captures (the dataset maker's
  ``--corrective``).

Everything is plain PyTorch and differentiable, except :mod:`recon.avatar.posing_kernel` (Numba, no gradients;
it takes :data:`rasterizer.cpu.KERNEL_LOCK`). Layer 2: imports only recon.core and rasterizer (and torch/numpy).
"""

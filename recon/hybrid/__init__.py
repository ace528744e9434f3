"""Meshes inside trained scenes: the hybrid renderer behind ``splatforge insert`` (issue 21).

Per pixel (FIELD_NOTES §4): the first mesh hit (open3d ``RaycastingScene``) limits the scene's
volumetric fragments (Gaussians through ``depth_limit``, NeRF samples through a per-ray far bound), and the
shaded mesh enters with the remaining transmittance: ``C = sum_k T_k alpha_k c_k + T_end C_mesh``.

Modules:

- :mod:`recon.hybrid.assets`: mesh assets (OBJ / PLY / GLB through trimesh, with textures or vertex
  colours), poses, materials, lights, keyframed asset paths; parsing of the CLI strings.
- :mod:`recon.hybrid.raycast`: :class:`MeshScene`, the posed assets (and the scene's proxy mesh) in one
  open3d ray-casting scene: first hits (distance, normal, uv, asset id, albedo) and occlusion tests.
- :mod:`recon.hybrid.render`: :class:`HybridRenderer` / :class:`HybridFrame`, the per-camera pipeline (primary
  rays, depth limit, the scene's front fragments, mesh shading, shadows both ways, compositing).
- :mod:`recon.hybrid.shading`: Lambert shading with shadow rays; the assets' shadows on the scene.
- :mod:`recon.hybrid.secondary`: mirror / glass secondary rays (throughput loop, bounce limit).
- :mod:`recon.hybrid.proxy`: the scene's proxy mesh (TSDF of the run's rendered depth), cached in RUN/hybrid/.
- :mod:`recon.hybrid.optics`: reflect, refract (Snell's law, total internal reflection), Fresnel terms for
  secondary rays, which the models trace with ``SceneModel.trace_rays`` (Gaussians: rasterizer.tracing).

Conventions: world frame of the run; rays are origins [R, 3] and unit directions [R, 3] in world units,
distances ``t`` along the ray (not camera z); cameras as rasterizer/CONVENTIONS.md (OpenCV, world-to-camera,
pixel centres at +0.5).

Layer 8: may import layers 1-7 (recon.geometry, recon.distributed, recon.outputs, ...) and rasterizer.
"""

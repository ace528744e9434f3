"""Layer 4: geometry from any run. May import layers 1-3 (recon.core, recon.export, recon.nerf,
recon.losses, recon.outputs, recon.data) and rasterizer.

- ``mesh_extraction.py``: render depth of the training views and fuse them (``splatforge mesh``);
- ``tsdf.py``: marching cubes on open3d's voxel-block TSDF, in pieces;
- ``mesh_metrics.py``: Chamfer distance and exact point-to-mesh distances;
- ``metrics.py``: per-view depth and normal errors, depth-to-normal;
- ``ground_truth.py``: ground-truth depth and normal images (lego's PNG encoding, mesh datasets).
"""

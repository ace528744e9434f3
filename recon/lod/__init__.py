"""Layer 3: levels of detail for trained 3D Gaussian models (docs/lod.md).

- ``merge.py``: the merge rule (moment-matched mean and covariance, opacity, SH) of a group of Gaussians;
- ``hierarchy.py``: the octree hierarchy over a model (leaves = the model's Gaussians, interior nodes = merges);
- ``cut.py``: the cut through the hierarchy for a camera and a budget (Gaussians or projected pixels);
- ``manifest.py``: the manifest of an LOD export (write, read back, checks);
- ``export_lod.py``: chunks by spatial cell and level (SPZ) plus the manifest, written atomically; the reader.

Imports recon.core and recon.export (SPZ); never the trainer, runs or the viewer.
"""

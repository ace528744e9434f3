"""Layer 3: levels of detail for trained 3D Gaussian models (docs/lod.md).

- ``merge.py``: the merge rule (moment-matched mean and covariance, opacity, SH) of a group of Gaussians;
- ``hierarchy.py``: the octree hierarchy over a model (leaves = the model's Gaussians, interior nodes = merges);
- ``flat.py``: the hierarchy as breadth-first packed records (the cut's input) and the cut metrics' weights;
- ``cut.py``: the cut through the hierarchy for a camera and a budget (Gaussians or projected pixels), and its
  plain reference;
- ``finetune.py``: the merged levels fine-tuned against renders of the full model;
- ``manifest.py``: the manifest of an LOD export (write, read back, checks);
- ``export_lod.py``: chunks by spatial cell and level (SPZ) plus the manifest, written atomically; the reader;
- ``streamed_sog.py``: an LOD export as PlayCanvas' Streamed SOG (through splat-transform), checked.

Imports rasterizer, recon.core, recon.export (SPZ, PLY) and recon.losses (the fine-tuning's loss); never the
trainer, runs or the viewer.
"""

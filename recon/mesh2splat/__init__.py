"""Layer 7: meshes to splats at dataset scale (``splatforge mesh2splat``, docs/mesh2splat.md). May import
layers 1-6 and rasterizer.

- ``preset.py``: the per-object schedule (:class:`ObjectPreset`) and the TrainConfig it makes;
- ``sources.py``: the meshes under a folder, their output paths and labels;
- ``surface.py``: initial Gaussians sampled on the surface; Chamfer of centres to the surface;
- ``convert.py``: one object: check, normalise, render, train (the trainer of ``splatforge train``), check;
- ``batch.py``: the batch: resume, long-lived worker processes with per-object time and memory limits, progress;
- ``cluster.py``: one batch over the ranks of a torch.distributed job (the lease queue of block training);
- ``report.py``: the batch's summary (histograms, a contact sheet of renders).
"""

"""Layer 2: what a training run writes into its folder. May import layer 1 (recon.core) and rasterizer.

- ``files.py``: the run folder's file names, config.yaml (read, write, check), checkpoints, the lock;
- ``history.py``: the per-step record (history.json);
- ``plots.py``: loss.png (and the block partition's pictures);
- ``images.py``: depth and normal maps as images (renders/);
- ``paths.py``: checks on output paths (writable, not a folder, ``--force``).

The object that opens a run folder for reading is :class:`recon.run.folder.Run` (layer 7).
"""

"""Layer 1: what every other package stands on. Imports nothing of recon (rasterizer only).

- ``errors.py``: :class:`SplatforgeError` and the user-facing errors; ``fail`` prints one line and exits 2;
- ``atomic.py``: all-or-nothing file writes (temporary file, then rename);
- ``limits.py``: the reader rules every reader uses (JSON depth/size/UTF-8/NaN, image pixel limit before
  decoding, regular files, finite values, .npy/.npz declared sizes, MemoryError as one line);
- ``devices.py``: ``--device auto|cpu|cuda``;
- ``schedule.py``: run-length scaling of the 30k-step schedules (trainer and models share it);
- ``open3d_import.py``: imports open3d with a message naming the missing system library;
- ``splat_data.py``, ``spacetime_data.py``: the format-neutral records of 3D and 4D splats.
"""

"""The hash-grid NeRF's parts (hash encoding, field, occupancy grid, ray marching, scene space); the model is
recon/models/nerf.py. Layer 2: imports only torch, numba and rasterizer."""

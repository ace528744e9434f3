"""Images as 2D Gaussians (GaussianImage, GSASR): the model (model.py), fitting (fit.py), image files (io.py,
png16.py), the .gimg model file (gimg.py, codec.py; FORMAT.md), rendering at any size (resample.py), reports
(report.py) and GSASR's layout (gsasr.py). The command is recon/commands/image.py (`splatforge image`).

Layer 4: may import layers 1-3 (recon.core, recon.losses) and rasterizer.
"""

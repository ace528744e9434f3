"""Block-partitioned training over many workers with torch.distributed (see recon/distributed/README.md).

``partition``: split a scene into blocks (blocks.json). ``queue``: the block queue on the c10d TCPStore
with leases. ``worker``: what each torchrun process does. ``merge``: one model from the blocks.
``launch``: ``splatforge train --blocks ... --workers N`` starts torchrun. ``python -m recon.distributed``
is the torchrun entry. Nothing here imports torch.distributed at module import except ``worker``.

Layer 7: may import layers 1-6 (recon.training, recon.models, recon.data, ...) and rasterizer.
"""

"""CLI subcommands, one module each (see recon/cli.py).

Layer 10: may import every layer below, the viewer included.
"""

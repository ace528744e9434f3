"""CLI subcommands, one module each (see recon/cli.py)."""

"""All-or-nothing file writes: moved to :mod:`recon.core.atomic` (format-neutral, used by run files too);
re-exported here so ``recon.export.atomic`` imports keep working."""

from recon.core.atomic import atomic_open, atomic_write_bytes, refuse_overwrite

__all__ = ["atomic_open", "atomic_write_bytes", "refuse_overwrite"]

"""The viewer's user-facing error (below every other viewer module, so any of them can raise it)."""

from __future__ import annotations

from recon.core.errors import SplatforgeError


class ViewerInputError(SplatforgeError, ValueError):
    """A file or folder given to the viewer is missing or unusable; the message names it."""

"""open3d, imported with an error that says what to install.

open3d's wheel loads system libraries when it is imported; on a fresh Debian or Ubuntu machine some are
missing and the import fails with ``ImportError: libusb-1.0.so.0: cannot open shared object file``, which
does not say what to do. :func:`open3d` turns that (and a missing package) into :class:`Open3DMissingError`,
a one-line CLI error naming the library and the packages to install. Every splatforge module that needs
open3d (mesh extraction and metrics, ray casting, the mesh-dataset and benchmark scripts) imports it here.
"""

from __future__ import annotations

import re

from .errors import SplatforgeError

# the Debian / Ubuntu packages of the system libraries the open3d wheel loads (.ci/run installs them)
OPEN3D_DEBIAN_PACKAGES = ("libegl1", "libx11-6", "libudev1", "libusb-1.0-0", "libidn2-0", "libgl1", "libgomp1")
OPEN3D_PIP = "open3d-cpu>=0.19,<0.21"  # as in pyproject.toml


class Open3DMissingError(SplatforgeError, ImportError):
    """open3d cannot be imported: the package or a system library it loads is missing."""


def missing_library(err: BaseException) -> str | None:
    """The shared library an ImportError / OSError says it could not load (``libusb-1.0.so.0``), or None."""
    found = re.search(r"([\w.+-]+\.so(?:\.[\w.]+)?): cannot open shared object file", str(err))
    return found.group(1) if found else None


def explain(err: BaseException, what: str) -> Open3DMissingError:
    """The :class:`Open3DMissingError` for ``err``, raised while importing open3d for ``what``."""
    lib = missing_library(err)
    if lib is not None:
        return Open3DMissingError(
            f"open3d (needed by {what}) cannot load the system library {lib}; its wheel needs these "
            f"Debian/Ubuntu packages: sudo apt-get install {' '.join(OPEN3D_DEBIAN_PACKAGES)} "
            "(on other systems install the same libraries: EGL, X11, udev, libusb, libidn2, OpenGL, OpenMP)")
    if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] == "open3d":
        return Open3DMissingError(f"open3d (needed by {what}) is not installed: pip install '{OPEN3D_PIP}' "
                                  "(a dependency of splatforge; scripts/install.sh installs it)")
    return Open3DMissingError(f"open3d (needed by {what}) failed to import: {err}")


def open3d(what: str = "this command"):
    """The ``open3d`` module (its ``core`` and ``t.geometry`` loaded), or :class:`Open3DMissingError`
    saying what to install; ``what`` names the feature in the message (``"splatforge mesh"``)."""
    try:
        import open3d as o3d
        import open3d.core  # noqa: F401
    except (ImportError, OSError) as err:
        raise explain(err, what) from err
    return o3d

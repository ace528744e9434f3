"""open3d imported with an error that says what to install (recon.core.open3d_import), also from `splatforge mesh`."""

import builtins
from pathlib import Path

import pytest

from recon.core import open3d_import as oi
from recon.core.errors import SplatforgeError, describe

LIBUSB = "libusb-1.0.so.0: cannot open shared object file: No such file or directory"


def failing_import(monkeypatch, err: BaseException) -> list:
    """Make ``import open3d`` (and its submodules) raise ``err``; returns the names that were asked for."""
    real, asked = builtins.__import__, []

    def fake(name, *args, **kwargs):
        if name == "open3d" or name.startswith("open3d."):
            asked.append(name)
            raise err
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    return asked


def test_missing_library_is_read_from_the_loader_message():
    assert oi.missing_library(ImportError(LIBUSB)) == "libusb-1.0.so.0"
    assert oi.missing_library(OSError("libEGL.so.1: cannot open shared object file: No such file")) == "libEGL.so.1"
    assert oi.missing_library(ImportError("No module named 'open3d'")) is None


def test_a_missing_system_library_names_it_and_the_packages(monkeypatch):
    asked = failing_import(monkeypatch, ImportError(LIBUSB))
    with pytest.raises(oi.Open3DMissingError) as info:
        oi.open3d("splatforge mesh")
    assert asked == ["open3d"]
    msg = str(info.value)
    assert msg.startswith("open3d (needed by splatforge mesh) cannot load the system library libusb-1.0.so.0;")
    assert "sudo apt-get install " + " ".join(oi.OPEN3D_DEBIAN_PACKAGES) in msg
    assert isinstance(info.value, SplatforgeError) and isinstance(info.value, ImportError)
    assert isinstance(info.value.__cause__, ImportError)


def test_a_missing_package_says_pip_install(monkeypatch):
    failing_import(monkeypatch, ModuleNotFoundError("No module named 'open3d'", name="open3d"))
    with pytest.raises(oi.Open3DMissingError, match=r"open3d \(needed by make_mesh_dataset.py\) is not installed: "
                                                    r"pip install 'open3d-cpu>=0.19,<0.21'"):
        oi.open3d("make_mesh_dataset.py")


def test_another_import_failure_is_passed_on_in_the_message(monkeypatch):
    failing_import(monkeypatch, ImportError("numpy.core.multiarray failed to import"))
    with pytest.raises(oi.Open3DMissingError,
                       match=r"open3d \(needed by this command\) failed to import: numpy.core.multiarray failed"):
        oi.open3d()


def test_pip_range_is_the_pyproject_dependency():
    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    assert f'"{oi.OPEN3D_PIP}"' in text


def test_mesh_command_reports_it_before_rendering(tmp_path, monkeypatch):
    """`splatforge mesh` checks open3d first: one line naming the library, no rendering, nothing written."""
    from recon.commands import mesh as mesh_cmd

    calls = []
    monkeypatch.setattr(mesh_cmd.mx, "render_views", lambda *a, **k: calls.append(a))
    failing_import(monkeypatch, ImportError(LIBUSB))
    out = tmp_path / "m.ply"
    with pytest.raises(oi.Open3DMissingError) as info:
        mesh_cmd.extract_run_mesh(mesh_cmd.MeshConfig(run=tmp_path / "no-run-needed", out=out, progress=False))
    assert "libusb-1.0.so.0" in describe(info.value) and "\n" not in describe(info.value)
    assert not calls and not out.exists()


def test_every_open3d_import_goes_through_the_module():
    """Only recon/core/open3d_import.py imports open3d itself, so every feature gets the error that says what to do."""
    import re

    root = Path(__file__).resolve().parents[3]
    direct = re.compile(r"^\s*(import open3d|from open3d)", re.M)
    found = [str(p.relative_to(root)) for top in ("recon", "rasterizer", "viewer", "datasets", "scripts")
             for p in (root / top).rglob("*.py") if direct.search(p.read_text(encoding="utf-8"))]
    assert found == ["recon/core/open3d_import.py"]

"""Outside readers as judges of our files: @playcanvas/splat-transform (CLI, Node) and Spark
(@sparkjsdev/spark in headless Chromium). Install them with ``scripts/install_outside_readers.sh``;
each test skips, naming what is missing, only where the tool is absent.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from recon.export import read_splats, write_splats
from recon.export.glb import read_glb, write_glb, parse_glb
from recon.export.splats import normalized_quats, random_splats, sigmoid
from recon.export.spz import OPENCV_TO_RUB

REPO = Path(__file__).resolve().parents[3]
JS = REPO / "scripts" / "js"
SPLAT_TRANSFORM = JS / "node_modules" / ".bin" / "splat-transform"
SPARK = JS / "node_modules" / "@sparkjsdev" / "spark" / "dist" / "spark.module.js"
THREE = JS / "node_modules" / "three" / "build" / "three.module.js"
CHROMIUM = Path("/usr/bin/chromium")

needs_splat_transform = pytest.mark.skipif(
    not (SPLAT_TRANSFORM.exists() and shutil.which("node")),
    reason="splat-transform not installed (run scripts/install_outside_readers.sh: npm ci in scripts/js)")

# quantisation tolerances of the formats (what an exact decoder may differ from the source by)
TOL = {
    "ply": dict(pos=1e-6, opacity=1e-6, dc=1e-6, log_scale=1e-6, sh=1e-6, quat=1e-6),
    "splat": dict(pos=1e-6, opacity=1 / 255, dc=0.02, log_scale=1e-5, sh=None, quat=0.02),
    "spz": dict(pos=2.5e-4, opacity=1 / 255, dc=0.02, log_scale=1 / 32 + 1e-6, sh=0.07, quat=0.01),
}


def model(n=300, degree=3, seed=0):
    return random_splats(n, sh_degree=degree, seed=seed, extent=3.0)


def quat_err(a, b):
    """max over splats of 1 - |<qa, qb>| (sign-free)."""
    qa, qb = normalized_quats(a), normalized_quats(b)
    return float(np.max(1.0 - np.abs((qa * qb).sum(axis=1))))


def assert_close(got, ref, tol, what):
    assert len(got) == len(ref), what
    assert np.abs(got.means - ref.means).max() <= tol["pos"], f"{what}: positions"
    assert np.abs(sigmoid(got.logit_opacities) - sigmoid(ref.logit_opacities)).max() <= tol["opacity"] + 1e-7, f"{what}: opacity"
    assert np.abs(got.sh[:, 0] - ref.sh[:, 0]).max() <= tol["dc"], f"{what}: DC colour"
    assert np.abs(got.log_scales - ref.log_scales).max() <= tol["log_scale"], f"{what}: scales"
    assert quat_err(got.quats, ref.quats) <= tol["quat"], f"{what}: rotations"
    if tol["sh"] is not None and ref.sh_degree:
        assert got.sh_degree == ref.sh_degree, f"{what}: SH degree"
        assert np.abs(got.sh[:, 1:] - ref.sh[:, 1:]).max() <= tol["sh"], f"{what}: SH rest"


def splat_transform(*args, cwd):
    proc = subprocess.run([str(SPLAT_TRANSFORM), "-q", "-w", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout


# ------------------------------------------------------------------------------ splat-transform


@needs_splat_transform
@pytest.mark.parametrize("fmt", ["ply", "splat", "spz"])
def test_splat_transform_decodes_our_files(tmp_path, fmt):
    src = model()
    ours = tmp_path / f"ours.{fmt}"
    write_splats(ours, src)
    out = tmp_path / f"from_{fmt}.ply"
    splat_transform(ours, out, cwd=tmp_path)
    theirs = read_splats(out)
    our_decode = read_splats(ours)
    # the outside decoder agrees with ours (same order, tiny float differences only) ...
    assert_close(theirs, our_decode, dict(TOL["ply"], quat=1e-4), f"splat-transform vs us ({fmt})")
    # ... and both are within the format's quantisation of the source model
    if fmt == "splat":  # .splat is sorted by importance: match rows by position
        order = np.lexsort(src.means.T[::-1])
        src = src.subset(order)
        theirs = theirs.subset(np.lexsort(theirs.means.T[::-1]))
    assert_close(theirs, src, TOL[fmt], f"splat-transform vs source ({fmt})")


@needs_splat_transform
def test_our_reader_reads_splat_transform_spz_v3(tmp_path):
    src = model(degree=3, seed=1)
    write_splats(tmp_path / "src.ply", src)
    splat_transform("src.ply", "--spz-version", "3", "theirs.spz", cwd=tmp_path)
    raw = (tmp_path / "theirs.spz").read_bytes()
    import gzip

    assert int.from_bytes(gzip.decompress(raw)[4:8], "little") == 3
    got = read_splats(tmp_path / "theirs.spz")
    tol = dict(TOL["spz"], quat=0.01, sh=0.07)
    assert_close(got, src, tol, "our reader on splat-transform's SPZ v3")


@needs_splat_transform
def test_splat_transform_glb_uses_the_same_attributes(tmp_path):
    """splat-transform also writes KHR_gaussian_splatting GLB: same attribute names and value
    conventions as ours (linear scale, sigmoid opacity, xyzw); its axes differ from ours by a
    180 degree turn about +Y (it maps OpenCV (x, y, z) -> (-x, -y, z), we -> (x, -y, -z))."""
    src = model(degree=2, seed=2)
    write_splats(tmp_path / "src.ply", src)
    splat_transform("src.ply", "theirs.glb", cwd=tmp_path)
    write_glb(tmp_path / "ours.glb", src)
    doc_t, _ = parse_glb("theirs.glb", (tmp_path / "theirs.glb").read_bytes())
    doc_o, _ = parse_glb("ours.glb", (tmp_path / "ours.glb").read_bytes())
    prim_t, prim_o = doc_t["meshes"][0]["primitives"][0], doc_o["meshes"][0]["primitives"][0]
    assert set(prim_t["attributes"]) == set(prim_o["attributes"])
    assert prim_t["extensions"]["KHR_gaussian_splatting"] == prim_o["extensions"]["KHR_gaussian_splatting"]
    theirs = read_glb(tmp_path / "theirs.glb")  # decoded with our flip D = diag(1, -1, -1)
    turn = np.array([-1.0, 1.0, -1.0])  # 180 degrees about +Y, between their frame and ours
    np.testing.assert_allclose(theirs.means * turn, src.means, atol=1e-5)
    np.testing.assert_allclose(theirs.log_scales, src.log_scales, atol=1e-5)
    np.testing.assert_allclose(sigmoid(theirs.logit_opacities), sigmoid(src.logit_opacities), atol=1e-6)
    np.testing.assert_allclose(theirs.sh[:, 0], src.sh[:, 0], atol=1e-6)


# ------------------------------------------------------------------------------ Spark in Chromium


def _spark_missing() -> str | None:
    if not CHROMIUM.exists():
        return "Debian chromium not installed at /usr/bin/chromium"
    if not (SPARK.exists() and THREE.exists()):
        return "@sparkjsdev/spark / three not installed (npm ci in scripts/js)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "python playwright not installed"
    return None


class _Handler(http.server.SimpleHTTPRequestHandler):
    """/probe.html, /node_modules/... from scripts/js; /files/... from the test's folder."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".js": "text/javascript", ".mjs": "text/javascript",
                      ".wasm": "application/wasm", ".spz": "application/octet-stream",
                      ".splat": "application/octet-stream", ".ply": "application/octet-stream"}

    def __init__(self, *args, files_dir: Path, **kwargs):
        self.files_dir = files_dir
        super().__init__(*args, directory=str(JS), **kwargs)

    def translate_path(self, path):
        rel = urllib.parse.unquote(urllib.parse.urlsplit(path).path).lstrip("/")
        parts = [p for p in rel.split("/") if p not in ("", ".", "..")]
        if parts[:1] == ["files"]:
            return str(self.files_dir.joinpath(*parts[1:]))
        if parts == ["probe.html"]:
            return str(JS / "spark_probe.html")
        if parts[:1] == ["node_modules"]:
            return str(JS.joinpath(*parts))
        return str(self.files_dir / "__missing__")

    def log_message(self, *args):  # keep pytest output quiet
        pass


@pytest.fixture
def spark_page(tmp_path):
    """Yields load(path) -> dict decoded by Spark for a file in tmp_path."""
    why = _spark_missing()
    if why:
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_Handler, files_dir=tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                str(profile), executable_path=str(CHROMIUM), headless=True,
                args=["--headless", "--no-sandbox", "--disable-gpu",
                      "--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--no-first-run"])
            page = context.new_page()
            console = []
            page.on("console", lambda m: console.append(m.text))
            page.on("pageerror", lambda e: console.append(str(e)))

            def load(path: Path, type_: str | None = None) -> dict:
                query = f"file=/files/{path.name}" + (f"&type={type_}" if type_ else "")
                page.goto(f"{base}/probe.html?{query}")
                page.wait_for_function("window.__sparkResult !== undefined", timeout=60_000)
                result = page.evaluate("window.__sparkResult")
                assert "error" not in result, f"Spark failed: {result['error']}\n" + "\n".join(console)
                return result

            yield load
            context.close()
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("fmt", ["spz", "splat", "ply"])
def test_spark_loads_our_files(tmp_path, spark_page, fmt):
    src = model(n=257, degree=3 if fmt != "splat" else 0, seed=3)
    path = tmp_path / f"ours.{fmt}"
    write_splats(path, src)
    ours = read_splats(path)  # our decode of the same file (row order as in the file)
    result = spark_page(path, fmt)
    assert result["numSplats"] == len(src)
    first = np.array(result["first"]["center"])
    # Spark reports centres in the file's own axes (it does not convert SPZ's RUB frame; users
    # orient the mesh), stored as float16 in PackedSplats: compare within half precision.
    expected = ours.means[0].astype(np.float64) * (OPENCV_TO_RUB if fmt == "spz" else 1.0)
    np.testing.assert_allclose(first, expected, rtol=2e-3, atol=2e-3,
                               err_msg=f"Spark's first centre vs ours ({fmt})")
    # the rest of the first splat, within Spark's 8-bit packing: scales, opacity, DC colour, rotation
    got = result["first"]
    scales = np.exp(ours.log_scales[0].astype(np.float64))
    np.testing.assert_allclose(got["scales"], scales, rtol=0.05, err_msg=f"scales ({fmt})")
    assert abs(got["opacity"] - float(sigmoid(ours.logit_opacities[0]))) < 2.5 / 255, (fmt, got["opacity"])
    colour = np.clip(0.5 + 0.28209479177387814 * ours.sh[0, 0].astype(np.float64), 0, 1)
    np.testing.assert_allclose(got["color"], colour, atol=0.02, err_msg=f"DC colour ({fmt})")
    w, x, y, z = normalized_quats(ours.quats[:1].astype(np.float64))[0]
    if fmt == "spz":  # the file's RUB axes: R' = S R S with S = diag(1, -1, -1)
        y, z = -y, -z
    q = np.array(got["quaternion"], np.float64)
    assert abs(float(q @ [x, y, z, w])) / np.linalg.norm(q) > 0.995, (fmt, q, (w, x, y, z))

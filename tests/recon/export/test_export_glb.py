"""GLB with KHR_gaussian_splatting: container layout, attribute names, axis flip, round trip, and
two outside glTF readers (pygltflib, trimesh) where installed."""

import json
import struct

import numpy as np
import pytest

from recon.export import SplatFileError
from recon.export.glb import (EXTENSION, OPACITY, ROTATION, SCALE, decode_glb, encode_glb,
                              parse_glb, read_any, read_glb, sh_attribute_names, write_any,
                              write_glb)
from recon.export.splats import SH_C0, normalized_quats, random_splats, sigmoid


def minimal_read(raw: bytes):
    """Independent tiny GLB reader: (json, {attribute: float array}) for tightly packed views."""
    magic, version, total = struct.unpack_from("<III", raw)
    assert (magic, version, total) == (0x46546C67, 2, len(raw))
    jlen, jtype = struct.unpack_from("<II", raw, 12)
    assert jtype == 0x4E4F534A and jlen % 4 == 0
    doc = json.loads(raw[20:20 + jlen])
    blen, btype = struct.unpack_from("<II", raw, 20 + jlen)
    assert btype == 0x004E4942 and blen % 4 == 0 and 28 + jlen + blen == total
    binary = raw[28 + jlen:]
    prim = doc["meshes"][0]["primitives"][0]
    out = {}
    for name, idx in prim["attributes"].items():
        acc = doc["accessors"][idx]
        view = doc["bufferViews"][acc["bufferView"]]
        assert view["byteOffset"] % 4 == 0
        dtype = {5126: "<f4", 5121: "u1"}[acc["componentType"]]
        width = {"SCALAR": 1, "VEC3": 3, "VEC4": 4}[acc["type"]]
        arr = np.frombuffer(binary, dtype, acc["count"] * width, view["byteOffset"])
        out[name] = arr.reshape(acc["count"], width)
    return doc, out


def test_layout_and_attribute_names():
    d = random_splats(20, sh_degree=3)
    doc, attrs = minimal_read(encode_glb(d))
    assert doc["extensionsUsed"] == [EXTENSION]
    prim = doc["meshes"][0]["primitives"][0]
    assert prim["mode"] == 0
    assert prim["extensions"][EXTENSION]["kernel"] == "ellipse"
    assert prim["extensions"][EXTENSION]["colorSpace"] == "srgb_rec709_display"
    names = set(prim["attributes"])
    assert {"POSITION", "COLOR_0", "KHR_gaussian_splatting:ROTATION", "KHR_gaussian_splatting:SCALE",
            "KHR_gaussian_splatting:OPACITY"} <= names
    sh_names = sorted(n for n in names if "SH_DEGREE" in n)
    assert len(sh_names) == 16
    assert "KHR_gaussian_splatting:SH_DEGREE_0_COEF_0" in names
    assert "KHR_gaussian_splatting:SH_DEGREE_3_COEF_6" in names
    pos = doc["accessors"][prim["attributes"]["POSITION"]]
    np.testing.assert_allclose(pos["min"], attrs["POSITION"].min(0))
    np.testing.assert_allclose(pos["max"], attrs["POSITION"].max(0))


def test_values_and_axes():
    """+Y up: OpenCV (x, y, z) -> (x, -y, -z); quaternions xyzw unit; linear scale; opacity in
    [0, 1]; SH signs flipped by parity in y and z (degree 1: y-coefficient and z-coefficient)."""
    d = random_splats(50, sh_degree=1, seed=3)
    _, a = minimal_read(encode_glb(d))
    np.testing.assert_allclose(a["POSITION"], d.means * [1, -1, -1], atol=1e-6)
    np.testing.assert_allclose(a[SCALE], np.exp(d.log_scales), rtol=1e-6)
    np.testing.assert_allclose(a[OPACITY][:, 0], sigmoid(d.logit_opacities), atol=1e-7)
    q = normalized_quats(d.quats)  # wxyz
    np.testing.assert_allclose(a[ROTATION], np.stack([q[:, 1], -q[:, 2], -q[:, 3], q[:, 0]], 1),
                               atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(a[ROTATION], axis=1), 1, atol=1e-6)
    names = sh_attribute_names(1)
    np.testing.assert_allclose(a[names[0]], d.sh[:, 0])
    np.testing.assert_allclose(a[names[1]], -d.sh[:, 1])  # Y_1,-1 ~ y
    np.testing.assert_allclose(a[names[2]], -d.sh[:, 2])  # Y_1,0 ~ z
    np.testing.assert_allclose(a[names[3]], d.sh[:, 3])  # Y_1,1 ~ x
    rgb = np.clip(np.round((0.5 + SH_C0 * d.sh[:, 0]) * 255), 0, 255)
    np.testing.assert_array_equal(a["COLOR_0"][:, :3], rgb)


def test_sh_flip_preserves_colour():
    """The colour seen along a direction is unchanged when both direction and SH are flipped."""
    from recon.export.spz import sh_axis_flip_signs

    rng = np.random.default_rng(0)
    d = rng.normal(size=3)
    d /= np.linalg.norm(d)

    def basis(v):
        x, y, z = v
        return np.array([1, -y, z, -x, x * y, y * z, 2 * z * z - x * x - y * y, x * z, x * x - y * y,
                         y * (3 * x * x - y * y), x * y * z, y * (4 * z * z - x * x - y * y),
                         z * (2 * z * z - 3 * x * x - 3 * y * y), x * (4 * z * z - x * x - y * y),
                         z * (x * x - y * y), x * (x * x - 3 * y * y)])

    c = rng.normal(size=16)
    flip = np.array([1.0, -1.0, -1.0])
    assert np.isclose(basis(d) @ c, basis(d * flip) @ (c * sh_axis_flip_signs(3, flip)))


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_round_trip(tmp_path, degree):
    d = random_splats(40, sh_degree=degree, seed=degree, antialiased=degree == 2)
    path = tmp_path / "m.glb"
    write_glb(path, d)
    r = read_glb(path)
    assert len(r) == 40 and r.sh_degree == degree and r.antialiased == (degree == 2)
    np.testing.assert_allclose(r.means, d.means, atol=1e-6)
    np.testing.assert_allclose(r.log_scales, d.log_scales, atol=1e-5)
    np.testing.assert_allclose(r.sh, d.sh, atol=1e-6)
    np.testing.assert_allclose(sigmoid(r.logit_opacities), sigmoid(d.logit_opacities), atol=1e-6)
    assert np.max(1 - np.abs((normalized_quats(r.quats) * normalized_quats(d.quats)).sum(1))) < 1e-6


def test_write_any_drops_nan_and_refuses_existing(tmp_path):
    d = random_splats(10, sh_degree=0)
    d.means[3, 1] = np.nan
    path = tmp_path / "m.glb"
    res = write_any(path, d)
    assert (res.format, res.written, res.dropped) == ("glb", 9, 1)
    with pytest.raises(FileExistsError):
        write_any(path, d)
    write_any(path, d, force=True)
    assert len(read_any(path)) == 9


def test_bad_files(tmp_path):
    raw = encode_glb(random_splats(5, sh_degree=0))
    with pytest.raises(SplatFileError, match="magic"):
        decode_glb("x.glb", b"XXXX" + raw[4:])
    with pytest.raises(SplatFileError, match="length"):
        decode_glb("x.glb", raw[:-4])
    doc, binary = parse_glb("x.glb", raw)
    assert len(binary) % 4 == 0 and doc["asset"]["version"] == "2.0"


def test_pygltflib_opens_it(tmp_path):
    pygltflib = pytest.importorskip("pygltflib", reason="pygltflib not installed "
                                    "(scripts/install_outside_readers.sh installs it)")
    d = random_splats(33, sh_degree=2, seed=5)
    path = tmp_path / "m.glb"
    write_glb(path, d)
    gltf = pygltflib.GLTF2().load(str(path))
    prim = gltf.meshes[0].primitives[0]
    assert prim.mode == pygltflib.POINTS
    assert EXTENSION in gltf.extensionsUsed and EXTENSION in prim.extensions
    pos_acc = gltf.accessors[prim.attributes.POSITION]
    assert pos_acc.count == 33 and pos_acc.type == "VEC3"
    blob = gltf.binary_blob()
    view = gltf.bufferViews[pos_acc.bufferView]
    pos = np.frombuffer(blob, "<f4", 33 * 3, view.byteOffset).reshape(33, 3)
    np.testing.assert_allclose(pos, d.means * [1, -1, -1], atol=1e-6)


def test_trimesh_opens_it(tmp_path):
    trimesh = pytest.importorskip("trimesh", reason="trimesh not installed")
    d = random_splats(21, sh_degree=1, seed=6)
    path = tmp_path / "m.glb"
    write_glb(path, d)
    scene = trimesh.load(str(path), force="scene")
    clouds = [g for g in scene.geometry.values() if isinstance(g, trimesh.PointCloud)]
    assert len(clouds) == 1
    np.testing.assert_allclose(np.sort(clouds[0].vertices, axis=0),
                               np.sort(d.means * [1, -1, -1], axis=0), atol=1e-6)

"""Niantic SPZ v3 write, v1-v3 read: quantisation bounds, RUB axis conversion, bad files."""

import gzip
import struct

import numpy as np
import pytest

from recon.export.splats import SH_C0, SplatData, SplatFileError, normalized_quats, random_splats, sigmoid
from recon.export.spz import (MAGIC, decode_spz, encode_spz, pack_quats_smallest_three, read_spz,
                              sh_axis_flip_signs, unpack_quats_smallest_three, write_spz)

D = np.array([1.0, -1.0, -1.0])  # OpenCV (RDF) <-> SPZ (RUB)

# --- an independent real-SH evaluator (standard constants, degree-major, m = -l..l) -------------
C1 = 0.4886025119029199
C2 = [1.0925484305920792, -1.0925484305920792, 0.31539156525252005, -1.0925484305920792,
      0.5462742152960396]
C3 = [-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
      -0.4570457994644658, 1.445305721320277, -0.5900435899266435]


def sh_basis(dirs):
    """[M, 3] unit directions -> [M, 16] basis values."""
    x, y, z = dirs.T
    xx, yy, zz = x * x, y * y, z * z
    return np.stack([
        np.full_like(x, SH_C0),
        -C1 * y, C1 * z, -C1 * x,
        C2[0] * x * y, C2[1] * y * z, C2[2] * (2 * zz - xx - yy), C2[3] * x * z, C2[4] * (xx - yy),
        C3[0] * y * (3 * xx - yy), C3[1] * x * y * z, C3[2] * y * (4 * zz - xx - yy),
        C3[3] * z * (2 * zz - 3 * xx - 3 * yy), C3[4] * x * (4 * zz - xx - yy),
        C3[5] * z * (xx - yy), C3[6] * x * (xx - 3 * yy),
    ], axis=1)


def sh_colour(sh, dirs):
    """sh [N, K, 3], dirs [N, 3] -> colour [N, 3] = max(SH + 0.5, 0)."""
    k = sh.shape[1]
    basis = sh_basis(dirs / np.linalg.norm(dirs, axis=1, keepdims=True))[:, :k]
    return np.maximum((basis[:, :, None] * sh).sum(axis=1) + 0.5, 0.0)


def quat_to_matrix(q):
    w, x, y, z = normalized_quats(q).T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
        np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
        np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
    ], axis=1)


def quat_angle_deg(a, b):
    qa, qb = normalized_quats(a), normalized_quats(b)
    return np.degrees(2 * np.arccos(np.clip(np.abs((qa * qb).sum(axis=1)), 0, 1)))


def payload(path):
    return gzip.decompress(path.read_bytes())


# --- header and round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("antialiased", [False, True])
def test_header(tmp_path, antialiased):
    path = tmp_path / "m.spz"
    write_spz(path, random_splats(37, sh_degree=2, antialiased=antialiased))
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"  # gzip
    magic, version, n, degree, frac, flags, reserved = struct.unpack_from("<IIIBBBB", payload(path))
    assert (magic, version, n, degree, frac, reserved) == (0x5053474E, 3, 37, 2, 12, 0)
    assert flags == (1 if antialiased else 0)
    body = 37 * (9 + 1 + 3 + 3 + 4 + 8 * 3)
    assert len(payload(path)) == 16 + body
    assert read_spz(path).antialiased == antialiased


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
def test_round_trip_within_quantisation(tmp_path, degree):
    d = random_splats(400, sh_degree=degree, seed=10 + degree, extent=10.0)
    path = tmp_path / "m.spz"
    write_spz(path, d)
    r = read_spz(path)
    assert r.sh_degree == degree and len(r) == len(d)
    assert np.abs(r.means - d.means).max() <= 2.5e-4
    assert np.abs(sigmoid(r.logit_opacities) - sigmoid(d.logit_opacities)).max() <= 1 / 255
    assert (SH_C0 * np.abs(r.sh[:, 0] - d.sh[:, 0])).max() <= 0.02
    assert np.abs(r.log_scales - d.log_scales).max() <= 1 / 32 + 1e-5
    assert quat_angle_deg(r.quats, d.quats).max() < 0.5
    if degree >= 1:  # buckets of 8/128 (degree 1) and 16/128 (degrees 2-3), plus rounding
        assert np.abs(r.sh[:, 1:4] - d.sh[:, 1:4]).max() <= 4.5 / 128 + 1e-6
    if degree >= 2:
        assert np.abs(r.sh[:, 4:] - d.sh[:, 4:]).max() <= 8.5 / 128 + 1e-6


def test_sh_quantisation_buckets(tmp_path):
    d = random_splats(200, sh_degree=3, seed=5)
    path = tmp_path / "m.spz"
    write_spz(path, d)
    sh = np.frombuffer(payload(path)[16 + 200 * 20:], np.uint8).reshape(200, 15, 3).astype(int)
    assert np.all(sh[:, :3] % 8 == 0)  # degree 1: 5 bits
    assert np.all(sh[:, 3:] % 16 == 0)  # degrees 2-3: 4 bits


# --- axis conversion -----------------------------------------------------------------------------


def test_sh_flip_signs_table():
    expected = [1, -1, -1, 1, -1, 1, 1, -1, 1, -1, 1, -1, -1, 1, -1, 1]
    np.testing.assert_array_equal(sh_axis_flip_signs(3), expected)
    np.testing.assert_array_equal(sh_axis_flip_signs(1), expected[:4])
    np.testing.assert_array_equal(sh_axis_flip_signs(2, flip=(1, 1, 1)), np.ones(9))


@pytest.mark.parametrize("flip", [(1, -1, -1), (-1, 1, 1), (1, 1, -1)])
def test_sh_flip_preserves_colour_property(flip):
    """Colour at d with the original coefficients == colour at D d with the flipped ones."""
    rng = np.random.default_rng(0)
    sh = rng.normal(size=(500, 16, 3))
    dirs = rng.normal(size=(500, 3))
    flip = np.asarray(flip, dtype=np.float64)
    flipped = sh * sh_axis_flip_signs(3, flip)[None, :, None]
    np.testing.assert_allclose(sh_colour(flipped, dirs * flip), sh_colour(sh, dirs), atol=1e-12)
    # and the signs are not trivial: without them the colours differ
    assert not np.allclose(sh_colour(sh, dirs * flip), sh_colour(sh, dirs))


def decode_rub_payload(buf, n, degree):
    """Read the SPZ arrays as stored (RUB axes, no conversion) - an independent minimal decoder."""
    off = 16
    pos = np.frombuffer(buf, np.uint8, n * 9, off).reshape(n, 3, 3).astype(np.int64)
    off += n * 9 + n * 7  # skip alphas, colours, scales
    fixed = pos[..., 0] | pos[..., 1] << 8 | pos[..., 2] << 16
    fixed = np.where(fixed >= 1 << 23, fixed - (1 << 24), fixed)
    rot = np.frombuffer(buf, "<u4", n, off)
    off += n * 4
    k = (degree + 1) ** 2
    rest = (np.frombuffer(buf, np.uint8, n * (k - 1) * 3, off).reshape(n, k - 1, 3) - 128.0) / 128
    return fixed / 4096.0, unpack_quats_smallest_three(rot)[:, [3, 0, 1, 2]], rest


def test_file_contents_are_in_rub_axes(tmp_path):
    d = random_splats(300, sh_degree=3, seed=8)
    path = tmp_path / "m.spz"
    write_spz(path, d)
    pos, quats_rub, rest = decode_rub_payload(payload(path), 300, 3)
    # positions: (x, -y, -z)
    np.testing.assert_allclose(pos, d.means * D, atol=2.5e-4)
    # rotations: R_rub = D R D
    r_rub = quat_to_matrix(quats_rub)
    r_cv = quat_to_matrix(d.quats)
    np.testing.assert_allclose(r_rub, np.diag(D) @ r_cv @ np.diag(D), atol=0.01)
    # SH: the stored coefficients evaluated at the RUB direction give the OpenCV colour
    rng = np.random.default_rng(2)
    dirs = rng.normal(size=(300, 3))
    sh_rub = np.concatenate([d.sh[:, :1].astype(np.float64), rest], axis=1)
    col_rub = sh_colour(sh_rub, dirs * D)
    col_cv = sh_colour(d.sh.astype(np.float64), dirs)
    # SH quantisation error (<= 8.5/128 per coefficient) times sum |basis| bounds the difference
    bound = 8.5 / 128 * np.abs(sh_basis(dirs / np.linalg.norm(dirs, axis=1, keepdims=True))).sum(1)
    assert np.all(np.abs(col_rub - col_cv) <= bound[:, None] + 1e-9)
    # with the signs ignored, the colours would be far off
    assert np.abs(sh_colour(d.sh.astype(np.float64), dirs * D) - col_cv).max() > 0.3


# --- quaternion packing --------------------------------------------------------------------------


def test_smallest_three_round_trip_and_identity():
    rng = np.random.default_rng(1)
    q = normalized_quats(rng.normal(size=(2000, 4)))
    q[:5] = [[1, 0, 0, 0], [0, -1, 0, 0], [0.5, 0.5, -0.5, -0.5], [0, 0, 0, -1], [-0.6, 0, 0.8, 0]]
    xyzw = q[:, [1, 2, 3, 0]]
    back = unpack_quats_smallest_three(pack_quats_smallest_three(xyzw))[:, [3, 0, 1, 2]]
    assert quat_angle_deg(back, q).max() < 0.3
    np.testing.assert_allclose(np.linalg.norm(back, axis=1), 1.0, atol=1e-6)
    identity = pack_quats_smallest_three(np.array([[0.0, 0.0, 0.0, 1.0]]))
    assert identity[0] == 3 << 30  # largest is w (index 3 in xyzw), the rest zero


# --- older versions ------------------------------------------------------------------------------


def make_legacy_spz(version, means_rub, quats_xyzw_w_pos, n, alphas=128, colours=128, scales=160):
    header = struct.pack("<IIIBBBB", MAGIC, version, n, 0, 12, 0, 0)
    if version == 1:
        pos = np.asarray(means_rub, "<f2").tobytes()
    else:
        fixed = np.round(np.asarray(means_rub) * 4096).astype("<i4").reshape(-1, 1).view(np.uint8)
        pos = np.ascontiguousarray(fixed[:, :3]).tobytes()
    rot = np.clip(np.round(np.asarray(quats_xyzw_w_pos)[:, :3] * 127.5 + 127.5), 0, 255)
    body = (pos + bytes([alphas]) * n + bytes([colours]) * 3 * n + bytes([scales]) * 3 * n
            + rot.astype(np.uint8).tobytes())
    return gzip.compress(header + body)


@pytest.mark.parametrize("version", [1, 2])
def test_reads_versions_1_and_2(tmp_path, version):
    means_rub = np.array([[1.0, 2.0, -3.0], [0.25, -0.5, 4.0]])
    angle = 0.3
    q_xyzw = np.array([[0, np.sin(angle), 0, np.cos(angle)], [0, 0, 0, 1.0]])  # about y (RUB)
    path = tmp_path / f"v{version}.spz"
    path.write_bytes(make_legacy_spz(version, means_rub, q_xyzw, 2))
    r = read_spz(path)
    np.testing.assert_allclose(r.means, means_rub * D, atol=2e-3)
    expected_wxyz = np.array([[np.cos(angle), 0, -np.sin(angle), 0], [1, 0, 0, 0]])
    assert quat_angle_deg(r.quats, expected_wxyz).max() < 1.0
    np.testing.assert_allclose(r.log_scales, 0.0)
    np.testing.assert_allclose(sigmoid(r.logit_opacities), 128 / 255, atol=1e-6)
    np.testing.assert_allclose(r.sh[:, 0], (128 / 255 - 0.5) / 0.15, atol=1e-6)


# --- bad files and values ------------------------------------------------------------------------


def test_wrong_magic_and_versions(tmp_path):
    good = gzip.decompress(encode_spz(random_splats(3, sh_degree=0)))
    path = tmp_path / "bad.spz"
    path.write_bytes(gzip.compress(b"XXXX" + good[4:]))
    with pytest.raises(SplatFileError, match=r"bad\.spz.*magic"):
        read_spz(path)
    for version in (0, 4, 99):
        path.write_bytes(gzip.compress(good[:4] + struct.pack("<I", version) + good[8:]))
        with pytest.raises(SplatFileError, match=rf"bad\.spz.*version {version}"):
            read_spz(path)
    path.write_bytes(good)  # header not gzipped (as SPZ v4 writers do)
    with pytest.raises(SplatFileError, match=r"bad\.spz.*version 3"):
        read_spz(path)


def test_truncated_and_corrupt(tmp_path):
    raw = encode_spz(random_splats(50, sh_degree=3))
    inner = gzip.decompress(raw)
    path = tmp_path / "bad.spz"
    cases = [
        raw[: len(raw) // 2],  # truncated gzip stream
        raw[:5],
        b"",
        b"not gzip at all, just text",
        gzip.compress(inner[:-1]),  # one byte short
        gzip.compress(inner[:10]),  # shorter than the header
        gzip.compress(inner + b"\0"),  # trailing data
        gzip.compress(inner[:12] + b"\x05" + inner[13:]),  # SH degree 5
    ]
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0xFF  # corrupt deflate data / CRC
    cases.append(bytes(flipped))
    for data in cases:
        path.write_bytes(data)
        with pytest.raises(SplatFileError) as e:
            read_spz(path)
        assert "bad.spz" in str(e.value)


def test_empty_model_raises(tmp_path):
    path = tmp_path / "empty.spz"
    path.write_bytes(gzip.compress(struct.pack("<IIIBBBB", MAGIC, 3, 0, 0, 12, 0, 0)))
    with pytest.raises(SplatFileError, match="empty"):
        read_spz(path)


def test_positions_out_of_range_refused_without_output(tmp_path):
    d = random_splats(4, sh_degree=0).copy()
    d.means[2, 1] = 5000.0
    path = tmp_path / "far.spz"
    with pytest.raises(SplatFileError, match="range"):
        write_spz(path, d)
    assert list(tmp_path.iterdir()) == []


def test_decode_from_memory_matches_file(tmp_path):
    d = random_splats(20, sh_degree=1, seed=9)
    r1 = decode_spz("<mem>", encode_spz(d))
    path = tmp_path / "m.spz"
    write_spz(path, d)
    r2 = read_spz(path)
    np.testing.assert_array_equal(r1.sh, r2.sh)
    assert isinstance(r1, SplatData)

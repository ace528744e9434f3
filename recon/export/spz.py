"""Niantic SPZ (gzip-compressed, quantised splats). We write version 3, read versions 1-3.

Decompressed layout (little-endian)::

    header, 16 bytes: uint32 magic 0x5053474E, uint32 version, uint32 count N,
                      uint8 sh_degree, uint8 fractional_bits (12), uint8 flags (1 = antialiased),
                      uint8 reserved (0)
    positions  N x 3 x 3 bytes   24-bit signed fixed point, value * 2^fractional_bits
                                 (version 1: N x 3 x float16)
    alphas     N bytes           sigmoid(opacity) * 255
    colours    N x 3 bytes       DC * 0.15 * 255 + 127.5
    scales     N x 3 bytes       (log_scale + 10) * 16
    rotations  N x 4 bytes       v3 "smallest three" uint32 (see :func:`pack_quats_smallest_three`)
                                 (versions 1-2: N x 3 bytes, xyz * 127.5 + 127.5 with w >= 0)
    sh         N x (K-1) x 3     coefficient-major, channel-minor; round(x * 128) + 128, snapped to
                                 buckets of 8 (degree 1, 5 bits) or 16 (degrees 2-3, 4 bits)

All 8-bit fields round half away from zero and clip into [0, 255].

Axes: SPZ is RUB (x right, y up, z back); we are OpenCV RDF (x right, y down, z forward). The map is
the reflection-free axis flip D = diag(1, -1, -1) (a 180 degree turn about x), so positions become
(x, -y, -z), a rotation R becomes D R D, i.e. quaternion (w, x, y, z) -> (w, x, -y, -z), and each
real SH basis function Y(d) picks up the sign Y(D d) / Y(d), +1 or -1 by its parity in y and z
(:func:`sh_axis_flip_signs`). D is its own inverse, so reading applies the same flips.
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib

import numpy as np

from recon.core.atomic import atomic_open
from recon.core.splat_data import MAX_SH_DEGREE, SplatData, normalized_quats, num_sh_bases, sigmoid

from .splats import SplatFileError, logit_clamped, read_regular_file, require_writable

MAGIC = 0x5053474E
WRITE_VERSION = 3
READ_VERSIONS = (1, 2, 3)
HEADER = struct.Struct("<IIIBBBB")
FRACTIONAL_BITS = 12
FLAG_ANTIALIASED = 0x1
FLAG_EXTENSIONS = 0x2
COLOR_SCALE = 0.15
SH1_BUCKET = 1 << (8 - 5)  # 5 bits for degree-1 coefficients
SH_REST_BUCKET = 1 << (8 - 4)  # 4 bits for degrees 2 and 3
OPENCV_TO_RUB = np.array([1.0, -1.0, -1.0])
_SQRT1_2 = np.sqrt(0.5)
MAX_DEFLATE_RATIO = 1032  # deflate's best case: a 258-byte match in about 2 bits (zlib technical notes)
# a payload this big from a stream compressed more than PLAUSIBLE_RATIO : 1 is refused: quantized splats of a
# real scene compress a few times at most, so only a bomb reaches it (a 1 MB file declaring 50M splats
# would otherwise inflate to 1 GB and decode to 6 GB)
PLAUSIBLE_RATIO = 200
PLAUSIBLE_CHECK_BYTES = 64 << 20
READ_CHUNK = 16 << 20
GZIP_LEVEL = 1  # scripts/bench_export.py, 1M splats SH 3: level 1 2.8 s / 42.3 MB, level 6 20.4 s / 41.0 MB

# Real SH basis functions of degrees 1-3 (degree-major, m = -l..l), as the monomials x^a y^b z^c of
# their polynomial forms (constant factors dropped; they do not affect the sign under axis flips).
_SH_MONOMIALS: tuple[tuple[tuple[int, int, int], ...], ...] = (
    # l = 1: -y, z, -x
    ((0, 1, 0),), ((0, 0, 1),), ((1, 0, 0),),
    # l = 2: xy, yz, 2z^2 - x^2 - y^2, xz, x^2 - y^2
    ((1, 1, 0),), ((0, 1, 1),), ((0, 0, 2), (2, 0, 0), (0, 2, 0)), ((1, 0, 1),),
    ((2, 0, 0), (0, 2, 0)),
    # l = 3: y(3x^2 - y^2), xyz, y(4z^2 - x^2 - y^2), z(2z^2 - 3x^2 - 3y^2), x(4z^2 - x^2 - y^2),
    #        z(x^2 - y^2), x(x^2 - 3y^2)
    ((2, 1, 0), (0, 3, 0)), ((1, 1, 1),), ((0, 1, 2), (2, 1, 0), (0, 3, 0)),
    ((0, 0, 3), (2, 0, 1), (0, 2, 1)), ((1, 0, 2), (3, 0, 0), (1, 2, 0)),
    ((2, 0, 1), (0, 2, 1)), ((3, 0, 0), (1, 2, 0)),
)


def sh_axis_flip_signs(degree: int, flip=OPENCV_TO_RUB) -> np.ndarray:
    """Sign [K] for each SH coefficient when the axes are flipped by diag(flip) (entries +-1).

    Y_i(D d) = s_i Y_i(d) with s_i the product of flip^exponent over any monomial of Y_i (every
    monomial of a basis function has the same parity per axis, checked here). Coefficients c_i of
    a function f(d) = sum c_i Y_i(d) in the flipped frame are s_i c_i. Entry 0 (DC) is +1.
    """
    flip = np.asarray(flip, dtype=np.float64)
    signs = [1.0]
    for monomials in _SH_MONOMIALS[: num_sh_bases(degree) - 1]:
        per_monomial = {float(np.prod(flip ** np.array(e))) for e in monomials}
        if len(per_monomial) != 1:
            raise AssertionError(f"SH monomials {monomials} have mixed parity")
        signs.append(per_monomial.pop())
    return np.array(signs, dtype=np.float32)


def quats_opencv_to_rub(quats_wxyz: np.ndarray) -> np.ndarray:
    """(w, x, y, z) -> (w, x, -y, -z): conjugation by diag(1, -1, -1). Self-inverse."""
    return np.asarray(quats_wxyz) * np.array([1.0, 1.0, -1.0, -1.0])


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """Round to nearest, ties away from zero (C ``round``), as float64."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _to_u8(x: np.ndarray) -> np.ndarray:
    """Round half away from zero, clip to [0, 255], uint8."""
    return np.clip(_round_half_away(x), 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------------------ packing


def pack_positions(means_rub: np.ndarray, path, fractional_bits: int = FRACTIONAL_BITS) -> bytes:
    """[N, 3] -> N x 9 bytes of 24-bit little-endian two's complement fixed point."""
    fixed = _round_half_away(np.asarray(means_rub, np.float64) * (1 << fractional_bits))
    limit = 1 << 23
    if np.any(fixed >= limit) or np.any(fixed < -limit):
        raise SplatFileError(path, f"positions out of the SPZ range +-{limit >> fractional_bits} "
                                   f"(24-bit fixed point, {fractional_bits} fractional bits)")
    as_bytes = fixed.astype("<i4").reshape(-1, 1).view(np.uint8)  # [N*3, 4], little-endian
    return np.ascontiguousarray(as_bytes[:, :3]).tobytes()


def pack_quats_smallest_three(quats_xyzw: np.ndarray) -> np.ndarray:
    """Unit quaternions [N, 4] in (x, y, z, w) order -> uint32 [N].

    Top 2 bits: index i of the largest |component| (first on ties), which is made positive by
    negating the quaternion. Then for the other three components in increasing index order, each
    10 bits ``sign << 9 | round(511 |q_j| / sqrt(1/2))``, first one in the highest bits.
    """
    q = np.asarray(quats_xyzw, dtype=np.float64)
    largest = np.argmax(np.abs(q), axis=1)
    q = q * np.where(q[np.arange(len(q)), largest] < 0, -1.0, 1.0)[:, None]
    others = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[largest]  # [N, 3]
    comp = largest.astype(np.uint32)
    for j in range(3):
        v = q[np.arange(len(q)), others[:, j]]
        mag = np.minimum(np.floor(511.0 * np.abs(v) / _SQRT1_2 + 0.5), 511).astype(np.uint32)
        comp = (comp << np.uint32(10)) | ((v < 0).astype(np.uint32) << np.uint32(9)) | mag
    return comp


def quantize_sh_rest(rest: np.ndarray) -> np.ndarray:
    """SH coefficients 1..K-1 [N, K-1, 3] -> uint8, round(x * 128) + 128 snapped to buckets."""
    q = _round_half_away(np.asarray(rest, np.float64) * 128.0) + 128.0
    bucket = np.full(rest.shape[1], SH_REST_BUCKET, dtype=np.float64)
    bucket[:3] = SH1_BUCKET
    bucket = bucket[None, :, None]
    q = np.floor((q + bucket // 2) / bucket) * bucket
    return np.clip(q, 0, 255).astype(np.uint8)


def encode_spz_payload(data: SplatData, path) -> bytes:
    """Uncompressed SPZ v3 bytes (header + attribute arrays) for ``data`` (OpenCV in, RUB out)."""
    n = len(data)
    flags = FLAG_ANTIALIASED if data.antialiased else 0
    header = HEADER.pack(MAGIC, WRITE_VERSION, n, data.sh_degree, FRACTIONAL_BITS, flags, 0)
    quats = quats_opencv_to_rub(normalized_quats(data.quats))[:, [1, 2, 3, 0]]  # -> xyzw
    rest = data.sh[:, 1:, :] * sh_axis_flip_signs(data.sh_degree)[1:, None]
    parts = [
        header,
        pack_positions(data.means * OPENCV_TO_RUB, path),
        _to_u8(sigmoid(data.logit_opacities) * 255.0).tobytes(),
        _to_u8(data.sh[:, 0, :].astype(np.float64) * (COLOR_SCALE * 255.0) + 127.5).tobytes(),
        _to_u8((data.log_scales.astype(np.float64) + 10.0) * 16.0).tobytes(),
        pack_quats_smallest_three(quats).astype("<u4").tobytes(),
        quantize_sh_rest(rest).tobytes(),
    ]
    return b"".join(parts)


def encode_spz(data: SplatData, path="<memory>") -> bytes:
    """Gzip-compressed SPZ v3 file contents."""
    return gzip.compress(encode_spz_payload(data, path), compresslevel=GZIP_LEVEL, mtime=0)


def write_spz(path: str | os.PathLike, data: SplatData, force: bool = False) -> None:
    """Write ``data`` to ``path`` as SPZ version 3, atomically (empty / NaN models refused)."""
    require_writable(path, data)
    payload = encode_spz(data, path)
    with atomic_open(path, force=force) as f:
        f.write(payload)


# ------------------------------------------------------------------------------------------ unpacking


def unpack_positions(raw: np.ndarray, fractional_bits: int, version: int) -> np.ndarray:
    """Position bytes -> float64 [N, 3] in SPZ (RUB) axes; float16 in version 1."""
    if version == 1:
        return raw.view("<f2").reshape(-1, 3).astype(np.float64)
    b = raw.reshape(-1, 3).astype(np.int32)
    fixed = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
    fixed = np.where(fixed & 0x800000, fixed - (1 << 24), fixed)
    return fixed.reshape(-1, 3).astype(np.float64) / (1 << fractional_bits)


def unpack_quats_smallest_three(comp: np.ndarray) -> np.ndarray:
    """uint32 [N] -> unit quaternions [N, 4] (x, y, z, w); inverse of the packer."""
    comp = comp.astype(np.uint32)
    largest = (comp >> np.uint32(30)).astype(np.int64)
    others = np.array([[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]])[largest]
    q = np.zeros((len(comp), 4))
    rows = np.arange(len(comp))
    for j in (2, 1, 0):  # last-packed component sits in the lowest bits
        mag = (comp & np.uint32(511)).astype(np.float64)
        neg = ((comp >> np.uint32(9)) & np.uint32(1)).astype(bool)
        comp = comp >> np.uint32(10)
        q[rows, others[:, j]] = np.where(neg, -1.0, 1.0) * _SQRT1_2 * mag / 511.0
    q[rows, largest] = np.sqrt(np.maximum(0.0, 1.0 - (q * q).sum(axis=1)))
    return q


def unpack_quats_first_three(raw: np.ndarray) -> np.ndarray:
    """Versions 1-2: 3 bytes xyz [N, 3] -> quaternions [N, 4] (x, y, z, w), w >= 0."""
    xyz = raw.reshape(-1, 3).astype(np.float64) / 127.5 - 1.0
    w = np.sqrt(np.maximum(0.0, 1.0 - (xyz * xyz).sum(axis=1)))
    return np.concatenate([xyz, w[:, None]], axis=1)


def _parse_header(path, buf: bytes) -> tuple[int, int, int, int, int]:
    """(version, count, sh_degree, fractional_bits, flags); errors for bad magic/version/degree."""
    if len(buf) < HEADER.size:
        raise SplatFileError(path, f"truncated SPZ: {len(buf)} bytes, shorter than the header")
    magic, version, n, degree, frac, flags, _ = HEADER.unpack_from(buf)
    if magic != MAGIC:
        raise SplatFileError(path, f"not an SPZ file (wrong magic 0x{magic:08X}, "
                                   f"expected 0x{MAGIC:08X})")
    if version not in READ_VERSIONS:
        raise SplatFileError(path, f"unsupported SPZ version {version} (this reader handles 1-3)")
    if degree > MAX_SH_DEGREE:
        raise SplatFileError(path, f"unsupported SH degree {degree} (max {MAX_SH_DEGREE})")
    if flags & FLAG_EXTENSIONS:
        raise SplatFileError(path, "SPZ extensions (flag 0x2) are not supported")
    if n == 0:
        raise SplatFileError(path, "empty model (0 splats)")
    if frac > 23:
        raise SplatFileError(path, f"corrupt SPZ header: {frac} fractional bits")
    return version, n, degree, frac, flags


def _section_sizes(version: int, n: int, degree: int) -> list[tuple[str, int]]:
    """Byte sizes of the attribute arrays in file order."""
    return [
        ("positions", n * 3 * (2 if version == 1 else 3)),
        ("alphas", n),
        ("colors", n * 3),
        ("scales", n * 3),
        ("rotations", n * (4 if version >= 3 else 3)),
        ("sh", n * (num_sh_bases(degree) - 1) * 3),
    ]


def _payload_size(version: int, n: int, degree: int) -> int:
    """Bytes of the decompressed payload (header + attribute arrays) the header declares."""
    return HEADER.size + sum(s for _, s in _section_sizes(version, n, degree))


def _split_sections(path, buf: bytes, version: int, n: int, degree: int) -> dict[str, np.ndarray]:
    """Slice the attribute arrays (uint8) after the header; errors if the size does not match."""
    sizes = _section_sizes(version, n, degree)
    expected = _payload_size(version, n, degree)
    if len(buf) != expected:
        what = "truncated" if len(buf) < expected else "corrupt (trailing data)"
        raise SplatFileError(path, f"{what} SPZ: {len(buf)} bytes after decompression, "
                                   f"expected {expected} for {n} splats of SH degree {degree}")
    out, offset = {}, HEADER.size
    for name, size in sizes:
        out[name] = np.frombuffer(buf, dtype=np.uint8, count=size, offset=offset)
        offset += size
    return out


def _refuse_uncompressed_header(path, raw: bytes) -> None:
    """An SPZ header that is not gzipped (SPZ version 4 stores it uncompressed) gets its own message."""
    if len(raw) >= 8 and raw[:4] == struct.pack("<I", MAGIC):
        version = struct.unpack_from("<I", raw, 4)[0]
        raise SplatFileError(path, f"unsupported SPZ version {version} (uncompressed header; "
                                   f"this reader handles gzip-compressed versions 1-3)")


def _check_declared_size(path, compressed: int, n: int, degree: int, expected: int) -> None:
    """Refuse a header that declares more bytes than ``compressed`` bytes of deflate can hold."""
    if expected > compressed * MAX_DEFLATE_RATIO:
        raise SplatFileError(
            path, f"corrupt SPZ header: it declares {n:,} splats of SH degree {degree} "
                  f"({expected:,} bytes), more than a {compressed:,}-byte gzip stream can hold; "
                  f"the file is damaged or not an SPZ model")
    if expected > PLAUSIBLE_CHECK_BYTES and expected > compressed * PLAUSIBLE_RATIO:
        raise SplatFileError(
            path, f"corrupt SPZ header: it declares {n:,} splats of SH degree {degree} "
                  f"({expected:,} bytes) in a {compressed:,}-byte file, a compression of more than "
                  f"{PLAUSIBLE_RATIO}:1 that real splats never reach (a gzip bomb); the file is damaged")


def _read_at_most(stream, size: int) -> bytes:
    """Up to ``size`` bytes of ``stream``, read in chunks: ``read(size)`` would allocate ``size`` bytes
    first, even for a stream that ends after a few."""
    parts, left = [], size
    while left > 0:
        part = stream.read(min(left, READ_CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _gunzip(path, raw: bytes) -> bytes:
    """Decompress at most the payload size the SPZ header declares (+1 byte to detect excess).

    Memory stays bounded by that size, which is itself bounded by ``len(raw) * MAX_DEFLATE_RATIO``,
    so a gzip bomb is refused after reading one byte past the declared end. gzip/zlib errors,
    bad headers and size mismatches raise :class:`SplatFileError`.
    """
    _refuse_uncompressed_header(path, raw)
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw), mode="rb") as stream:
            head = stream.read(HEADER.size)
            version, n, degree, _, _ = _parse_header(path, head)
            expected = _payload_size(version, n, degree)
            _check_declared_size(path, len(raw), n, degree, expected)
            body = _read_at_most(stream, expected - HEADER.size + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise SplatFileError(path, f"corrupt or truncated SPZ (gzip: {exc})") from exc
    if HEADER.size + len(body) > expected:
        raise SplatFileError(
            path, f"corrupt SPZ: decompresses to more than the {expected:,} bytes its header "
                  f"declares for {n:,} splats of SH degree {degree} (trailing data or a gzip "
                  f"bomb); refusing to read further")
    return head + body


def decode_spz(path, raw: bytes) -> SplatData:
    """Compressed SPZ bytes -> :class:`SplatData` in OpenCV axes."""
    buf = _gunzip(path, raw)
    version, n, degree, frac, flags = _parse_header(path, buf)
    s = _split_sections(path, buf, version, n, degree)
    if version >= 3:
        xyzw = unpack_quats_smallest_three(s["rotations"].view("<u4"))
    else:
        xyzw = unpack_quats_first_three(s["rotations"])
    quats = quats_opencv_to_rub(xyzw[:, [3, 0, 1, 2]])  # RUB -> OpenCV (self-inverse)
    k = num_sh_bases(degree)
    sh = np.empty((n, k, 3), dtype=np.float64)
    sh[:, 0] = (s["colors"].reshape(n, 3) / 255.0 - 0.5) / COLOR_SCALE
    sh[:, 1:] = (s["sh"].reshape(n, k - 1, 3) - 128.0) / 128.0
    sh *= sh_axis_flip_signs(degree)[None, :, None]
    return SplatData(
        means=unpack_positions(s["positions"], frac, version) * OPENCV_TO_RUB,
        quats=quats,
        log_scales=s["scales"].reshape(n, 3) / 16.0 - 10.0,
        logit_opacities=logit_clamped(s["alphas"] / 255.0),
        sh=sh,
        antialiased=bool(flags & FLAG_ANTIALIASED),
    )


def read_spz(path: str | os.PathLike) -> SplatData:
    """Read an SPZ file (versions 1-3) into :class:`SplatData` (OpenCV axes)."""
    return decode_spz(path, read_regular_file(path))

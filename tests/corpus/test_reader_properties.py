"""Property tests of the reader rules (hypothesis): the JSON depth scan and NaN refusal of recon/core/limits.py,
the .npy header check, the PLY header counts and the COLMAP binary records. Generated inputs, a bounded
number of examples, derandomized (the same examples on every run, no example database): fast and
deterministic in CI."""

from __future__ import annotations

import io
import json
import math
import struct
import tempfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is a test dependency (pip install -e .[test])")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from recon.core.errors import InputFileError  # noqa: E402
from recon.core.limits import check_npy_header, json_depth, parse_json  # noqa: E402

FAST = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# ---------------------------------------------------------------------------------------------- JSON

json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | \
    st.floats(allow_nan=False, allow_infinity=False, width=64) | st.text(alphabet='ab[]{}"\\,: \n\u00e9', max_size=8)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(alphabet='xy[]{}"\\', max_size=4), inner, max_size=4),
                           max_leaves=30)


def depth(value) -> int:
    """Nesting depth of a JSON value as json_depth counts it: each list or object one level."""
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    return 0


@FAST
@given(json_values, st.booleans())
def test_json_depth_is_the_nesting_depth_and_parse_json_round_trips(value, indent):
    """Brackets inside strings (escaped quotes too) never count; a document within the limit parses back."""
    text = json.dumps(value, indent=1 if indent else None, ensure_ascii=False)
    assert json_depth(text.encode()) == depth(value)
    assert parse_json(text.encode(), "x.json") == value


@FAST
@given(st.integers(1, 3000), st.sampled_from("[{"))
def test_too_deep_json_is_one_line_naming_the_file(levels, bracket):
    close = {"[": "]", "{": "}"}[bracket]
    inner = '"k": ' if bracket == "{" else ""
    text = (bracket + inner) * (levels - 1) + bracket + close * levels  # innermost is empty
    doc = text.encode()
    assert json_depth(doc) == levels
    if levels <= 512:
        parse_json(doc, "deep.json")
    else:
        with pytest.raises(InputFileError, match=r"deep\.json: .*nests \d+ levels deep") as info:
            parse_json(doc, "deep.json")
        assert "\n" not in str(info.value)


non_finite_literals = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "2E+308"])


@FAST
@given(json_values, non_finite_literals)
def test_parse_json_never_returns_a_non_finite_number_unless_allowed(value, literal):
    """A NaN, Infinity or overflowing literal (1e400 reads as inf) anywhere is refused in one line naming the
    file, unless the caller allows them (then it comes back as the float it spells)."""
    doc = f'{{"v": {json.dumps(value)}, "bad": [1.5, {literal}]}}'.encode()
    with pytest.raises(InputFileError, match=r"n\.json: .*not a (finite )?number") as info:
        parse_json(doc, "n.json")
    assert "\n" not in str(info.value)
    got = parse_json(doc, "n.json", allow_nan=True)["bad"][1]
    assert not math.isfinite(got)


def _finite_everywhere(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_finite_everywhere(v) for v in value)
    if isinstance(value, dict):
        return all(_finite_everywhere(v) for v in value.values())
    return True


@FAST
@given(st.binary(max_size=200))
def test_parse_json_on_any_bytes_is_a_value_or_one_line(data):
    """Arbitrary bytes: a finite JSON value or an InputFileError naming the file, nothing else."""
    try:
        value = parse_json(data, "any.json")
    except InputFileError as err:
        assert str(err).startswith("any.json: ") and "\n" not in str(err)
    else:
        assert _finite_everywhere(value)


# --------------------------------------------------------------------------------------------- .npy

npy_dtypes = st.sampled_from(["<f4", "<f8", ">f8", "<i8", "u1", "<c8", "|b1"])
npy_shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@FAST
@given(npy_dtypes, npy_shapes, st.integers(-40, 40), st.booleans())
def test_npy_header_check_passes_exactly_when_the_data_is_all_there(dtype, shape, delta, fortran):
    """check_npy_header accepts a .npy iff its body is the declared shape x item size (then np.load gives that
    array), and refuses every shorter or longer body in one line naming the file, before allocating."""
    arr = np.zeros(shape, dtype)
    buf = io.BytesIO()
    np.save(buf, np.asfortranarray(arr) if fortran else arr)
    data = buf.getvalue()
    body = len(data) - len(data[:data.index(b"\n") + 1])
    cut = max(len(data) - body, len(data) + delta)
    data = data[:cut] if delta <= 0 else data + bytes(delta)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.npy"
        path.write_bytes(data)
        if delta == 0 or (delta < 0 and body == 0):
            assert check_npy_header(path) == (shape, np.dtype(dtype))
            assert np.load(path).shape == shape
        else:
            with pytest.raises(InputFileError, match=r"a\.npy: .*declares an array of shape"):
                check_npy_header(path)


@FAST
@given(st.binary(max_size=160), st.sampled_from([b"\x93NUMPY\x01\x00", b"\x93NUMPY\x02\x00", b"\x93NUMPY\x03\x00",
                                                 b""]))
def test_npy_header_check_on_any_bytes_is_a_shape_or_one_line(tail, magic):
    """Random header bytes (after a real magic or none): (shape, dtype) whose bytes are there, or an InputFileError
    naming the file; never numpy's own exception."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.npy"
        path.write_bytes(magic + tail)
        try:
            shape, dtype = check_npy_header(path)
        except InputFileError as err:
            assert "r.npy: " in str(err) and "\n" not in str(err)
        else:
            assert int(np.prod(shape)) * dtype.itemsize <= len(magic + tail)


# ---------------------------------------------------------------------------------------------- PLY

PLY_PROPS = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
             "rot_0", "rot_1", "rot_2", "rot_3"]


@FAST
@given(st.integers(-5, 10**12), st.sampled_from(["binary_little_endian", "binary_big_endian", "ascii"]),
       st.integers(0, 6), st.sampled_from(["float", "double", "uchar", "int", "list uchar int", "bogus"]),
       st.binary(max_size=64))
def test_ply_header_counts_never_outrun_the_file(count, fmt, rows, ptype, junk):
    """A splat PLY whose header declares ``count`` vertices over ``rows`` rows of data (one property's type
    varied): read_ply loads it (and then the count is what the body holds) or refuses it in one line naming the
    file; it never allocates what the header declares beyond the file."""
    import tracemalloc

    from recon.export import read_ply
    from recon.export.splats import SplatFileError

    lines = ["ply", f"format {fmt} 1.0", f"element vertex {count}"]
    lines += [f"property {ptype if p == 'opacity' else 'float'} {p}" for p in PLY_PROPS] + ["end_header", ""]
    if fmt == "ascii":
        body = b"".join(b" ".join([b"0.5"] * len(PLY_PROPS)) + b"\n" for _ in range(rows))
    else:
        body = struct.pack("<f", 0.5) * (len(PLY_PROPS) * rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.ply"
        path.write_bytes("\n".join(lines).encode() + body + junk)
        tracemalloc.start()
        try:
            data = read_ply(path)
        except SplatFileError as err:
            assert "h.ply" in str(err) and "\n" not in str(err)
        else:
            assert len(data.means) == count <= rows + len(junk)
        finally:
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    assert peak < 16 << 20


# ------------------------------------------------------------------------------------- COLMAP binary

finite = st.floats(-1e6, 1e6, allow_nan=False, width=64)


@st.composite
def colmap_models(draw):
    from recon.data.colmap import CAMERA_MODELS, ColmapCamera, ColmapImage, ColmapModel, ColmapPoints

    n_cams = draw(st.integers(1, 3))
    cams = {}
    for cid in range(1, n_cams + 1):
        name, n_params = CAMERA_MODELS[draw(st.sampled_from(sorted(CAMERA_MODELS)))]
        cams[cid] = ColmapCamera(cid, name, draw(st.integers(1, 4000)), draw(st.integers(1, 4000)),
                                 np.array(draw(st.lists(finite, min_size=n_params, max_size=n_params))))
    images = {}
    for iid in range(1, draw(st.integers(0, 3)) + 1):
        n = draw(st.integers(0, 4))
        images[iid] = ColmapImage(iid, np.array(draw(st.lists(finite, min_size=4, max_size=4))),
                                  np.array(draw(st.lists(finite, min_size=3, max_size=3))),
                                  draw(st.integers(1, n_cams)), draw(st.text("ab_.-/\u00e9", min_size=1, max_size=8)),
                                  np.array(draw(st.lists(finite, min_size=2 * n, max_size=2 * n))).reshape(n, 2),
                                  np.array(draw(st.lists(st.integers(-1, 10**9), min_size=n, max_size=n)), np.int64))
    p = draw(st.integers(0, 4))
    tracks = [np.array(draw(st.lists(st.integers(0, 2**32 - 1), max_size=6).filter(lambda t: len(t) % 2 == 0)),
                       np.int64).reshape(-1, 2) for _ in range(p)]
    points = ColmapPoints(np.arange(1, p + 1, dtype=np.int64),
                          np.array(draw(st.lists(finite, min_size=3 * p, max_size=3 * p))).reshape(p, 3),
                          np.array(draw(st.lists(st.integers(0, 255), min_size=3 * p, max_size=3 * p)), np.uint8)
                          .reshape(p, 3), np.array(draw(st.lists(finite, min_size=p, max_size=p))), tracks)
    return ColmapModel(cams, images, points)


@FAST
@given(colmap_models(), st.data())
def test_colmap_binary_records_round_trip_and_any_cut_is_one_line(model, data):
    """Every COLMAP binary model written reads back equal; cut at any byte, or given a huge count in any 8-byte
    word, each file is refused in one line naming it (ColmapFormatError), never a traceback or a huge
    allocation."""
    from recon.data.colmap import ColmapFormatError, read_model, write_model

    with tempfile.TemporaryDirectory() as tmp:
        sparse = Path(tmp)
        write_model(model, sparse, ".bin")
        back = read_model(sparse, ".bin")
        assert [(c.id, c.model, c.width, c.height) for c in back.cameras.values()] == \
            [(c.id, c.model, c.width, c.height) for c in model.cameras.values()]
        for a, b in zip(back.images.values(), model.images.values()):
            assert (a.name, a.camera_id) == (b.name, b.camera_id)
            np.testing.assert_array_equal(a.qvec, b.qvec)
            np.testing.assert_array_equal(a.xys, b.xys)
            np.testing.assert_array_equal(a.point3D_ids, b.point3D_ids)
        np.testing.assert_array_equal(back.points.xyz, model.points.xyz)
        assert [t.tolist() for t in back.points.tracks] == [t.tolist() for t in model.points.tracks]
        name = data.draw(st.sampled_from(["cameras.bin", "images.bin", "points3D.bin"]))
        raw = (sparse / name).read_bytes()
        if data.draw(st.booleans()):
            edited = raw[:data.draw(st.integers(0, max(0, len(raw) - 1)))]
        else:
            off = data.draw(st.integers(0, max(0, len(raw) - 8)))
            edited = raw[:off] + struct.pack("<Q", data.draw(st.integers(2**20, 2**64 - 1))) + raw[off + 8:]
        (sparse / name).write_bytes(edited)
        try:
            read_model(sparse, ".bin")
        except ColmapFormatError as err:
            assert name in str(err) and "\n" not in str(err)

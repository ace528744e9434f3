"""3DGS PLY read/write: exact round trips, layout details, and bad files."""

import numpy as np
import pytest
from plyfile import PlyData, PlyElement

from recon.export.ply import property_names, read_ply, write_ply
from recon.export.splats import SplatFileError, random_splats

FIELDS = ("means", "quats", "log_scales", "logit_opacities", "sh")


def assert_same(a, b):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.antialiased == b.antialiased


def header_of(path) -> str:
    raw = path.read_bytes()
    return raw[: raw.index(b"end_header")].decode("ascii")


@pytest.mark.parametrize("degree", [0, 1, 2, 3])
@pytest.mark.parametrize("normals", [True, False])
def test_round_trip_is_exact(tmp_path, degree, normals):
    d = random_splats(200, sh_degree=degree, seed=degree)
    path = tmp_path / "m.ply"
    write_ply(path, d, normals=normals)
    header = header_of(path)
    assert "format binary_little_endian 1.0" in header
    assert ("property float nx" in header) == normals
    assert "SplatRenderMode" not in header
    r = read_ply(path)
    assert r.sh_degree == degree
    assert_same(r, d)


def test_property_order_matches_3dgs_layout(tmp_path):
    path = tmp_path / "m.ply"
    write_ply(path, random_splats(3, sh_degree=3))
    names = [line.split()[-1] for line in header_of(path).splitlines() if line.startswith("property")]
    assert names == property_names(3) and names == (
        ["x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"]
        + [f"f_rest_{i}" for i in range(45)]
        + ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"])


def test_mip_comment_written_and_read(tmp_path):
    path = tmp_path / "mip.ply"
    write_ply(path, random_splats(5, sh_degree=1, antialiased=True))
    assert "comment SplatRenderMode: mip" in header_of(path)
    assert read_ply(path).antialiased


def test_f_rest_is_channel_major_and_values_raw(tmp_path):
    d = random_splats(4, sh_degree=2)
    path = tmp_path / "m.ply"
    write_ply(path, d)
    v = PlyData.read(str(path))["vertex"].data
    m = 8  # rest coefficients per channel for degree 2
    for c in range(3):
        for j in range(m):
            np.testing.assert_array_equal(v[f"f_rest_{c * m + j}"], d.sh[:, 1 + j, c])
    np.testing.assert_array_equal(v["opacity"], d.logit_opacities)
    np.testing.assert_array_equal(v["rot_0"], d.quats[:, 0])  # w first, unnormalised
    np.testing.assert_array_equal(v["scale_2"], d.log_scales[:, 2])


def write_custom_ply(path, columns: dict, comments=()):
    n = len(next(iter(columns.values())))
    arr = np.empty(n, dtype=[(k, np.asarray(v).dtype.str) for k, v in columns.items()])
    for k, v in columns.items():
        arr[k] = v
    PlyData([PlyElement.describe(arr, "vertex")], text=False, comments=list(comments)).write(str(path))


def base_columns(n=6, n_rest=9, dtype="<f4"):
    rng = np.random.default_rng(1)
    names = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2"] + [f"f_rest_{i}" for i in range(n_rest)]
    names += ["opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"]
    return {k: rng.normal(size=n).astype(dtype) for k in names}


def test_reads_foreign_layout_double_extra_properties(tmp_path):
    cols = base_columns(dtype="<f8")
    cols = dict(reversed(list(cols.items())))  # different property order
    cols["red"] = np.zeros(6, np.uint8)  # an extra property to ignore
    path = tmp_path / "foreign.ply"
    write_custom_ply(path, cols, comments=["made elsewhere", "SplatRenderMode: mip"])
    r = read_ply(path)
    assert r.sh_degree == 1 and r.antialiased
    np.testing.assert_array_equal(r.means[:, 1], cols["y"].astype(np.float32))
    np.testing.assert_array_equal(r.sh[:, 2, 1], cols["f_rest_4"].astype(np.float32))  # G, coeff 2


@pytest.mark.parametrize("n_rest", [5, 15, 48])
def test_sh_count_mismatch_raises(tmp_path, n_rest):
    path = tmp_path / "bad_sh.ply"
    write_custom_ply(path, base_columns(n_rest=n_rest))
    with pytest.raises(SplatFileError, match="SH count mismatch") as e:
        read_ply(path)
    assert "bad_sh.ply" in str(e.value)


def test_gap_in_f_rest_numbering_raises(tmp_path):
    cols = base_columns(n_rest=9)
    cols["f_rest_9"] = cols.pop("f_rest_0")
    path = tmp_path / "gap.ply"
    write_custom_ply(path, cols)
    with pytest.raises(SplatFileError, match="numbered"):
        read_ply(path)


def test_missing_property_raises(tmp_path):
    cols = base_columns()
    del cols["rot_3"]
    path = tmp_path / "norot.ply"
    write_custom_ply(path, cols)
    with pytest.raises(SplatFileError, match="rot_3"):
        read_ply(path)


def test_empty_model_raises(tmp_path):
    path = tmp_path / "empty.ply"
    write_custom_ply(path, {k: v[:0] for k, v in base_columns().items()})
    with pytest.raises(SplatFileError, match="empty"):
        read_ply(path)


def test_truncated_and_corrupt_files_raise(tmp_path):
    good = tmp_path / "good.ply"
    write_ply(good, random_splats(50, sh_degree=3))
    raw = good.read_bytes()
    header_end = raw.index(b"end_header")
    bad = tmp_path / "bad.ply"
    for cut in (len(raw) - 1, len(raw) - 500, header_end + 20, header_end - 10, 40, 3, 0):
        bad.write_bytes(raw[:cut])
        with pytest.raises(SplatFileError) as e:
            read_ply(bad)
        assert "bad.ply" in str(e.value)
    bad.write_bytes(b"this is not a ply file at all\n" * 10)
    with pytest.raises(SplatFileError, match="bad.ply"):
        read_ply(bad)
    bad.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement face 1\nproperty uchar a\nend_header\n\x00")
    with pytest.raises(SplatFileError, match="vertex"):
        read_ply(bad)


def test_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_ply(tmp_path / "nope.ply")


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
def test_smallest_files_pass_the_count_check(tmp_path, fmt):
    """The declared-count check against the file size never refuses a complete file: the tightest
    ASCII one (single-character values, no final newline) and binary ones of every byte order."""
    names = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
             "rot_0", "rot_1", "rot_2", "rot_3"]
    header = "\n".join(["ply", f"format {fmt} 1.0", "element vertex 2"]
                       + [f"property float {n}" for n in names] + ["end_header", ""]).encode()
    if fmt == "ascii":
        body = b" ".join([b"1"] * 14) + b"\n" + b" ".join([b"1"] * 14)
    else:
        body = np.ones(28, dtype="<f4" if fmt.endswith("little_endian") else ">f4").tobytes()
    path = tmp_path / "tight.ply"
    path.write_bytes(header + body)
    d = read_ply(path)
    assert len(d) == 2 and np.all(d.means == 1.0)


def test_wrong_byte_order_is_one_line_and_real_value_ranges_load(tmp_path):
    """Issue 52: a header whose byte order is not the data's is refused naming the file and the byte order;
    the plausibility band is generous: large-ish trained values, exact zeros and a few outliers load."""
    rng = np.random.default_rng(0)
    n = 2000
    data = random_splats(n, sh_degree=3, seed=2)
    data.means = rng.uniform(-5e3, 5e3, (n, 3)).astype(np.float32)  # an unbounded capture's far points
    data.logit_opacities = rng.uniform(-60, 60, n).astype(np.float32)
    data.log_scales = rng.uniform(-25, 8, (n, 3)).astype(np.float32)
    data.quats[: n // 2] = [1.0, 0.0, 0.0, 0.0]  # exact zeros
    data.sh[:, 1:] = 0.0
    data.sh[:, 1:][::20] = 1e-35  # a few (denormal-ish) outliers: 5 % of the rows' SH rest
    path = tmp_path / "big.ply"
    write_ply(path, data)
    back = read_ply(path)
    assert np.array_equal(back.means, data.means) and np.array_equal(back.sh, data.sh)
    raw = path.read_bytes()
    end = raw.index(b"end_header")
    path.write_bytes(raw[:end].replace(b"binary_little_endian", b"binary_big_endian") + raw[end:])
    with pytest.raises(SplatFileError) as info:
        read_ply(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert "implausible" in message and "header says binary_big_endian but the data reads as binary_little_endian" \
        in message


def test_garbage_values_in_an_ascii_ply_are_refused(tmp_path):
    """Values no model holds (1e30 in bulk) are refused also where no byte order is involved."""
    n = 40
    vertex = np.zeros(n, dtype=[(p, "<f4") for p in property_names(0)])
    for name in vertex.dtype.names:
        vertex[name] = np.float32(1e30)
    path = tmp_path / "garbage.ply"
    PlyData([PlyElement.describe(vertex, "vertex")], text=True).write(str(path))
    with pytest.raises(SplatFileError, match=r"garbage\.ply: 100% of its vertex values are implausible .*damaged"):
        read_ply(path)

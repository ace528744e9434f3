"""A corpus of bad input files: one :class:`BadFile` per way a file can be wrong.

Every reader and dataset loader must refuse each case with one line that names the file and matches
``error`` (never a traceback from deep inside numpy, and never by exhausting memory). Cases write
their files into a fresh temporary folder; ``test_bad_files.py`` runs them all. See README.md for
how a new format adds its cases.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from recon.data import DataFormatError, MissingImageError, load_scene
from recon.core.errors import CheckpointError
from recon.data.colmap import ColmapCamera, ColmapImage, ColmapModel, ColmapPoints, read_model, write_model
from recon.data.procedural import orbit_cameras
from recon.export import read_ply, read_splat, read_spz
from recon.export.glb import (CHUNK_BIN, CHUNK_JSON, GLB_MAGIC, GLB_VERSION, encode_glb, parse_glb,
                              read_glb)
from recon.export.splats import SplatFileError, random_splats
from recon.export.spz import HEADER, MAGIC

BOMB_BYTES = 64 << 20  # decompressed size of the gzip bombs below: 64 MiB of zeros, ~65 KB on disk


@dataclass(frozen=True)
class BadFile:
    """One bad input.

    Attributes:
        name: test id, ``<format>-<what is wrong>``.
        write: writes the bad file(s) under the given empty folder; returns the path to read
            (a file, or a dataset folder).
        read: the reader or loader call that must refuse it.
        error: regex the one-line message must match (``re.search``).
        exception: the exception class the CLI turns into one line.
        names: text the message must contain to name the file; default the name of ``write``'s path.
    """

    name: str
    write: Callable[[Path], Path]
    read: Callable[[Path], object]
    error: str
    exception: type[Exception] = ValueError
    names: str | None = None


# ------------------------------------------------------------------------------------------- helpers


def gzip_stream(chunks) -> bytes:
    """gzip bytes of the concatenated ``chunks`` (an iterable of bytes), compressed piecewise so a
    bomb never sits in memory decompressed."""
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join([comp.compress(c) for c in chunks] + [comp.flush()])


def zeros(total: int, chunk: int = 1 << 20):
    for start in range(0, total, chunk):
        yield bytes(min(chunk, total - start))


def write_bytes(name: str, data_fn: Callable[[], bytes]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data_fn())
        return path

    return write


def link_to_dev_zero(name: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        os.symlink("/dev/zero", path)
        return path

    return write


def fifo(name: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / name
        os.mkfifo(path)
        return path

    return write


# ----------------------------------------------------------------------------------------------- SPZ


def spz_header(n: int, degree: int = 0, version: int = 3) -> bytes:
    return HEADER.pack(MAGIC, version, n, degree, 12, 0, 0)


def spz_bomb_after_valid_header() -> bytes:
    """A header declaring 10 splats (the payload is 16 + 10 * 20 bytes), then 64 MiB of zeros."""
    return gzip_stream([spz_header(10)] + list(zeros(BOMB_BYTES)))


def spz_bomb_without_header() -> bytes:
    return gzip_stream(zeros(BOMB_BYTES))


def spz_header_declaring_4g_splats() -> bytes:
    return gzip.compress(spz_header(0xFFFFFFFF, degree=3) + bytes(1000))


def spz_bomb_declaring_5m_splats() -> bytes:
    """A header declaring 5M splats (100 MB of payload) and 100 MB of zeros behind it: ~100 kB on disk,
    a compression deflate can give (< 1032:1) but real splats never reach (the probe's case: 50M splats
    in under 1 MB, inflating to 1 GB and decoding to 6 GB; 10x smaller here to keep the corpus fast)."""
    payload = 5_000_000 * 20  # SH degree 0, version 3: 9 + 1 + 3 + 3 + 4 bytes per splat
    return gzip_stream([spz_header(5_000_000)] + list(zeros(payload, 16 << 20)))


SPZ_CASES = [
    BadFile("spz-gzip-bomb-after-header", write_bytes("bomb.spz", spz_bomb_after_valid_header),
            read_spz, r"more than the 216 bytes its header declares.*gzip bomb", SplatFileError),
    BadFile("spz-gzip-bomb-of-zeros", write_bytes("zeros.spz", spz_bomb_without_header),
            read_spz, r"not an SPZ file \(wrong magic", SplatFileError),
    BadFile("spz-header-declares-4g-splats", write_bytes("huge.spz", spz_header_declaring_4g_splats),
            read_spz, r"declares 4,294,967,295 splats .*more than a \d+-byte gzip stream can hold",
            SplatFileError),
    BadFile("spz-fifo", fifo("pipe.spz"), read_spz, r"not a regular file", SplatFileError),
    BadFile("spz-100kb-declares-5m-splats", write_bytes("bomb5m.spz", spz_bomb_declaring_5m_splats), read_spz,
            r"declares 5,000,000 splats .* more than 200:1", SplatFileError),
    BadFile("spz-dev-zero", link_to_dev_zero("zero.spz"), read_spz, r"not a regular file",
            SplatFileError),
]


# ----------------------------------------------------------------------------------------------- GLB


def glb_container(doc: dict, binary: bytes) -> bytes:
    """GLB bytes for a glTF JSON document and BIN chunk (both padded to 4 bytes)."""
    js = json.dumps(doc).encode()
    js += b" " * (-len(js) % 4)
    binary += b"\0" * (-len(binary) % 4)
    total = 12 + 8 + len(js) + 8 + len(binary)
    return b"".join([struct.pack("<III", GLB_MAGIC, GLB_VERSION, total),
                     struct.pack("<II", len(js), CHUNK_JSON), js,
                     struct.pack("<II", len(binary), CHUNK_BIN), binary])


def glb_edited(edit: Callable[[dict], None]) -> Callable[[], bytes]:
    """A valid 4-splat GLB whose JSON document ``edit`` changed in place."""
    def make() -> bytes:
        doc, binary = parse_glb("<memory>", encode_glb(random_splats(4, sh_degree=1)))
        edit(doc)
        return glb_container(doc, binary)

    return make


def _set_accessor(attribute: str, **fields):
    def edit(doc: dict) -> None:
        prim = doc["meshes"][0]["primitives"][0]
        doc["accessors"][prim["attributes"][attribute]].update(fields)

    return edit


def _stride_0_count_1e9(doc: dict) -> None:
    """Every attribute read 10^9 times from the same few bytes: ~60 GB from a 1 KB file."""
    for view in doc["bufferViews"]:
        view["byteStride"] = 0
    _set_all_counts(10**9)(doc)


def _set_all_counts(count: int):
    """Every accessor claims ``count`` elements (so they agree with each other)."""
    def edit(doc: dict) -> None:
        for acc in doc["accessors"]:
            acc["count"] = count

    return edit


SCALE = "KHR_gaussian_splatting:SCALE"
GLB_CASES = [
    BadFile("glb-stride-0-count-1e9", write_bytes("stride0.glb", glb_edited(_stride_0_count_1e9)),
            read_glb, r"accessor \d+ .*byteStride 0", SplatFileError),
    BadFile("glb-count-mismatch", write_bytes("mismatch.glb", glb_edited(_set_accessor(SCALE, count=3))),
            read_glb, r"accessor \d+ .*3 elements.*POSITION has 4", SplatFileError),
    BadFile("glb-negative-count", write_bytes("neg.glb", glb_edited(_set_all_counts(-5))),
            read_glb, r"accessor \d+ .*count -5", SplatFileError),
    BadFile("glb-negative-offset", write_bytes("negoff.glb",
                                               glb_edited(_set_accessor("POSITION", byteOffset=-12))),
            read_glb, r"accessor \d+ .*byteOffset -12", SplatFileError),
    BadFile("glb-scale-is-vec4", write_bytes("vec4.glb", glb_edited(_set_accessor(SCALE, type="VEC4"))),
            read_glb, r"SCALE.* VEC4, expected VEC3", SplatFileError),
    BadFile("glb-dev-zero", link_to_dev_zero("zero.glb"), read_glb, r"not a regular file",
            SplatFileError),
    BadFile("glb-position-uint8", write_bytes("u8.glb", glb_edited(_set_accessor("POSITION", componentType=5121))),
            read_glb, r"attribute POSITION has componentType 5121 \(u1\); .* FLOAT", SplatFileError),
    BadFile("glb-opacity-int-not-normalized",
            write_bytes("opint.glb", glb_edited(_set_accessor("KHR_gaussian_splatting:OPACITY", componentType=5121))),
            read_glb, r"OPACITY has componentType 5121 \(u1\) without normalized: true", SplatFileError),
]

# ------------------------------------------------------------------------------------------- .splat

SPLAT_CASES = [
    BadFile("splat-dev-zero", link_to_dev_zero("zero.splat"), read_splat, r"not a regular file",
            SplatFileError),
    BadFile("splat-fifo", fifo("pipe.splat"), read_splat, r"not a regular file", SplatFileError),
]


# ----------------------------------------------------------------------------------------------- PLY

PLY_PROPS = ["x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2",
             "rot_0", "rot_1", "rot_2", "rot_3"]


def ply_declaring(count: int, fmt: str, body: bytes) -> Callable[[], bytes]:
    def make() -> bytes:
        lines = ["ply", f"format {fmt} 1.0", f"element vertex {count}"]
        lines += [f"property float {p}" for p in PLY_PROPS] + ["end_header", ""]
        return "\n".join(lines).encode() + body

    return make


def ply_with_uchar_opacity() -> bytes:
    """Two splats whose opacity is ``property uchar opacity`` (every other property float)."""
    lines = ["ply", "format binary_little_endian 1.0", "element vertex 2"]
    lines += [f"property {'uchar' if p == 'opacity' else 'float'} {p}" for p in PLY_PROPS] + ["end_header", ""]
    row = b"".join(struct.pack("<B", 200) if p == "opacity" else struct.pack("<f", 0.5) for p in PLY_PROPS)
    return "\n".join(lines).encode() + row * 2


def ply_byte_order_swapped(stored: str, declared: str) -> Callable[[], bytes]:
    """A trained-looking 3DGS PLY (300 splats, SH degree 1) whose data is written ``stored`` ('<' or '>') under
    a header declaring ``declared`` (binary_little_endian / binary_big_endian): issue 52's silent garbage."""
    def make() -> bytes:
        import io

        from plyfile import PlyData, PlyElement

        from recon.export.ply import splats_to_vertex_array

        vertex = splats_to_vertex_array(random_splats(300, sh_degree=1, seed=5, extent=3.0))
        vertex = vertex.astype([(n, stored + "f4") for n in vertex.dtype.names])
        buf = io.BytesIO()
        PlyData([PlyElement.describe(vertex, "vertex")], text=False, byte_order=stored).write(buf)
        head, sep, body = buf.getvalue().partition(b"end_header\n")
        fmt = {"<": b"binary_little_endian", ">": b"binary_big_endian"}
        return head.replace(fmt[stored], declared.encode()) + sep + body

    return make


PLY_CASES = [
    BadFile("ply-big-endian-header-over-little-endian-data",
            write_bytes("swapped.ply", ply_byte_order_swapped("<", "binary_big_endian")), read_ply,
            r"implausible for Gaussian splats .*the header says binary_big_endian but the data reads as "
            r"binary_little_endian", SplatFileError),
    BadFile("ply-little-endian-header-over-big-endian-data",
            write_bytes("swapped.ply", ply_byte_order_swapped(">", "binary_little_endian")), read_ply,
            r"implausible for Gaussian splats .*the header says binary_little_endian but the data reads as "
            r"binary_big_endian", SplatFileError),
    BadFile("ply-ascii-declares-4g-vertices",
            write_bytes("ascii.ply", ply_declaring(4_000_000_000, "ascii", b"0 " * 14 + b"\n")),
            read_ply, r"declares 4,000,000,000 vertices .* hold at most 1;", SplatFileError),
    BadFile("ply-binary-declares-1g-vertices",
            write_bytes("binary.ply", ply_declaring(10**9, "binary_little_endian", bytes(56 * 3))),
            read_ply, r"declares 1,000,000,000 vertices .* hold at most 3;", SplatFileError),
    BadFile("ply-dev-zero", link_to_dev_zero("zero.ply"), read_ply, r"not a regular file",
            SplatFileError),
    BadFile("ply-uchar-opacity", write_bytes("u8.ply", ply_with_uchar_opacity), read_ply,
            r"vertex properties must be float or double; these are integers: opacity \(uint8\)", SplatFileError),
]


# ------------------------------------------------------------------------------------------ datasets

W, H = 24, 16
FOV_X = 0.9


def gl_c2w(w2c: np.ndarray) -> list:
    """OpenCV world-to-camera [4, 4] -> OpenGL camera-to-world as a nested list."""
    c2w = np.linalg.inv(w2c)
    c2w[:3, 1:3] *= -1
    return c2w.tolist()


def write_png(path: Path, size=(W, H), mode="RGB") -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, 128).save(path)


def blender_dataset(edit_train: Callable[[dict], None] = lambda meta: None,
                    edit_test: Callable[[dict], None] = lambda meta: None) -> Callable[[Path], Path]:
    """A two-view Blender folder (train and test, 24x16 PNGs) whose split metadata the edits change."""
    def write(folder: Path) -> Path:
        root = folder / "blender"
        cams = orbit_cameras(2, 4.0, W, H, FOV_X)
        for split, edit in (("train", edit_train), ("test", edit_test)):
            frames = []
            for i, cam in enumerate(cams):
                write_png(root / split / f"r_{i}.png")
                frames.append({"file_path": f"./{split}/r_{i}",
                               "transform_matrix": gl_c2w(cam.world_to_cam.double().numpy())})
            meta = {"camera_angle_x": FOV_X, "frames": frames}
            edit(meta)
            (root / f"transforms_{split}.json").write_text(json.dumps(meta))
        return root

    return write


def nerfstudio_dataset(edit: Callable[[dict], None]) -> Callable[[Path], Path]:
    """A two-view nerfstudio folder (transforms.json with fl_x/fl_y/w/h) changed by ``edit``."""
    def write(folder: Path) -> Path:
        root = folder / "ns"
        frames = []
        for i, cam in enumerate(orbit_cameras(2, 4.0, W, H, FOV_X)):
            write_png(root / "images" / f"f_{i}.png")
            frames.append({"file_path": f"images/f_{i}.png",
                           "transform_matrix": gl_c2w(cam.world_to_cam.double().numpy())})
        meta = {"fl_x": 20.0, "fl_y": 20.0, "cx": W / 2, "cy": H / 2, "w": W, "h": H, "frames": frames}
        edit(meta)
        (root / "transforms.json").write_text(json.dumps(meta))
        return root

    return write


def colmap_dataset(camera: dict | None = None, qvec=(1.0, 0.0, 0.0, 0.0)) -> Callable[[Path], Path]:
    """A two-image COLMAP text model (one PINHOLE camera); ``camera`` overrides its fields and
    ``qvec`` the second image's rotation."""
    def write(folder: Path) -> Path:
        root = folder / "colmap"
        fields = {"width": W, "height": H, "params": np.array([20.0, 20.0, W / 2, H / 2])}
        fields.update(camera or {})
        cams = {1: ColmapCamera(1, "PINHOLE", fields["width"], fields["height"], fields["params"])}
        images = {}
        for i, q in enumerate([(1.0, 0.0, 0.0, 0.0), qvec], start=1):
            images[i] = ColmapImage(i, np.array(q, float), np.array([0.0, 0.0, 4.0 + i]), 1, f"im_{i}.png")
            write_png(root / "images" / f"im_{i}.png")
        write_model(ColmapModel(cams, images, ColmapPoints.empty()), root / "sparse" / "0", ".txt")
        return root

    return write


def _set_frame(index: int, value):
    def edit(meta: dict) -> None:
        meta["frames"][index] = value

    return edit


def _update_frame(index: int, **fields):
    def edit(meta: dict) -> None:
        meta["frames"][index].update(fields)

    return edit


def _update_meta(**fields):
    def edit(meta: dict) -> None:
        meta.update(fields)

    return edit


def _resize_source(folder_root: Callable[[Path], Path], rel: str, size) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        root = folder_root(folder)
        write_png(root / rel, size)
        return root

    return write


ZERO_POSE = np.zeros((4, 4)).tolist()
NAN_POSE = [[float("nan")] * 4] * 4


def _dnerf_with_zero_pose(meta: dict) -> None:
    """D-NeRF: every frame has a time; frame 0's transform_matrix is all zeros."""
    for i, frame in enumerate(meta["frames"]):
        frame["time"] = i / max(1, len(meta["frames"]) - 1)
    meta["frames"][0]["transform_matrix"] = ZERO_POSE


def load(root: Path):
    return load_scene(root)


def load_half(root: Path):
    return load_scene(root, data_factor=2, cache_dir=root.parent / "cache")


WRONG_SIZE = (r"r_1\.png is 48x32, its camera expects 24x16 \(same aspect ratio, so resize the image "
              r"to 24x16 or scale the camera's intrinsics and size by 2\)")

DATASET_CASES = [
    BadFile("blender-frame-not-an-object", blender_dataset(_set_frame(1, 42)), load,
            r"transforms_train\.json: frame 1 is not an object \(got number\)", DataFormatError),
    BadFile("nerfstudio-frame-not-an-object", nerfstudio_dataset(_set_frame(0, None)), load,
            r"transforms\.json: frame 0 is not an object \(got null\)", DataFormatError),
    BadFile("nerfstudio-size-0x0", nerfstudio_dataset(_update_meta(w=0, h=0)), load,
            r"transforms\.json: image 'images/f_\d\.png': image size 0x0", DataFormatError),
    BadFile("nerfstudio-size-not-a-number", nerfstudio_dataset(_update_frame(1, w="wide")), load,
            r"transforms\.json: frame 'images/f_1\.png': 'w' is not a number \('wide'\)",
            DataFormatError),
    BadFile("nerfstudio-negative-focal", nerfstudio_dataset(_update_frame(1, fl_x=-20.0)), load,
            r"transforms\.json: image 'images/f_1\.png': focal length fx=-20 is not positive",
            DataFormatError),
    BadFile("nerfstudio-nan-pose", nerfstudio_dataset(_update_frame(0, transform_matrix=NAN_POSE)),
            load, r"transforms\.json: transform_matrix of frame 0 must be a finite", DataFormatError),
    BadFile("blender-camera-angle-0", blender_dataset(_update_meta(camera_angle_x=0)), load,
            r"transforms_train\.json: camera_angle_x 0 of frame '\./train/r_0' must lie in \(0, pi\)", DataFormatError),
    BadFile("blender-zero-pose-in-test-split",
            blender_dataset(edit_test=_update_frame(1, transform_matrix=ZERO_POSE)), load,
            r"transforms_test\.json: image 'test/r_1': .*pose .*singular", DataFormatError),
    BadFile("dnerf-zero-pose", blender_dataset(_dnerf_with_zero_pose),
            load, r"transforms_train\.json: image 'train/r_0': .*pose .*singular", DataFormatError),
    BadFile("colmap-zero-qvec", colmap_dataset(qvec=(0.0, 0.0, 0.0, 0.0)), load,
            r"images\.txt: image 'im_2\.png': .*non-finite", DataFormatError),
    BadFile("colmap-zero-focal", colmap_dataset({"params": np.array([0.0, 20.0, W / 2, H / 2])}),
            load, r"images\.txt: image 'im_1\.png': focal length fx=0 is not positive", DataFormatError),
    BadFile("colmap-zero-width", colmap_dataset({"width": 0}), load,
            r"images\.txt: image 'im_1\.png': image size 0x16", DataFormatError),
    BadFile("blender-source-size-differs-at-factor-2",
            _resize_source(blender_dataset(), "train/r_1.png", (2 * W, 2 * H)), load_half,
            WRONG_SIZE, MissingImageError),
    BadFile("blender-source-size-differs-at-factor-1",
            _resize_source(blender_dataset(), "train/r_1.png", (2 * W, 2 * H)),
            lambda root: [load_scene(root).load_image(f) for f in load_scene(root).frames],
            WRONG_SIZE, MissingImageError),
]

def _dnerf_time_not_a_number(meta: dict) -> None:
    for frame in meta["frames"]:
        frame["time"] = "noon"


def _with_points_declaring(count: int):
    """nerfstudio with ``ply_file_path`` pointing at an ASCII PLY whose header declares ``count`` points."""
    def edit(meta: dict) -> None:
        meta["ply_file_path"] = "points.ply"

    def write(folder: Path) -> Path:
        root = nerfstudio_dataset(edit)(folder)
        header = f"ply\nformat ascii 1.0\nelement vertex {count}\nproperty float x\nproperty float y\n" \
                 f"property float z\nend_header\n"
        (root / "points.ply").write_text(header + "0 0 0\n")
        return root

    return write


DATASET_CASES += [
    BadFile("dnerf-time-not-a-number", blender_dataset(_dnerf_time_not_a_number), load,
            r"transforms_train\.json: frame '\./train/r_0': 'time' is not a number \('noon'\)",
            DataFormatError),
    BadFile("nerfstudio-points-declare-4g", _with_points_declaring(4_000_000_000), load,
            r"points\.ply: .*declares 4,000,000,000 vertices .* hold at most 1;", DataFormatError),
]


# ------------------------------------------------------------------ reader rules (recon/core/limits.py)
# JSON nested past the depth limit, non-UTF-8 JSON, NaN where a number is read, images declaring more
# pixels than the limit, headers declaring more data than the file holds, special files as inputs.

DEEP = 200_000  # brackets: ~400 kB, far past Python's recursion limit in json.loads


def nested_json(prefix: bytes = b'{"frames": ', suffix: bytes = b"}") -> bytes:
    """A JSON object whose value nests ``DEEP`` lists deep (valid JSON, just too deep)."""
    return prefix + b"[" * DEEP + b"]" * DEEP + suffix


def glb_with_json_bytes(js: bytes) -> bytes:
    """A GLB container holding ``js`` as its JSON chunk (and an empty BIN chunk)."""
    js += b" " * (-len(js) % 4)
    total = 12 + 8 + len(js)
    return b"".join([struct.pack("<III", GLB_MAGIC, GLB_VERSION, total), struct.pack("<II", len(js), CHUNK_JSON), js])


def tiny_image_model(nan: bool = False):
    """A 3-Gaussian 8x8 RGB image model; ``nan``: one mean is NaN."""
    import torch

    from recon.image.model import ImageGaussians

    gen = torch.Generator().manual_seed(0)
    means = torch.rand(3, 2, generator=gen)
    if nan:
        means[0, 0] = float("nan")
    return ImageGaussians(means, torch.rand(3, 3, generator=gen), torch.rand(3, 3, generator=gen), 8, 8)


def gimg_nested_header() -> bytes:
    """A valid .gimg whose JSON header gains a ``DEEP``-deep list (its length field updated)."""
    from recon.image.gimg import PREAMBLE, encode_gimg

    data = encode_gimg(tiny_image_model())
    magic, version, length = PREAMBLE.unpack_from(data)
    text = data[PREAMBLE.size:PREAMBLE.size + length]
    deep = nested_json(b'{"deep": ', b", ") + text[1:]
    return PREAMBLE.pack(magic, version, len(deep)) + deep + data[PREAMBLE.size + length:]


def gimg_nan_payload() -> bytes:
    from recon.image.gimg import encode_gimg

    return encode_gimg(tiny_image_model(nan=True))


def gimg_quantized_declaring(n: int) -> Callable[[], bytes]:
    """A quantized (zstd) .gimg whose header declares ``n`` Gaussians and the raw bytes they take: a
    49 kB file of this kind once inflated 1.95 GB before it was refused."""
    def make() -> bytes:
        from recon.image.gimg import PREAMBLE, encode_gimg

        data = encode_gimg(tiny_image_model(), "quantized")
        magic, version, length = PREAMBLE.unpack_from(data)
        header = json.loads(data[PREAMBLE.size:PREAMBLE.size + length])
        header["raw_bytes"] = header["raw_bytes"] // header["n"] * n
        header["n"] = n
        text = json.dumps(header, sort_keys=True).encode()
        return PREAMBLE.pack(magic, version, len(text)) + text + data[PREAMBLE.size + length:]

    return make


def read_gimg(path: Path):
    from recon.image.gimg import read_gimg as read

    return read(path)


def png_declaring(width: int, height: int) -> bytes:
    """A ~100-byte PNG whose IHDR declares ``width x height`` RGB pixels (its data is a few bytes: a
    decoder that trusted the header would allocate width*height*3 bytes first)."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(64))) + \
        chunk(b"IEND", b"")


def _replace_file(folder_root: Callable[[Path], Path], rel: str, data_fn: Callable[[], bytes]):
    def write(folder: Path) -> Path:
        root = folder_root(folder)
        (root / rel).write_bytes(data_fn())
        return root

    return write


def _raw_transforms(data_fn: Callable[[], bytes], name: str = "transforms.json"):
    """A nerfstudio folder whose transforms.json is replaced by ``data_fn()``."""
    return _replace_file(nerfstudio_dataset(lambda meta: None), name, data_fn)


def read_image_file(path: Path):
    from recon.image.io import read_image

    return read_image(path)


def ply4d_edited(edit: Callable[[np.ndarray], None]) -> Callable[[Path], Path]:
    """A valid 4-Gaussian ply4d whose vertex array ``edit`` changed (through plyfile, comments kept)."""
    def write(folder: Path) -> Path:
        from plyfile import PlyData

        from recon.core.spacetime_data import SpaceTimeData
        from recon.export import write_ply4d

        rng = np.random.default_rng(0)
        n = 4
        path = folder / "model4d.ply"
        write_ply4d(path, SpaceTimeData(np.c_[rng.uniform(-0.5, 0.5, (n, 3)), rng.uniform(0, 1, (n, 1))],
                                        np.log(rng.uniform(0.02, 0.3, (n, 4))), rng.normal(size=(n, 4)),
                                        rng.normal(size=(n, 4)), rng.normal(size=n), rng.normal(size=(n, 4, 3))))
        ply = PlyData.read(str(path), mmap=False)  # not mapped: the file is rewritten below
        edit(ply["vertex"].data)
        ply.write(str(path))
        return path

    return write


def _set_field(name: str, value: float):
    def edit(v: np.ndarray) -> None:
        v[name][1] = value

    return edit


def ply4d_byte_order_swapped(folder: Path) -> Path:
    """A valid 200-Gaussian ply4d (little-endian data) whose header says binary_big_endian."""
    from recon.core.spacetime_data import SpaceTimeData
    from recon.export import write_ply4d

    rng = np.random.default_rng(1)
    n = 200
    path = folder / "swapped4d.ply"
    write_ply4d(path, SpaceTimeData(np.c_[rng.uniform(-0.5, 0.5, (n, 3)), rng.uniform(0, 1, (n, 1))],
                                    np.log(rng.uniform(0.02, 0.3, (n, 4))), rng.normal(size=(n, 4)),
                                    rng.normal(size=(n, 4)), rng.normal(size=n), rng.normal(size=(n, 4, 3))))
    raw = path.read_bytes()
    end = raw.index(b"end_header")
    path.write_bytes(raw[:end].replace(b"binary_little_endian", b"binary_big_endian") + raw[end:])
    return path


def read_ply4d_file(path: Path):
    from recon.export import read_ply4d

    return read_ply4d(path)


def camera_path_json(edit: Callable[[dict], None] = lambda d: None) -> Callable[[], bytes]:
    """A valid two-keyframe camera path (viewer's format) changed by ``edit``."""
    def make() -> bytes:
        from viewer.camera_path import CameraPath, camera_path_to_dict

        d = camera_path_to_dict(CameraPath(list(orbit_cameras(2, 4.0, W, H, FOV_X)), 30.0))
        edit(d)
        return json.dumps(d).encode()

    return make


def _huge_frame(d: dict) -> None:
    d["frames"][0]["width"] = d["frames"][0]["height"] = 1_000_000


def read_camera_path(path: Path):
    from viewer.camera_path import load_camera_path

    return load_camera_path(path)


def read_keyframes(path: Path):
    from recon.hybrid.assets import load_asset_path

    return load_asset_path(path)


def read_panoptic_meta(path: Path):
    from recon.data.panoptic import read_meta

    return read_meta(path)


def npy_declaring(shape: tuple, body: bytes = bytes(64)) -> bytes:
    """.npy bytes whose header declares float64 ``shape`` followed by ``body`` (a few bytes)."""
    import io

    from numpy.lib import format as npformat

    buf = io.BytesIO()
    npformat.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False, "shape": shape})
    return buf.getvalue() + body


def panoptic_npz_declaring(points: int) -> Callable[[Path], Path]:
    """A folder with ``init_pt_cld.npz`` whose 'data' member declares [points, 7] float64 in a few bytes."""
    def write(folder: Path) -> Path:
        import zipfile

        root = folder / "panoptic"
        root.mkdir()
        with zipfile.ZipFile(root / "init_pt_cld.npz", "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("data.npy", npy_declaring((points, 7), bytes(7 * 8 * 4)))
        return root

    return write


def read_panoptic_points(root: Path):
    from recon.data.panoptic import load_points

    return load_points(root)


def read_n3dv_poses(root: Path):
    from recon.data.n3dv import read_poses

    return read_poses(root, 1)


def _poses_declaring_huge(folder: Path) -> Path:
    root = folder / "n3dv"
    root.mkdir()
    (root / "poses_bounds.npy").write_bytes(npy_declaring((10**12, 17)))
    return root


def ply_with_long_comment(count: int) -> bytes:
    """A binary PLY whose 70 kB comment pushes end_header past 64 kB and declares ``count`` vertices."""
    lines = ["ply", "format binary_little_endian 1.0", "comment " + "x" * 70_000, f"element vertex {count}"]
    lines += [f"property float {p}" for p in PLY_PROPS] + ["end_header", ""]
    return "\n".join(lines).encode() + bytes(56 * 3)


def random_checkpoint_bytes() -> bytes:
    return np.random.default_rng(0).bytes(4096)


def read_checkpoint(path: Path):
    from recon.outputs.files import load_checkpoint_file

    return load_checkpoint_file(path)


def colmap_binary_with_cameras_dir(folder: Path) -> Path:
    """A binary COLMAP model (sparse/0) whose ``cameras.bin`` is a folder."""
    root = folder / "colmap"
    cams = {1: ColmapCamera(1, "PINHOLE", W, H, np.array([20.0, 20.0, W / 2, H / 2]))}
    images = {1: ColmapImage(1, np.array([1.0, 0, 0, 0]), np.array([0.0, 0.0, 4.0]), 1, "im_1.png")}
    write_png(root / "images" / "im_1.png")
    sparse = root / "sparse" / "0"
    write_model(ColmapModel(cams, images, ColmapPoints.empty()), sparse, ".bin")
    (sparse / "cameras.bin").unlink()
    (sparse / "cameras.bin").mkdir()
    return root


def colmap_with_nan_point(folder: Path) -> Path:
    """A COLMAP text model whose points3D.txt has a NaN X in point 7."""
    root = colmap_dataset()(folder)
    points = ColmapPoints(np.array([5, 7]), np.array([[0.0, 0.0, 0.0], [np.nan, 1.0, 2.0]]),
                          np.zeros((2, 3), np.uint8), np.zeros(2), [np.zeros((0, 2), np.int64)] * 2)
    model = read_model(root / "sparse" / "0", ".txt")
    write_model(ColmapModel(model.cameras, model.images, points), root / "sparse" / "0", ".txt")
    return root


def _nan_point_ply(meta: dict) -> None:
    meta["ply_file_path"] = "points.ply"


def nerfstudio_with_nan_point(folder: Path) -> Path:
    root = nerfstudio_dataset(_nan_point_ply)(folder)
    header = "ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\n" \
             "end_header\n"
    (root / "points.ply").write_text(header + "0 0 0\nnan 1 2\n")
    return root


def _dnerf_nan_time(meta: dict) -> None:
    for i, frame in enumerate(meta["frames"]):
        frame["time"] = float("nan") if i == 0 else 1.0


def write_keyframes_nested(folder: Path) -> Path:
    path = folder / "keys.json"
    path.write_bytes(nested_json(b'{"keyframes": '))
    return path


def _not_utf8_camera_path() -> bytes:
    return camera_path_json()().replace(b'"fps"', b'"fps\xff\xfe"')


def read_mesh_asset(path: Path):
    from recon.hybrid.assets import load_mesh

    return load_mesh(path)


def obj_with_nan_vertex() -> bytes:
    return b"v 0 0 0\nv 1 0 0\nv nan 1 0\nf 1 2 3\n"


DEPTH = r"nests \d+ levels deep, more than the 512 allowed"
LIMITS_CASES = [
    BadFile("glb-nested-json", write_bytes("deep.glb", lambda: glb_with_json_bytes(nested_json())),
            read_glb, DEPTH, SplatFileError),
    BadFile("gimg-nested-json", write_bytes("deep.gimg", gimg_nested_header), read_gimg, DEPTH),
    BadFile("transforms-nested-json", _raw_transforms(nested_json), load, r"transforms\.json: .*" + DEPTH,
            DataFormatError, names="transforms.json"),
    BadFile("panoptic-meta-nested-json", write_bytes("train_meta.json", nested_json), read_panoptic_meta,
            DEPTH, DataFormatError),
    BadFile("camera-path-nested-json", write_bytes("path.json", nested_json), read_camera_path, DEPTH),
    BadFile("keyframes-nested-json", write_keyframes_nested, read_keyframes, DEPTH),
    BadFile("camera-path-not-utf8", write_bytes("path.json", _not_utf8_camera_path), read_camera_path,
            r"not UTF-8 text"),
    BadFile("camera-path-huge-resolution", write_bytes("path.json", camera_path_json(_huge_frame)),
            read_camera_path, r"frame 0: 1000000x1000000 is 1,000,000,000,000 pixels, more than"),
    BadFile("blender-decompression-bomb-png",
            _replace_file(blender_dataset(), "train/r_0.png", lambda: png_declaring(30000, 30000)), load,
            r"r_0\.png: .*(30000x30000|too many pixels)", MissingImageError, names="r_0.png"),
    BadFile("image-fit-decompression-bomb", write_bytes("bomb.png", lambda: png_declaring(30000, 30000)),
            read_image_file, r"(30000x30000|too many pixels)"),
    BadFile("image-is-dev-zero", link_to_dev_zero("zero.png"), read_image_file, r"not a regular file"),
    BadFile("dnerf-nan-time", blender_dataset(_dnerf_nan_time), load,
            r"transforms_train\.json: frame '\./train/r_0': 'time' is nan", DataFormatError,
            names="transforms_train.json"),
    BadFile("colmap-nan-point", colmap_with_nan_point, load,
            r"points3D\.txt: point 7: X Y Z .* is not finite", DataFormatError, names="points3D.txt"),
    BadFile("ply4d-big-endian-header-over-little-endian-data", ply4d_byte_order_swapped, read_ply4d_file,
            r"implausible for Gaussian splats .*the header says binary_big_endian", SplatFileError),
    BadFile("ply4d-nan-time", ply4d_edited(_set_field("t", float("nan"))), read_ply4d_file,
            r"vertex property t \(time\) holds 1 non-finite", SplatFileError),
    BadFile("ply4d-nan-scale", ply4d_edited(_set_field("scale_2", float("inf"))), read_ply4d_file,
            r"scale_0\.\.scale_3 holds 1 non-finite", SplatFileError),
    BadFile("gimg-quantized-declares-1e8-gaussians", write_bytes("bomb.gimg", gimg_quantized_declaring(10**8)),
            read_gimg, r"100,000,000 Gaussians of 3 channels for a 8x8 image"),
    BadFile("gimg-nan-payload", write_bytes("nan.gimg", gimg_nan_payload), read_gimg,
            r"payload array 'means' holds 1 non-finite"),
    BadFile("nerfstudio-ply-nan-point", nerfstudio_with_nan_point, load,
            r"points\.ply: vertex x, y, z holds 1 non-finite", DataFormatError, names="points.ply"),
    BadFile("panoptic-npz-declares-1e12-points", panoptic_npz_declaring(10**12), read_panoptic_points,
            r"init_pt_cld\.npz: .*declares an array of shape \(1000000000000, 7\)", DataFormatError,
            names="init_pt_cld.npz"),
    BadFile("npy-header-declares-huge", _poses_declaring_huge, read_n3dv_poses,
            r"poses_bounds\.npy: .*declares an array of shape \(1000000000000, 17\)", DataFormatError,
            names="poses_bounds.npy"),
    BadFile("ply-70kb-comment-declares-2g-vertices",
            write_bytes("comment.ply", lambda: ply_with_long_comment(2_000_000_000)), read_ply,
            r"declares 2,000,000,000 vertices", SplatFileError),
    BadFile("obj-nan-vertex", write_bytes("tri.obj", obj_with_nan_vertex), read_mesh_asset,
            r"tri\.obj: mesh .* has 1 vertices with NaN or infinite coordinates"),
    BadFile("checkpoint-random-bytes", write_bytes("ckpt_100.pt", random_checkpoint_bytes), read_checkpoint,
            r"not a splatforge checkpoint", CheckpointError),
    BadFile("cameras-bin-is-directory", colmap_binary_with_cameras_dir, load,
            r"cameras\.bin: is a folder or special file, not a dataset file", DataFormatError,
            names="cameras.bin"),
]

CASES: list[BadFile] = SPZ_CASES + GLB_CASES + SPLAT_CASES + PLY_CASES + DATASET_CASES + LIMITS_CASES


# ------------------------------------------------- found by scripts/fuzz_readers.py's newer formats (issue 52)
# COLMAP, checkpoints, run-folder metadata, meshes, N3DV, D-NeRF and Panoptic: each case one the fuzzer found
# as a traceback, an unclear message or a silent load, so that it stays fixed.


def colmap_text_model(camera_line: str | None = None, points_line: str | None = None) -> Callable[[Path], Path]:
    """The two-image COLMAP text model of :func:`colmap_dataset` with cameras.txt's camera line and / or
    points3D.txt's one point line replaced."""
    def write(folder: Path) -> Path:
        root = colmap_dataset()(folder)
        sparse = root / "sparse" / "0"
        if camera_line is not None:
            (sparse / "cameras.txt").write_text(camera_line + "\n")
        if points_line is not None:
            (sparse / "points3D.txt").write_text(points_line + "\n")
        return root

    return write


def colmap_binary_point_id(point_id: int) -> Callable[[Path], Path]:
    """A binary COLMAP model whose one 3D point has id ``point_id`` (a uint64 in the file)."""
    def write(folder: Path) -> Path:
        root = colmap_dataset()(folder)
        sparse = root / "sparse" / "0"
        model = read_model(sparse, ".txt")
        for name in ("cameras", "images", "points3D"):
            (sparse / f"{name}.txt").unlink()
        write_model(ColmapModel(model.cameras, model.images, ColmapPoints(
            np.array([1]), np.zeros((1, 3)), np.zeros((1, 3), np.uint8), np.zeros(1), [np.zeros((0, 2), np.int64)])),
            sparse, ".bin")
        raw = bytearray((sparse / "points3D.bin").read_bytes())
        raw[8:16] = struct.pack("<Q", point_id)
        (sparse / "points3D.bin").write_bytes(bytes(raw))
        return root

    return write


def npy_version_3(folder: Path) -> Path:
    """An N3DV folder whose poses_bounds.npy has a version 3.0 magic and a damaged header."""
    root = folder / "n3dv"
    root.mkdir()
    (root / "poses_bounds.npy").write_bytes(b"\x93NUMPY\x03\x00" + b"\x10\x00\x00\x00" + b"{'descr': <f8 ]]" + b"\n")
    return root


def camera_path_with(old: bytes, new: bytes) -> Callable[[], bytes]:
    def make() -> bytes:
        data = camera_path_json()()
        assert old in data
        return data.replace(old, new, 1)

    return make


FUZZ_FOUND_CASES = [
    BadFile("colmap-opencv-lens-folds-the-borders",
            colmap_text_model(camera_line=f"1 OPENCV {W} {H} 20 20 {W / 2} {H / 2} -50 0 0 0"), load,
            r"cameras\.txt: camera 1: cannot undistort camera model OPENCV .*folds or loses the image borders",
            DataFormatError, names="cameras.txt"),
    BadFile("colmap-points3D-txt-rgb-out-of-range",
            colmap_text_model(points_line="7 0 0 0 4000000000 0 0 0.5"), load,
            r"points3D\.txt, line 1: rgb 4000000000 is outside 0\.\.255", DataFormatError, names="points3D.txt"),
    BadFile("colmap-points3D-txt-id-beyond-int64",
            colmap_text_model(points_line=f"{2**64} 0 0 0 1 2 3 0.5"), load,
            r"points3D\.txt, line 1: point id \d+ is outside", DataFormatError, names="points3D.txt"),
    BadFile("colmap-points3D-bin-id-beyond-int64", colmap_binary_point_id(2**64 - 1), load,
            r"points3D\.bin: point record 0 has id 18446744073709551615", DataFormatError, names="points3D.bin"),
    BadFile("npy-version-3-damaged-header", npy_version_3, read_n3dv_poses,
            r"poses_bounds\.npy: poses file has a damaged \.npy header", DataFormatError, names="poses_bounds.npy"),
    BadFile("camera-path-float-overflows-to-inf", write_bytes("path.json", camera_path_with(b'"fps": 30.0',
                                                                                           b'"fps": 1e400')),
            read_camera_path, r"path\.json: .*holds 1e400, beyond the largest float"),
    BadFile("camera-path-5000-digit-integer", write_bytes("path.json", camera_path_with(b'"fps": 30.0',
                                                                                       b'"fps": ' + b"9" * 5000)),
            read_camera_path, r"path\.json: .*holds an integer of 5,000 digits"),
]

CASES += FUZZ_FOUND_CASES


def read_sdf(path: Path):
    from recon.geometry.sdf_fit import load_sdf

    return load_sdf(path)


def checkpoint_with_flipped_bit() -> bytes:
    """A torch.save'd checkpoint whose tensor data has one bit flipped (torch.load does not check CRCs)."""
    import io

    import torch

    buf = io.BytesIO()
    torch.save({"step": 1, "model": {"means": torch.arange(4096, dtype=torch.float32)}}, buf)
    data = bytearray(buf.getvalue())
    at = data.index(np.arange(4096, dtype=np.float32)[1000:1002].tobytes())
    data[at] ^= 0x10
    return bytes(data)


def read_run_config(root: Path):
    from recon.run.folder import Run

    return Run.open(root).config


def run_folder_with(name: str, data_fn: Callable[[], bytes] | None = None, special=None) -> Callable[[Path], Path]:
    """A run folder (config.yaml of the default TrainConfig) whose file ``name`` holds ``data_fn()`` (or is the
    special entry ``special`` makes)."""
    def write(folder: Path) -> Path:
        from recon.outputs.files import write_config
        from recon.training.trainer import TrainConfig

        root = folder / "run"
        root.mkdir()
        write_config(root, TrainConfig(data=Path("procedural"), out=root))
        (root / name).unlink(missing_ok=True)
        if special is not None:
            special(root)
        else:
            (root / name).write_bytes(data_fn())
        return root

    return write


def _config_not_utf8() -> bytes:
    from recon.outputs.files import config_to_dict
    from recon.training.trainer import TrainConfig

    import yaml

    return yaml.safe_dump(config_to_dict(TrainConfig())).encode().replace(b"steps:", b"st\xffeps:", 1)


def read_run_history(root: Path):
    from recon.run.folder import Run

    return Run.open(root).history()


def read_run_metrics(root: Path):
    from recon.run.folder import Run

    return Run.open(root).metrics()


def read_sdf_mesh(path: Path):
    from recon.geometry.sdf_fit import load_closed_mesh

    return load_closed_mesh(path)


def _history(loss) -> bytes:
    return json.dumps({"loss": loss, "num_gaussians": [5, 5], "step_seconds": [0.1, 0.1], "eval_step": [],
                       "eval_psnr": [], "eval_ssim": []}).encode()


FUZZ_FOUND_CASES_2 = [
    BadFile("checkpoint-bit-flipped-in-tensor-data", write_bytes("ckpt_00001.pt", checkpoint_with_flipped_bit),
            read_checkpoint, r"ckpt_00001\.pt: damaged checkpoint \(member '.*' fails its CRC-32 check\)",
            CheckpointError),
    BadFile("checkpoint-fifo", fifo("ckpt_00001.pt"), read_checkpoint, r"not a regular file", CheckpointError),
    BadFile("sdf-pt-fifo", fifo("sdf.pt"), read_sdf, r"sdf\.pt: cannot load the SDF \(not a regular file", ValueError),
    BadFile("sdf-pt-bit-flipped", write_bytes("sdf.pt", checkpoint_with_flipped_bit), read_sdf,
            r"sdf\.pt: cannot load the SDF \(damaged checkpoint \(member '.*' fails its CRC-32 check\)", ValueError),
    BadFile("config-yaml-not-utf8", run_folder_with("config.yaml", _config_not_utf8), read_run_config,
            r"config\.yaml: not UTF-8 text", ValueError, names="config.yaml"),
    BadFile("config-yaml-nested-flow", run_folder_with("config.yaml", lambda: b"steps: " + b"[" * 50_000 + b"]" * 50_000),
            read_run_config, r"config\.yaml: nests 50000 levels deep", ValueError, names="config.yaml"),
    BadFile("config-yaml-nested-blocks", run_folder_with("config.yaml", lambda: b"steps:\n" + b"- " * 50_000 + b"1\n"),
            read_run_config, r"config\.yaml: nests too deeply", ValueError, names="config.yaml"),
    BadFile("config-yaml-dev-zero", run_folder_with("config.yaml", special=lambda root: os.symlink(
        "/dev/zero", root / "config.yaml")), read_run_config, r"config\.yaml: not a regular file", ValueError,
        names="config.yaml"),
    BadFile("history-loss-not-a-number", run_folder_with("history.json", lambda: _history([0.5, "low"])),
            read_run_history, r"history\.json: loss\[1\] is 'low', not a number", ValueError, names="history.json"),
    BadFile("metrics-test-not-an-object", run_folder_with("metrics.json", lambda: b'{"test": [30.1]}'),
            read_run_metrics, r"metrics\.json: 'test' is a list, not an object", ValueError, names="metrics.json"),
    BadFile("metrics-psnr-a-string", run_folder_with("metrics.json", lambda: b'{"test": {"psnr": "high"}}'),
            read_run_metrics, r"metrics\.json: 'test\.psnr' is 'high', not a number", ValueError,
            names="metrics.json"),
    BadFile("sdf-mesh-fifo", fifo("mesh.obj"), read_sdf_mesh, r"mesh\.obj: not a regular file"),
]

CASES += FUZZ_FOUND_CASES_2


def ply_mesh_face_out_of_range() -> bytes:
    """A binary PLY mesh (a tetrahedron with vertex colours) whose last face names vertex 73 of 4."""
    import trimesh

    mesh = trimesh.creation.box()
    mesh.visual.vertex_colors = np.tile(np.array([200, 100, 50, 255], np.uint8), (len(mesh.vertices), 1))
    data = mesh.export(file_type="ply")
    head, sep, body = data.partition(b"end_header\n")
    faces_at = len(body) - len(mesh.faces) * 13  # each face: uchar 3 + three int32
    body = bytearray(body)
    body[faces_at + 1:faces_at + 5] = struct.pack("<i", 73)
    return head + sep + bytes(body)


def glb_mesh_chunk_declaring(length: int) -> bytes:
    """A GLB mesh whose JSON chunk header declares ``length`` bytes (the file holds under 2 kB)."""
    import trimesh

    data = bytearray(trimesh.creation.box().export(file_type="glb"))
    data[12:16] = struct.pack("<I", length)
    return bytes(data)


def glb_mesh_edited(edit: Callable[[dict], None]) -> Callable[[], bytes]:
    """A trimesh-written GLB box whose JSON document ``edit`` changed in place (binary chunk kept)."""
    def make() -> bytes:
        import trimesh

        doc, binary = parse_glb("<memory>", trimesh.creation.box().export(file_type="glb"))
        edit(doc)
        return glb_container(doc, binary)

    return make


def _position_view_offset_lost(doc: dict) -> None:
    """POSITION's buffer view loses its ``byteOffset`` (the fuzzer's ``flip-797.2``: the key misspelt): the view
    starts at byte 0, over the face indices, and still fits the buffer."""
    position = doc["accessors"][doc["meshes"][0]["primitives"][0]["attributes"]["POSITION"]]
    doc["bufferViews"][position["bufferView"]]["byteOffset"] = 0


def read_dataset_mesh(path: Path):
    from recon.data.mesh_render import load_mesh

    return load_mesh(path)


def read_blocks(path: Path):
    from recon.distributed.partition import Partition

    return Partition.read(path)


def blocks_with_core(core) -> bytes:
    return json.dumps({"format": "splatforge-blocks", "version": 1, "dataset": {},
                       "frame": {"up": [0, 0, 1], "e1": [1, 0, 0], "e2": [0, 1, 0]},
                       "box": {"lo": [-1, -1], "hi": [1, 1], "height": [0, 1]}, "settings": {},
                       "blocks": [{"id": 0, "core": core, "bounded": [[-1, -1], [1, 1]], "expanded": [[-1, -1], [1, 1]],
                                   "train_images": ["a"], "test_images": [], "num_points": 3}]}).encode()


FUZZ_FOUND_CASES_3 = [
    BadFile("mesh-ply-face-index-out-of-range", write_bytes("box.ply", ply_mesh_face_out_of_range), read_mesh_asset,
            r"box\.ply: mesh .*faces holds 1 index\(es\) outside 0\.\.7 \(the first: 73"),
    BadFile("mesh-dataset-ply-face-index-out-of-range", write_bytes("box.ply", ply_mesh_face_out_of_range),
            read_dataset_mesh, r"box\.ply: faces holds 1 index\(es\) outside 0\.\.7"),
    BadFile("mesh-glb-chunk-declares-256mb", write_bytes("box.glb", lambda: glb_mesh_chunk_declaring(1 << 28)),
            read_mesh_asset, r"box\.glb: GLB chunk at byte 12 declares 268,435,456 bytes, past the end"),
    BadFile("mesh-glb-position-view-offset-lost", write_bytes("box.glb", glb_mesh_edited(_position_view_offset_lost)),
            read_mesh_asset, r"box\.glb: accessor \d+ holds values from .* but declares min .*re-export the mesh"),
    BadFile("mesh-dataset-glb-position-view-offset-lost",
            write_bytes("box.glb", glb_mesh_edited(_position_view_offset_lost)), read_dataset_mesh,
            r"box\.glb: not a readable mesh \(accessor \d+ holds values from .* but declares min"),
    BadFile("sdf-mesh-glb-position-view-offset-lost",
            write_bytes("box.glb", glb_mesh_edited(_position_view_offset_lost)), read_sdf_mesh,
            r"box\.glb: accessor \d+ holds values from .* but declares min"),
    BadFile("blocks-core-a-string", write_bytes("blocks.json", lambda: blocks_with_core("everywhere")), read_blocks,
            r"blocks\.json: not a blocks file .*block 0 core is 'everywhere', not \[\[xlo, ylo\], \[xhi, yhi\]\]"),
]

CASES += FUZZ_FOUND_CASES_3


def npy_header_open_bracket(folder: Path) -> Path:
    """An N3DV folder whose poses_bounds.npy header (version 1.0) is cut inside its shape tuple."""
    root = folder / "n3dv"
    root.mkdir()
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (3, 17"
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    (root / "poses_bounds.npy").write_bytes(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
    return root


CASES.append(BadFile("npy-header-cut-inside-a-tuple", npy_header_open_bracket, read_n3dv_poses,
                     r"poses_bounds\.npy: poses file has a damaged \.npy header", DataFormatError,
                     names="poses_bounds.npy"))


def read_proxy(path: Path):
    from recon.hybrid.proxy import read_proxy as read

    return read(path)


CASES.append(BadFile("proxy-ply-face-index-out-of-range", write_bytes("proxy.ply", ply_mesh_face_out_of_range),
                     read_proxy, r"proxy\.ply: .*index.* 73 .*it is a cache: delete it and it is made again"))


def n3dv_with_video(special=None, data: bytes | None = None) -> Callable[[Path], Path]:
    """The 3-camera N3DV folder of fuzz_formats.build_n3dv whose cam01.mp4 is ``data`` or the entry ``special``
    makes (``link_to_dev_zero`` / ``fifo`` style)."""
    def write(folder: Path) -> Path:
        from tests.corpus.fuzz_formats import build_n3dv

        root = folder / "n3dv"
        build_n3dv(root)
        (root / "cam01.mp4").unlink()
        if special is not None:
            special("cam01.mp4")(root)
        else:
            (root / "cam01.mp4").write_bytes(data)
        return root

    return write


def load_n3dv_cached(root: Path):
    return load_scene(root, cache_dir=root.parent / "cache")


CASES += [
    BadFile("n3dv-video-fifo", n3dv_with_video(fifo), load_n3dv_cached, r"cam01\.mp4: not a regular file",
            MissingImageError, names="cam01.mp4"),
    BadFile("n3dv-video-empty-is-one-line", n3dv_with_video(data=b""), load_n3dv_cached,
            r"cam01\.mp4: cannot read the video \(OSError: .*Invalid data found when processing input\)",
            MissingImageError, names="cam01.mp4"),
]


# ----------------------------------------------------------------------- found by the load oracle (issue 52)


def _written_config() -> bytes:
    import tempfile

    from recon.outputs.files import write_config
    from recon.training.trainer import TrainConfig

    with tempfile.TemporaryDirectory() as tmp:
        return write_config(Path(tmp), TrainConfig(data=Path("procedural"), out=Path(tmp))).read_bytes()


def _config_cut_short() -> bytes:
    """A config.yaml splatforge wrote, cut after a whole line: YAML, but the later fields would take defaults."""
    data = _written_config()
    return data[: data.index(b"\n", len(data) // 2) + 1]


def _good_ply() -> bytes:
    import tempfile

    from recon.export import write_ply

    with tempfile.TemporaryDirectory() as tmp:
        write_ply(Path(tmp) / "s.ply", random_splats(8, sh_degree=0))
        return (Path(tmp) / "s.ply").read_bytes()


def _png_with_damaged_pixels() -> bytes:
    """A PNG whose pixel data (IDAT) has one byte changed and its CRC left as it was: Pillow decodes it."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(2).integers(0, 256, (H, W, 3), dtype=np.uint8)).save(buf, "PNG")
    data = bytearray(buf.getvalue())
    at = data.index(b"IDAT") + 4 + 20
    data[at] ^= 0x01
    return bytes(data)


ORACLE_FOUND_CASES = [
    BadFile("ply-bytes-after-the-last-row", write_bytes("extra.ply", lambda: _good_ply() + bytes(8)), read_ply,
            r"extra\.ply: 8 bytes follow the last element", SplatFileError),
    BadFile("splat-all-zero-bytes", write_bytes("zeros.splat", lambda: bytes(32 * 64)), read_splat,
            r"zeros\.splat: holds only zero bytes", SplatFileError),
    BadFile("png-pixel-chunk-fails-its-crc", write_bytes("photo.png", _png_with_damaged_pixels), read_image_file,
            r"photo\.png: the image's 'IDAT' chunk at byte \d+ fails its CRC check"),
    BadFile("config-yaml-cut-short", run_folder_with("config.yaml", _config_cut_short), read_run_config,
            r"config\.yaml: cut short \(its last line, '# end of config', is missing\)", ValueError,
            names="config.yaml"),
    BadFile("config-yaml-infinite-float",
            run_folder_with("config.yaml", lambda: b"data: procedural\ninit_scale: 1e400\n"), read_run_config, r"config\.yaml: init_scale: .* is not a finite number", ValueError, names="config.yaml"),
    BadFile("history-unknown-key",
            run_folder_with("history.json", lambda: _history([0.5, 0.4])[:-1] + b', "psnb": []}'), read_run_history, r"history\.json: unknown key\(s\) psnb", ValueError, names="history.json"),
    BadFile("metrics-ssim-out-of-range", run_folder_with("metrics.json", lambda: b'{"test": {"ssim": 1e300}}'),
            read_run_metrics, r"metrics\.json: 'test\.ssim' is 1e\+300, outside SSIM's range", ValueError,
            names="metrics.json"),
    BadFile("metrics-json-is-a-folder", run_folder_with("metrics.json", special=lambda root: (root / "metrics.json")
                                                        .mkdir()),
            read_run_metrics, r"metrics\.json: is a folder", ValueError, names="metrics.json"),
]

CASES += ORACLE_FOUND_CASES


# ------------------------------------------------------ found by the outside corpus (issue 52, fuzz52)


def n3dv_complex_poses(folder: Path) -> Path:
    """An N3DV folder whose poses_bounds.npy holds complex numbers of the right shape (numpy casts them to
    float with a ComplexWarning on stderr: the error was 9 lines)."""
    root = folder / "n3dv"
    root.mkdir()
    np.save(root / "poses_bounds.npy", np.zeros((1, 17), np.complex128))
    return root


def read_metrics_file(path: Path):
    from recon.outputs.files import read_metrics

    return read_metrics(path, "delete it to evaluate again")


OUTSIDE_CORPUS_CASES = [
    BadFile("mesh-obj-face-names-vertex-0", write_bytes("tet.obj", lambda: b"v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\n"
                                                         b"f 1 3 2\nf 0 2 4\n"),
            read_mesh_asset, r"tet\.obj: line 6: a face names vertex 0, but OBJ vertex indices start at 1"),
    BadFile("sdf-mesh-obj-face-names-vertex-0", write_bytes("tet.obj", lambda: b"v 0 0 0\nv 1 0 0\nv 0 1 0\n"
                                                             b"v 0 0 1\nf 1/1 3/1 2/1\nf 0/1 2/1 4/1\n"),
            read_sdf_mesh, r"tet\.obj: line 6: a face names vertex 0"),
    BadFile("n3dv-poses-complex", n3dv_complex_poses, read_n3dv_poses,
            r"poses_bounds\.npy: holds complex128 numbers; LLFF poses are real", DataFormatError,
            names="poses_bounds.npy"),
    BadFile("metrics-top-level-psnr-a-string", write_bytes("metrics.json", lambda: b'{"psnr": "high", "ssim": 0.9}'),
            read_metrics_file, r"metrics\.json: 'psnr' is 'high', not a number"),
]

CASES += OUTSIDE_CORPUS_CASES


def run_with_checkpoint_model(model) -> Callable[[Path], Path]:
    """A 3dgs run folder (tests/corpus/fuzz_formats.py: build_run) whose checkpoint was re-saved with ``model``
    as its model entry (CRCs valid: torch.save wrote it)."""
    def write(folder: Path) -> Path:
        import torch

        from tests.corpus.fuzz_formats import build_run

        root = folder / "run"
        build_run(root)
        ckpt = root / "checkpoints" / "ckpt_00010.pt"
        payload = torch.load(ckpt, weights_only=True)
        payload["model"] = model
        torch.save(payload, ckpt)
        return root

    return write


def read_run_model(root: Path):
    from recon.run.folder import Run

    return Run.open(root).checkpoint_model()


def init_points_over_the_ceiling(folder: Path) -> Path:
    """A Panoptic folder's init_pt_cld.npz of 4.8M+ points of zeros (a real 260 kB deflate): over the 256 MB
    ceiling (recon.data.panoptic.MAX_POINT_CLOUD_BYTES) though within deflate's ratio."""
    import zipfile

    from recon.data.panoptic import MAX_POINT_CLOUD_BYTES

    root = folder / "panoptic"
    root.mkdir()
    rows = MAX_POINT_CLOUD_BYTES // 56 + 1
    header = repr({"descr": "<f8", "fortran_order": False, "shape": (rows, 7)}).encode()
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    with zipfile.ZipFile(root / "init_pt_cld.npz", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        with z.open("data.npy", "w", force_zip64=True) as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
            for start in range(0, rows * 56, 1 << 24):
                f.write(bytes(min(1 << 24, rows * 56 - start)))
    return root


def read_init_points(root: Path):
    from recon.data.panoptic import load_points

    return load_points(root)


def read_config(path: Path):
    from recon.outputs.files import read_config_dict

    return read_config_dict(path)


CASES += [
    BadFile("checkpoint-model-entry-of-another-shape", run_with_checkpoint_model({"method": "3dgs"}), read_run_model,
            r"ckpt_00010\.pt: its model entry is not a 3dgs model \(KeyError", CheckpointError, names="ckpt_00010.pt"),
    BadFile("checkpoint-model-entry-a-list", run_with_checkpoint_model([1, 2]), read_run_model,
            r"ckpt_00010\.pt: its model entry is not a 3dgs model", CheckpointError, names="ckpt_00010.pt"),
    BadFile("checkpoint-model-entry-of-another-method", run_with_checkpoint_model({"method": "nerf"}), read_run_model,
            r"ckpt_00010\.pt: its model entry is not a 3dgs model \(ValueError", CheckpointError,
            names="ckpt_00010.pt"),
    BadFile("panoptic-npz-over-the-point-cloud-ceiling", init_points_over_the_ceiling, read_init_points,
            r"init_pt_cld\.npz: initial point cloud member 'data\.npy' .*268,435,4", DataFormatError,
            names="init_pt_cld.npz"),
    BadFile("config-yaml-over-1-mb", write_bytes("config.yaml", lambda: b"# " + b"x" * (1 << 20) + b"\nsteps: 1\n"),
            read_config, r"config\.yaml: .*1,048,5"),
]

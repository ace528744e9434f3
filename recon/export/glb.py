"""Binary glTF (.glb) with the Khronos ``KHR_gaussian_splatting`` extension: writer and a minimal reader.

One mesh with one ``POINTS`` primitive (mode 0) whose attributes are, all tightly packed float32
unless noted (attribute names as in the ratified KHR spec)::

    POSITION                                   VEC3   centre, glTF axes (+Y up), with min/max
    COLOR_0                                    VEC4   uint8 normalised: RGB = 0.5 + SH_C0 * DC,
                                                      A = opacity (point-cloud fallback only)
    KHR_gaussian_splatting:ROTATION            VEC4   unit quaternion (x, y, z, w)
    KHR_gaussian_splatting:SCALE               VEC3   linear standard deviations, exp(log_scales)
    KHR_gaussian_splatting:OPACITY             SCALAR opacity in [0, 1], sigmoid(logit)
    KHR_gaussian_splatting:SH_DEGREE_l_COEF_n  VEC3   raw real-SH coefficient (r, g, b) of degree l,
                                                      order index n = 0..2l (m = n - l); l = 0 is DC

The primitive's extension object is ``{"kernel": "ellipse", "colorSpace": "srgb_rec709_display",
"projection": "perspective", "sortingMethod": "cameraDistance"}``. The SH basis (with the
Condon-Shortley phase) is the one 3DGS trains with, so coefficients are copied as they are apart
from the axis-flip signs below.

Scale: a review draft of the extension stored log scales; the ratified text, the field notes and the
writers we compare against (``@playcanvas/splat-transform``'s GLB output) use linear scales, which is
what we write. The reader takes the log again.

Axes: glTF is +Y up, right-handed, with +Z towards the viewer -- the same RUB frame as SPZ. From our
OpenCV frame (x right, y down, z forward) this is the reflection-free flip D = diag(1, -1, -1), applied
exactly as :mod:`recon.export.spz` does it (positions, quaternions and SH signs; its helpers are
reused). D is its own inverse, so the reader applies the same flips.

Container: 12-byte header (magic ``glTF``, version 2, total length), a JSON chunk padded with spaces
and a BIN chunk padded with zeros, both to 4 bytes; every buffer view starts 4-byte aligned.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from recon.core.limits import parse_json

from recon.core.atomic import atomic_open
from recon.core.splat_data import SH_C0, SplatData, normalized_quats, num_sh_bases, sh_degree_for_bases, sigmoid

from .splats import SplatFileError, read_regular_file, require_writable
from .spz import OPENCV_TO_RUB, quats_opencv_to_rub, sh_axis_flip_signs

EXTENSION = "KHR_gaussian_splatting"
ROTATION = f"{EXTENSION}:ROTATION"
SCALE = f"{EXTENSION}:SCALE"
OPACITY = f"{EXTENSION}:OPACITY"
OPENCV_TO_GLTF = OPENCV_TO_RUB  # diag(1, -1, -1): glTF +Y up, +Z back

GLB_MAGIC = 0x46546C67  # b"glTF"
GLB_VERSION = 2
CHUNK_JSON = 0x4E4F534A  # b"JSON"
CHUNK_BIN = 0x004E4942  # b"BIN\0"
MODE_POINTS = 0
ARRAY_BUFFER = 34962
FLOAT, UNSIGNED_BYTE, BYTE, UNSIGNED_SHORT, SHORT, UNSIGNED_INT = 5126, 5121, 5120, 5123, 5122, 5125
_COMPONENTS = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4, "MAT4": 16}  # MAT4: skins (avatar_glb.py)
_DTYPES = {FLOAT: "<f4", UNSIGNED_BYTE: "u1", BYTE: "i1", UNSIGNED_SHORT: "<u2", SHORT: "<i2", UNSIGNED_INT: "<u4"}
_NORMALIZE = {UNSIGNED_BYTE: 255.0, BYTE: 127.0, UNSIGNED_SHORT: 65535.0, SHORT: 32767.0}
OPACITY_EPS = 1e-7  # opacities read back are clamped into [eps, 1 - eps] before the logit
MIN_SCALE = 1e-30  # linear scales read back are clamped to this before the log
_ATTRIBUTE_TYPES = {"POSITION": "VEC3", ROTATION: "VEC4", SCALE: "VEC3", OPACITY: "SCALAR"}  # SH: VEC3


def sh_attribute(degree: int, coef: int) -> str:
    """``KHR_gaussian_splatting:SH_DEGREE_{degree}_COEF_{coef}`` (coef = 0..2 degree)."""
    return f"{EXTENSION}:SH_DEGREE_{degree}_COEF_{coef}"


def sh_attribute_names(sh_degree: int) -> list[str]:
    """Attribute names of the K = (d + 1)^2 SH coefficients in our degree-major order."""
    return [sh_attribute(l, n) for l in range(sh_degree + 1) for n in range(2 * l + 1)]


def _align4(n: int) -> int:
    return (n + 3) & ~3


# ------------------------------------------------------------------------------------------ writing


def gltf_attributes(data: SplatData) -> dict[str, np.ndarray]:
    """Attribute name -> array [N, C] (float32, COLOR_0 uint8) in glTF axes, in file order."""
    flip = sh_axis_flip_signs(data.sh_degree, OPENCV_TO_GLTF)
    quats = quats_opencv_to_rub(normalized_quats(data.quats))[:, [1, 2, 3, 0]]  # wxyz -> xyzw
    opacity = sigmoid(data.logit_opacities)
    rgb = np.clip(np.round((0.5 + SH_C0 * data.sh[:, 0, :].astype(np.float64)) * 255.0), 0, 255)
    alpha = np.clip(np.round(opacity * 255.0), 0, 255)[:, None]
    attrs = {
        "POSITION": (data.means.astype(np.float64) * OPENCV_TO_GLTF).astype(np.float32),
        "COLOR_0": np.concatenate([rgb, alpha], axis=1).astype(np.uint8),
        ROTATION: quats.astype(np.float32),
        SCALE: np.exp(data.log_scales.astype(np.float64)).astype(np.float32),
        OPACITY: opacity.astype(np.float32)[:, None],
    }
    sh = data.sh * flip[None, :, None]
    for k, name in enumerate(sh_attribute_names(data.sh_degree)):
        attrs[name] = np.ascontiguousarray(sh[:, k, :], dtype=np.float32)
    return attrs


def encode_glb(data: SplatData, generator: str = "splatforge") -> bytes:
    """GLB file contents for ``data`` (must be non-empty and finite)."""
    n = len(data)
    accessors, views, attributes, blobs = [], [], {}, []
    offset = 0
    for name, arr in gltf_attributes(data).items():
        arr = np.ascontiguousarray(arr)
        width = arr.shape[1]
        type_ = {1: "SCALAR", 3: "VEC3", 4: "VEC4"}[width]
        raw = arr.astype("<f4" if arr.dtype == np.float32 else "u1", copy=False).tobytes()
        views.append({"buffer": 0, "byteOffset": offset, "byteLength": len(raw),
                      "target": ARRAY_BUFFER})
        acc = {"bufferView": len(views) - 1, "componentType": FLOAT if arr.dtype == np.float32
               else UNSIGNED_BYTE, "count": n, "type": type_}
        if arr.dtype == np.uint8:
            acc["normalized"] = True
        if name == "POSITION":  # required by the glTF spec for POSITION
            acc["min"] = [float(v) for v in arr.min(axis=0)]
            acc["max"] = [float(v) for v in arr.max(axis=0)]
        accessors.append(acc)
        attributes[name] = len(accessors) - 1
        pad = _align4(len(raw)) - len(raw)
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    binary = b"".join(blobs)
    primitive = {
        "attributes": attributes,
        "mode": MODE_POINTS,
        "extensions": {EXTENSION: {"kernel": "ellipse", "colorSpace": "srgb_rec709_display",
                                   "projection": "perspective",
                                   "sortingMethod": "cameraDistance"}},
    }
    if data.antialiased:
        primitive["extras"] = {"splatforge": {"antialiased": True}}
    doc = {
        "asset": {"version": "2.0", "generator": generator},
        "extensionsUsed": [EXTENSION],
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0}],
        "meshes": [{"primitives": [primitive]}],
        "buffers": [{"byteLength": len(binary)}],
        "bufferViews": views,
        "accessors": accessors,
    }
    js = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    js += b" " * (_align4(len(js)) - len(js))
    total = 12 + 8 + len(js) + 8 + len(binary)
    return b"".join([
        struct.pack("<III", GLB_MAGIC, GLB_VERSION, total),
        struct.pack("<II", len(js), CHUNK_JSON), js,
        struct.pack("<II", len(binary), CHUNK_BIN), binary,
    ])


def write_glb(path: str | os.PathLike, data: SplatData, force: bool = False) -> None:
    """Write ``data`` as a KHR_gaussian_splatting GLB, atomically (empty / NaN models refused)."""
    require_writable(path, data)
    payload = encode_glb(data)
    with atomic_open(path, force=force) as f:
        f.write(payload)


# ------------------------------------------------------------------------------------------ reading


def parse_glb(path, raw: bytes) -> tuple[dict, bytes]:
    """GLB bytes -> (glTF JSON document, BIN chunk bytes; b"" if none). Checks the container."""
    if len(raw) < 20:
        raise SplatFileError(path, f"truncated GLB: {len(raw)} bytes")
    magic, version, total = struct.unpack_from("<III", raw)
    if magic != GLB_MAGIC:
        raise SplatFileError(path, "not a GLB file (wrong magic)")
    if version != GLB_VERSION:
        raise SplatFileError(path, f"unsupported GLB version {version}")
    if total != len(raw):
        raise SplatFileError(path, f"GLB length field {total} != file size {len(raw)}")
    doc, binary, offset = None, b"", 12
    while offset < total:
        if offset + 8 > total:
            raise SplatFileError(path, "truncated GLB chunk header")
        length, kind = struct.unpack_from("<II", raw, offset)
        if offset % 4 or length % 4 or offset + 8 + length > total:
            raise SplatFileError(path, "misaligned or truncated GLB chunk")
        chunk = raw[offset + 8: offset + 8 + length]
        if kind == CHUNK_JSON and doc is None:
            doc = parse_json(chunk, path, "GLB JSON chunk", SplatFileError)
        elif kind == CHUNK_BIN and not binary:
            binary = chunk
        offset += 8 + length
    if doc is None:
        raise SplatFileError(path, "GLB has no JSON chunk")
    return doc, binary


def check_glb_container(path, error) -> None:
    """For a file starting with the GLB magic (a mesh handed to trimesh): ``error(path, problem)`` unless its
    length field and every chunk length fit the file, read from the 8-byte chunk headers only (a reader trusting
    a chunk length of 2^32 would allocate that before finding the file shorter), and then its accessors hold
    what they declare (:func:`check_accessor_bounds`). Other files pass unchecked."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or struct.unpack_from("<I", head)[0] != GLB_MAGIC:
            return
        total = struct.unpack_from("<I", head, 8)[0]
        if total != size:
            raise error(path, f"GLB length field {total:,} != file size {size:,}; the file is truncated or damaged")
        offset = 12
        while offset < total:
            f.seek(offset)
            chunk = f.read(8)
            if len(chunk) < 8:
                raise error(path, "truncated GLB chunk header")
            length = struct.unpack_from("<I", chunk)[0]
            if offset + 8 + length > total:
                raise error(path, f"GLB chunk at byte {offset:,} declares {length:,} bytes, past the end of the "
                                  f"{total:,}-byte file; the file is truncated or damaged")
            offset += 8 + length
    try:
        doc, binary = parse_glb(path, read_regular_file(path))
        check_accessor_bounds(path, doc, binary)
    except SplatFileError as err:
        raise error(path, err.problem) from None


BOUNDS_RTOL = 1e-5
"""Relative tolerance of :func:`check_accessor_bounds` on float components (of the larger of |min|, |max|):
a writer printing float32 bounds as short decimals is not a damaged file."""


def _bounds_mismatch(acc: dict, values: np.ndarray) -> str | None:
    """Why ``values`` [count, components] (the raw components of accessor ``acc``) do not have its declared
    ``min`` / ``max`` as their per-component bounds; None when they do (or declare none)."""
    lo, hi = acc.get("min"), acc.get("max")
    if lo is None and hi is None:
        return None
    width = values.shape[1]
    for name, declared in (("min", lo), ("max", hi)):
        if not (isinstance(declared, list) and len(declared) == width
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in declared)):
            return f"declares {name} {str(declared)[:60]}, not {width} numbers"
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    actual_lo = np.fmin.reduce(values, axis=0).astype(np.float64)  # fmin/fmax: a NaN is left to later checks
    actual_hi = np.fmax.reduce(values, axis=0).astype(np.float64)
    tol = BOUNDS_RTOL * np.maximum(np.abs(lo), np.abs(hi)) if values.dtype.kind == "f" else 0.0
    if (np.abs(actual_lo - lo) <= tol).all() and (np.abs(actual_hi - hi) <= tol).all():
        return None
    fmt = lambda a: "[" + ", ".join(f"{v:.6g}" for v in a) + "]"  # noqa: E731
    return (f"holds values from {fmt(actual_lo)} to {fmt(actual_hi)} but declares min {fmt(lo)} and max "
            f"{fmt(hi)}")


def position_accessors(doc: dict) -> set[int]:
    """Indices of the accessors that mesh primitives name as their POSITION attribute."""
    found = set()
    for mesh in doc.get("meshes") if isinstance(doc.get("meshes"), list) else []:
        for prim in mesh.get("primitives", []) if isinstance(mesh, dict) and isinstance(mesh.get("primitives"), list) \
                else []:
            attrs = prim.get("attributes") if isinstance(prim, dict) else None
            if isinstance(attrs, dict) and isinstance(attrs.get("POSITION"), int) and \
                    not isinstance(attrs.get("POSITION"), bool):
                found.add(attrs["POSITION"])
    return found


def check_accessor_bounds(path, doc: dict, binary: bytes) -> None:
    """SplatFileError unless every POSITION accessor of the GLB document ``doc`` (BIN chunk ``binary``) that
    declares ``min`` / ``max`` lies inside its buffer view and holds data with exactly those bounds. glTF requires
    them of POSITION and its validator reports a mismatch as an error (ACCESSOR_MIN_MISMATCH /
    ACCESSOR_MAX_MISMATCH): a damaged buffer-view ``byteOffset`` or accessor ``count`` that still fits the file
    would otherwise read other bytes (the indices, the colours) as geometry. Other accessors (indices, colours,
    animation keys: exporters' bounds there are often loose, and renderers ignore them), accessors without a buffer
    view (zeros), sparse ones and ones in other buffers are not checked here."""
    if not isinstance(doc, dict):
        raise SplatFileError(path, f"the GLB JSON chunk is a {type(doc).__name__}, not an object; re-export the mesh")
    accessors = doc.get("accessors") if isinstance(doc.get("accessors"), list) else []
    views = doc.get("bufferViews") if isinstance(doc.get("bufferViews"), list) else []
    for index in sorted(position_accessors(doc)):
        acc = accessors[index] if 0 <= index < len(accessors) else None
        if not isinstance(acc, dict) or "bufferView" not in acc or "sparse" in acc or \
                (acc.get("min") is None and acc.get("max") is None):
            continue
        view = views[acc["bufferView"]] if isinstance(acc["bufferView"], int) and \
            0 <= acc["bufferView"] < len(views) else None
        if isinstance(view, dict) and view.get("buffer", 0) != 0:
            continue
        problem = _bounds_mismatch(acc, accessor_components(path, doc, binary, index))
        if problem:
            raise SplatFileError(path, f"accessor {index} {problem}: a buffer view's byteOffset or an accessor's "
                                       f"count is damaged (glTF requires the declared bounds); re-export the mesh")


def _accessor_layout(path, doc: dict, binary: bytes, index: int) -> tuple[dict, np.dtype, int, int, int]:
    """(accessor, component dtype, components, first byte, byte stride) of accessor ``index``,
    checked so its ``count`` rows of ``stride`` bytes lie inside its buffer view and the BIN chunk:
    glTF's rules (count >= 1, offsets >= 0, stride 0 or >= the element size), so a small file can
    never describe more data than it holds."""
    try:
        acc = doc["accessors"][index]
        view = doc["bufferViews"][acc["bufferView"]]
        ncomp = _COMPONENTS[acc["type"]]
        dtype = np.dtype(_DTYPES[acc["componentType"]])
        count = int(acc["count"])
        acc_offset, view_offset = int(acc.get("byteOffset", 0)), int(view.get("byteOffset", 0))
        view_length = int(view["byteLength"])
        elem = dtype.itemsize * ncomp
        stride = int(view.get("byteStride", elem))
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise SplatFileError(path, f"bad or unsupported accessor {index} ({exc!r})") from None
    if view.get("buffer", 0) != 0:
        raise SplatFileError(path, "only GLB-embedded buffers are supported")
    if count < 1:
        raise SplatFileError(path, f"accessor {index} has count {count} (glTF requires >= 1)")
    if min(acc_offset, view_offset, view_length) < 0:
        raise SplatFileError(path, f"accessor {index} has a negative byteOffset {acc_offset} / "
                                   f"{view_offset} or byteLength {view_length}")
    if stride < elem:
        raise SplatFileError(path, f"accessor {index} has byteStride {stride}, less than its "
                                   f"{elem}-byte elements (glTF requires >= the element size)")
    start = view_offset + acc_offset
    end = start + stride * (count - 1) + elem
    if end > view_offset + view_length or end > len(binary):
        raise SplatFileError(path, f"accessor {index} runs past its buffer ({count:,} elements "
                                   f"end at byte {end:,} of {min(view_offset + view_length, len(binary)):,})")
    return acc, dtype, ncomp, start, stride


def accessor_components(path, doc: dict, binary: bytes, index: int) -> np.ndarray:
    """Accessor ``index`` -> its raw components [count, components] in their component type (checked layout:
    :func:`_accessor_layout`); only buffer 0 (the GLB BIN chunk) is supported."""
    acc, dtype, ncomp, start, stride = _accessor_layout(path, doc, binary, index)
    count, elem = int(acc["count"]), dtype.itemsize * ncomp
    end = start + stride * (count - 1) + elem
    rows = np.lib.stride_tricks.as_strided(
        np.frombuffer(binary, dtype=np.uint8, offset=start, count=end - start),
        shape=(count, elem), strides=(stride, 1))
    return np.ascontiguousarray(rows).view(dtype).reshape(count, ncomp)


def read_accessor(path, doc: dict, binary: bytes, index: int) -> np.ndarray:
    """Accessor ``index`` -> float64 array [count, components] (normalised integers mapped to [0,1]
    or [-1,1]); only buffer 0 (the GLB BIN chunk) is supported."""
    out = accessor_components(path, doc, binary, index).astype(np.float64)
    acc = doc["accessors"][index]
    if acc.get("normalized") and acc["componentType"] in _NORMALIZE:
        out = np.maximum(out / _NORMALIZE[acc["componentType"]], -1.0)
    return out


def _check_component_type(path, name: str, acc: dict) -> None:
    """Component types honoured or refused, never misread: POSITION, SCALE and SH are FLOAT (an integer
    POSITION would load as geometry in [-255, 255]); ROTATION and OPACITY may also be normalized integers."""
    ct = acc.get("componentType")
    if ct == FLOAT:
        return
    kind = _DTYPES.get(ct, "unknown")
    if name not in (ROTATION, OPACITY):
        raise SplatFileError(path, f"attribute {name} has componentType {ct} ({kind}); {EXTENSION} stores it "
                                   f"as FLOAT ({FLOAT}): re-export the file")
    if ct not in _NORMALIZE or not acc.get("normalized"):
        raise SplatFileError(path, f"attribute {name} has componentType {ct} ({kind}) without normalized: true; "
                                   f"it must be FLOAT or a normalized integer: re-export the file")


def _check_attribute_shapes(path, doc: dict, attrs: dict, names: list[str]) -> None:
    """Every attribute in ``names`` has POSITION's count and its expected type (VEC3, VEC4, SCALAR)."""
    accessors = doc.get("accessors") if isinstance(doc.get("accessors"), list) else []
    expected_count = None
    for name in names:
        index = attrs[name]
        acc = accessors[index] if isinstance(index, int) and 0 <= index < len(accessors) else None
        if not isinstance(acc, dict):
            raise SplatFileError(path, f"attribute {name} points at a missing accessor {index!r}")
        want = _ATTRIBUTE_TYPES.get(name, "VEC3")
        if acc.get("type") != want:
            raise SplatFileError(path, f"attribute {name} is {acc.get('type')}, expected {want}")
        _check_component_type(path, name, acc)
        if expected_count is None:
            expected_count = acc.get("count")
        elif acc.get("count") != expected_count:
            raise SplatFileError(path, f"accessor {index} ({name}) has {acc.get('count')} elements, "
                                       f"but POSITION has {expected_count}; all attributes must agree")


def find_splat_primitive(path, doc: dict) -> dict:
    """The first primitive carrying the KHR_gaussian_splatting extension."""
    for mesh in doc.get("meshes", []):
        for prim in mesh.get("primitives", []):
            if EXTENSION in prim.get("extensions", {}):
                if prim.get("mode", 4) != MODE_POINTS:
                    raise SplatFileError(path, f"{EXTENSION} primitive is not POINTS (mode 0)")
                return prim
    raise SplatFileError(path, f"no {EXTENSION} primitive in this glTF")


def _byte_windows(layout: tuple) -> tuple[int, int, int, int]:
    """(first byte, end byte, stride, element bytes) of an accessor's rows from :func:`_accessor_layout`."""
    acc, dtype, ncomp, start, stride = layout
    elem = dtype.itemsize * ncomp
    return start, start + stride * (int(acc["count"]) - 1) + elem, stride, elem


def _rows_share_bytes(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    """Whether two accessors' rows (:func:`_byte_windows`) read a common byte: spans that meet, unless both
    are interleaved with one stride and their windows within a stride are apart."""
    if a[0] >= b[1] or b[0] >= a[1]:
        return False
    if a[2] == b[2] and a[2] > max(a[3], b[3]):  # interleaved in one view: compare offsets within a stride
        da, db = a[0] % a[2], b[0] % b[2]
        return da < db + b[3] and db < da + a[3]
    return True


def _check_disjoint_attributes(path, doc: dict, binary: bytes, attrs: dict, names: list[str]) -> None:
    """SplatFileError when two attributes read the same bytes: a damaged offset or key (``byteOffset`` lost,
    so 0) would otherwise read one attribute's values as another's, a silently wrong model."""
    windows = {name: _byte_windows(_accessor_layout(path, doc, binary, attrs[name])) for name in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            if attrs[a] != attrs[b] and _rows_share_bytes(windows[a], windows[b]):
                raise SplatFileError(path, f"attributes {a} and {b} read the same bytes of the BIN chunk (bytes "
                                           f"{max(windows[a][0], windows[b][0]):,}..); the file is damaged: "
                                           f"re-export it")


def decode_glb(path, raw: bytes) -> SplatData:
    """GLB bytes -> :class:`SplatData` in OpenCV axes (float32 accessors and normalised integer
    rotation/opacity are accepted)."""
    doc, binary = parse_glb(path, raw)
    prim = find_splat_primitive(path, doc)
    attrs = prim["attributes"]
    missing = [a for a in ("POSITION", ROTATION, SCALE, OPACITY, sh_attribute(0, 0))
               if a not in attrs]
    if missing:
        raise SplatFileError(path, f"{EXTENSION} primitive lacks attribute(s) {missing}")

    def get(name):
        return read_accessor(path, doc, binary, attrs[name])

    degree = 0
    while degree < 3 and all(sh_attribute(degree + 1, n) in attrs for n in range(2 * degree + 3)):
        degree += 1
    _check_attribute_shapes(path, doc, attrs, ["POSITION", ROTATION, SCALE, OPACITY]
                            + sh_attribute_names(degree))
    _check_disjoint_attributes(path, doc, binary, attrs, ["POSITION", ROTATION, SCALE, OPACITY]
                               + sh_attribute_names(degree))
    sh = np.stack([get(name) for name in sh_attribute_names(degree)], axis=1)
    sh *= sh_axis_flip_signs(degree, OPENCV_TO_GLTF)[None, :, None]
    xyzw = get(ROTATION)
    opacity = np.clip(get(OPACITY)[:, 0], OPACITY_EPS, 1.0 - OPACITY_EPS)
    n = xyzw.shape[0]
    if n == 0:
        raise SplatFileError(path, "empty model (0 splats)")
    extras = prim.get("extras", {}).get("splatforge", {}) if isinstance(prim.get("extras"), dict) else {}
    assert sh.shape == (n, num_sh_bases(degree), 3) and sh_degree_for_bases(sh.shape[1]) == degree
    return SplatData(
        means=get("POSITION") * OPENCV_TO_GLTF,
        quats=quats_opencv_to_rub(xyzw[:, [3, 0, 1, 2]]),
        log_scales=np.log(np.maximum(get(SCALE), MIN_SCALE)),
        logit_opacities=np.log(opacity) - np.log1p(-opacity),
        sh=sh,
        antialiased=bool(extras.get("antialiased", False)),
    )


def read_glb(path: str | os.PathLike) -> SplatData:
    """Read a KHR_gaussian_splatting GLB (ours, or another writer's float layout)."""
    return decode_glb(path, read_regular_file(path))


# ------------------------------------------------------------------------------------------ dispatch


def all_formats() -> dict:
    """The splat formats of :data:`recon.export.FORMATS` plus ``glb``: key -> (reader, writer)."""
    from . import FORMATS

    return {**FORMATS, "glb": (read_glb, write_glb)}


def format_key(path, fmt: str | None = None) -> str:
    """'ply' | 'splat' | 'spz' | 'glb' from ``fmt`` or else the suffix of ``path``."""
    key = (fmt or os.path.splitext(os.fspath(path))[1]).lower().lstrip(".")
    if key not in all_formats():
        raise SplatFileError(path, f"unknown splat format {key or '(no suffix)'!r} "
                                   f"(known: .ply, .splat, .spz, .glb)")
    return key


def read_any(path: str | os.PathLike, fmt: str | None = None) -> SplatData:
    """Read any supported model (PLY, .splat, SPZ, GLB); format from ``fmt`` or the suffix."""
    reader, _ = all_formats()[format_key(path, fmt)]
    return reader(path)


def write_any(path: str | os.PathLike, data: SplatData, fmt: str | None = None,
              force: bool = False):
    """:func:`recon.export.write_splats` extended with ``glb``: drops NaN/Inf splats, refuses empty
    models and (without ``force``) existing files, writes atomically; returns an ExportResult."""
    from . import ExportResult, write_splats
    from recon.core.atomic import refuse_overwrite

    key = format_key(path, fmt)
    if key != "glb":
        return write_splats(path, data, format=key, force=force)
    refuse_overwrite(path, force)
    clean, dropped = data.drop_nonfinite()
    if len(clean) == 0:
        why = f" (all {dropped} splats had NaN/Inf values)" if dropped else ""
        raise SplatFileError(path, f"refusing to write an empty model{why}")
    write_glb(path, clean, force=force)
    return ExportResult(Path(path), key, len(clean), dropped)

"""The fuzz oracle: is a mutated file that still loads a *correct* load?

``scripts/fuzz_readers.py`` counts a variant whose reader returned as ``load``. That is only fine when what
was loaded is right. A reader's result is flattened by :func:`canonical` into ``{path: numpy array}`` (SplatData
fields, dataclass fields, dict keys, list items, torch tensors and modules' state dicts, meshes' vertices and
faces; strings as 0-d string arrays), and :func:`judge` compares a variant's load with the good file's:

- **finite**: every float leaf is finite (a NaN or Inf that passes a reader reaches the rasterizer or an
  exported file), except in the formats of :data:`NONFINITE_ALLOWED`, whose writers write NaN themselves;
- **in range**: the checks of :data:`RANGE_RULES` (image sizes and focal lengths positive, quaternions not zero,
  opacities in [0, 1], ...) hold;
- **local**: the load equals the good one, or differs only where the mutation touched:
  - a truncation may only drop records: each array equals the good one, a prefix of it along axis 0 or a subset
    of its rows (a format without a count, like ``.splat`` or OBJ, cannot tell a file cut at a record boundary
    from a shorter file);
  - a point mutation (a bit flip, a replaced word or number) may change at most :data:`MAX_UNITS` units, a unit
    being one row of a table (an array of more than :data:`TABLE_ROWS` rows) or one small array or scalar;
  - any other variant (nesting, a wrong type, zeros, an empty file) must not load differently at all.

A variant judged otherwise is ``wrong``: a silently wrong result, counted in the fuzz table and 0 in CI.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

MAX_UNITS = 4  # units a point mutation may change (a camera's rotation: its 4x4 world-to-camera and centre...)
TABLE_ROWS = 4  # arrays with more rows than this are tables: each row is a unit
MAX_DEPTH = 8
MAX_LEAVES = 20_000
POINT_MUTATIONS = ("flip-", "word-", "qword-", "number-", "float-")


# ---------------------------------------------------------------------------------------- flattening


def _leaf(value) -> np.ndarray | None:
    """A numpy array for a leaf value (arrays, tensors, numbers, strings, paths), None for a container."""
    if isinstance(value, np.ndarray):
        return value
    if type(value).__module__.startswith("torch") and hasattr(value, "detach") and hasattr(value, "numpy"):
        t = value.detach().cpu()
        return (t.float() if t.dtype.is_floating_point and t.dtype != t.float().dtype and t.element_size() < 4
                else t).numpy()
    if isinstance(value, (bool, int, float, complex, np.generic)):
        return np.asarray(value)
    if isinstance(value, (str, os.PathLike, bytes)):
        return np.asarray(os.fspath(value) if isinstance(value, os.PathLike) else value)
    if value is None:
        return np.asarray("None")
    return None


def _triangle_set(tri: np.ndarray) -> np.ndarray:
    """Triangles [F, 3, 3] in a canonical order: each rotated to start at its smallest corner (winding kept),
    then sorted, so a reader that reorders faces or renumbers vertices loads the same set."""
    tri = np.ascontiguousarray(tri, dtype=np.float64)
    keys = [np.lexsort(corner.T[::-1]) for corner in tri]  # corner order per triangle by coordinates
    rolled = np.stack([np.roll(t, -int(k[0]), axis=0) for t, k in zip(tri, keys)]) if len(tri) else tri
    order = np.lexsort(rolled.reshape(len(rolled), -1).T[::-1]) if len(rolled) else np.arange(0)
    return rolled[order]


def _children(value):
    """(key, child) pairs of a container value; [] for opaque objects. A SplatData (or SpaceTimeData) is taken after
    ``drop_nonfinite``: the splat readers' documented contract leaves splats holding NaN/Inf to their callers,
    which drop them (viewer, export, render) before anything is drawn or written."""
    from recon.core.spacetime_data import FIELDS4, SpaceTimeData
    from recon.core.splat_data import SplatData

    if isinstance(value, SplatData):
        value = value.drop_nonfinite()[0]
        return [(name, getattr(value, name)) for name in ("means", "quats", "log_scales", "logit_opacities", "sh")]
    if isinstance(value, SpaceTimeData):  # ply4d: the same contract (its readers refuse non-finite times only)
        value = value.drop_nonfinite()[0]
        return [(name, getattr(value, name)) for name in FIELDS4]
    if hasattr(value, "vertices") and hasattr(value, "faces"):  # trimesh meshes and mesh records
        v, f = np.asarray(value.vertices), np.asarray(value.faces)
        if f.ndim == 2 and f.size and np.issubdtype(f.dtype, np.integer) and 0 <= f.min() and f.max() < len(v):
            # triangles by their corners' coordinates: a reader may renumber vertices (trimesh merges them)
            return [("vertices", v), ("triangles", _triangle_set(v[f]))]
        return [("vertices", v), ("faces", f)]
    if isinstance(value, dict):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(value)]
    if hasattr(value, "state_dict") and callable(value.state_dict) and type(value).__module__.split(".")[0] in (
            "recon", "torch"):
        try:
            return list(value.state_dict().items())
        except Exception:  # noqa: BLE001 - a module whose state cannot be read: its attributes instead
            pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if hasattr(value, "__dict__") and type(value).__module__.split(".")[0] in ("recon", "viewer", "rasterizer"):
        return [(k, v) for k, v in vars(value).items() if not k.startswith("_") and not callable(v)]
    return []


def canonical(result, tmp: Path | None = None) -> dict[str, np.ndarray]:
    """``{dotted path: array}`` of a reader's result; strings holding the case's temporary folder ``tmp``
    have it replaced by ``<tmp>`` (each case lives in its own folder)."""
    out: dict[str, np.ndarray] = {}
    roots = [] if tmp is None else sorted({str(tmp), os.path.realpath(tmp)}, key=len, reverse=True)
    seen: set[int] = set()

    def walk(value, path: str, depth: int) -> None:
        if len(out) >= MAX_LEAVES or depth > MAX_DEPTH:
            return
        leaf = _leaf(value)
        if leaf is not None:
            if leaf.dtype.kind in "US" and roots:
                text = str(leaf)
                for root in roots:
                    text = text.replace(root, "<tmp>")
                leaf = np.asarray(text)
            out[path or "."] = leaf
            return
        if id(value) in seen:
            return
        seen.add(id(value))
        for key, child in _children(value):
            if not str(key).startswith("_"):  # private caches (a scene's cached slices) are derived, not loaded
                walk(child, f"{path}.{key}" if path else key, depth + 1)

    walk(result, "", 0)
    return out


# ------------------------------------------------------------------------------------------ checks


def nonfinite(canon: dict[str, np.ndarray]) -> list[str]:
    """Paths of float leaves holding NaN or Inf."""
    return [k for k, a in canon.items() if a.dtype.kind in "fc" and a.size and not np.isfinite(a).all()]


def _positive(a: np.ndarray) -> bool:
    return bool((a > 0).all())


def _last(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _rule_sizes(path: str, a: np.ndarray) -> str | None:
    if _last(path) in ("width", "height", "w", "h") and a.dtype.kind in "iuf" and a.ndim == 0 and not _positive(a):
        return f"{path} = {a} (a size must be positive)"
    return None


def _rule_intrinsics(path: str, a: np.ndarray) -> str | None:
    if _last(path) == "K" and a.shape[-2:] == (3, 3) and a.dtype.kind == "f":
        if not (a[..., 0, 0] > 0).all() or not (a[..., 1, 1] > 0).all():
            return f"{path}: focal lengths {a[..., 0, 0].ravel()[:3]}, {a[..., 1, 1].ravel()[:3]} (must be positive)"
    return None


def _rule_quats(path: str, a: np.ndarray) -> str | None:
    if _last(path) in ("quats", "rotations") and a.ndim == 2 and a.shape[1] == 4 and a.dtype.kind == "f":
        norms = np.linalg.norm(a.astype(np.float64), axis=1)
        if (norms == 0).any():
            return f"{path}: {(norms == 0).sum()} zero quaternions"
    return None


def _rule_unit_interval(path: str, a: np.ndarray) -> str | None:
    name = _last(path)
    if name in ("opacities", "opacity", "alpha") and a.dtype.kind == "f" and a.size:
        if (a < 0).any() or (a > 1).any():
            return f"{path}: values in [{a.min()}, {a.max()}], outside [0, 1]"
    if name == "ssim" and a.dtype.kind == "f" and a.size and ((a < -1).any() or (a > 1).any()):
        return f"{path}: SSIM {a.min()}..{a.max()}, outside [-1, 1]"
    return None


def _rule_colors(path: str, a: np.ndarray) -> str | None:
    if _last(path) in ("colors", "rgb", "colours") and a.dtype.kind == "f" and a.size:
        if (a < 0).any() or (a > 1).any():
            return f"{path}: colours in [{a.min()}, {a.max()}], outside [0, 1]"
    return None


RANGE_RULES = (_rule_sizes, _rule_intrinsics, _rule_quats, _rule_unit_interval, _rule_colors)


def out_of_range(canon: dict[str, np.ndarray]) -> list[str]:
    """What :data:`RANGE_RULES` find wrong in a load."""
    found = []
    for path, a in canon.items():
        for rule in RANGE_RULES:
            problem = rule(path, a)
            if problem:
                found.append(problem)
    return found


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _is_prefix(a: np.ndarray, good: np.ndarray) -> bool:
    """``a`` equals ``good[:len(a)]`` (a record-aligned truncation dropped rows at the end)."""
    return a.ndim >= 1 and good.ndim == a.ndim and a.shape[1:] == good.shape[1:] and len(a) <= len(good) \
        and _equal(a, good[:len(a)])


def _rows(a: np.ndarray) -> list[bytes]:
    return [row.tobytes() for row in np.ascontiguousarray(a).reshape(len(a), -1)]


def _row_subset(a: np.ndarray, good: np.ndarray) -> bool:
    """Every row of ``a`` is a row of ``good`` (a truncation dropped records, which a reader may reorder)."""
    if a.ndim < 1 or good.ndim != a.ndim or a.shape[1:] != good.shape[1:] or a.dtype != good.dtype:
        return False
    have = set(_rows(good))
    return all(r in have for r in _rows(a))


def _is_table(a: np.ndarray) -> bool:
    return a.ndim >= 1 and len(a) > TABLE_ROWS


def _units(a: np.ndarray, b: np.ndarray) -> int:
    """Units in which two arrays of one path differ: rows of a table (tables of different lengths: rows in
    one and not the other), else 1."""
    if _is_table(a) and _is_table(b) and a.shape[1:] == b.shape[1:] and a.dtype == b.dtype and len(a) != len(b):
        rows_a, rows_b = set(_rows(a)), set(_rows(b))
        return len(rows_a ^ rows_b)
    if a.shape == b.shape and a.ndim >= 1 and len(a) > TABLE_ROWS and a.dtype.kind == b.dtype.kind:
        flat_a, flat_b = a.reshape(len(a), -1), b.reshape(len(b), -1)
        if a.dtype.kind in "fc":
            diff = ~((flat_a == flat_b) | (np.isnan(flat_a) & np.isnan(flat_b)))
        else:
            diff = flat_a != flat_b
        return int(diff.any(axis=1).sum())
    return 0 if _equal(a, b) else 1


def _changed_rows(a: np.ndarray, b: np.ndarray, record: bool = False) -> set[int] | None:
    """Indices of the rows in which two same-shaped tables (or ``record`` fields) differ; None when they are
    not such arrays."""
    if not ((_is_table(a) or record) and a.ndim >= 1 and a.shape == b.shape and a.dtype.kind == b.dtype.kind):
        return None
    flat_a, flat_b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    diff = flat_a != flat_b
    if a.dtype.kind in "fc":
        diff &= ~(np.isnan(flat_a) & np.isnan(flat_b))
    return set(np.flatnonzero(diff.any(axis=1)).tolist())


def _derived_from_changed_vertices(good: dict, case: dict, key: str) -> bool:
    """Whether a mesh's ``triangles`` (corner coordinates) sit beside ``vertices`` that changed in place
    (same count), so that their changes are those vertices' and not the faces'."""
    vkey = key[: -len("triangles")] + "vertices"
    return vkey in good and vkey in case and good[vkey].shape == case[vkey].shape and \
        good[key].shape == case[key].shape and not _equal(good[vkey], case[vkey])


def _record_groups(good: dict[str, np.ndarray]) -> dict[str, tuple[str, int]]:
    """{path: (parent path, rows)} of the arrays that are fields of records: tables (more than
    :data:`TABLE_ROWS` rows), or small arrays with at least two siblings of the same length (a model of 4
    Gaussians: means, quats, scales... of 4 rows). A record changed is one unit in its group."""
    groups: dict[tuple[str, int], list[str]] = {}
    for key, a in good.items():
        if a.ndim >= 1 and len(a) >= 2:
            groups.setdefault((key.rsplit(".", 1)[0] if "." in key else "", len(a)), []).append(key)
    return {k: g for g, keys in groups.items() for k in keys if g[1] > TABLE_ROWS or len(keys) >= 3}


def differences(good: dict[str, np.ndarray], case: dict[str, np.ndarray]) -> tuple[int, list[str]]:
    """(units changed, the changed paths) between two canonical loads. One record is one unit however many
    fields (paths) hold it: the rows changed in same-shaped record fields (:func:`_record_groups`) are counted
    once per index and group, tables whose lengths differ by their largest row difference; every other changed
    leaf (or one in only one load) is 1."""
    record = _record_groups(good)
    rows: set[tuple] = set()
    resized = small = 0
    paths = []
    for key in sorted(set(good) | set(case)):
        if key not in good or key not in case:
            small, paths = small + 1, paths + [key]
            continue
        if key.endswith("triangles") and _derived_from_changed_vertices(good, case, key):
            continue  # a moved vertex moves the triangles around it: counted once, as that vertex
        if key.endswith("triangles") and good[key].ndim == 3 and case[key].ndim == 3:
            g_rows, c_rows = set(_rows(good[key])), set(_rows(case[key]))  # a set: order is the reader's
            if g_rows != c_rows:
                resized, paths = max(resized, len(g_rows - c_rows), len(c_rows - g_rows)), paths + [key]
            continue
        changed = _changed_rows(good[key], case[key], key in record)
        if changed is not None:
            rows |= {(record.get(key), i) for i in changed}
            paths += [key] if changed else []
            continue
        n = _units(good[key], case[key])
        if n:
            paths.append(key)
            if _is_table(good[key]) and _is_table(case[key]):
                resized = max(resized, n)
            else:
                small += 1
    return len(rows) + resized + small, paths


NONFINITE_ALLOWED = {
    "history-json": "a diverged training records NaN losses (recon/outputs/files.py: read_history)",
    "metrics-json": "a diverged run's metrics are NaN, identical images' PSNR infinite (read_metrics)",
}
"""Formats whose writer itself may write NaN/Inf: there a non-finite value is in the format's domain."""


VALID_VARIANTS = {
    "colmap-points3D.txt": {"empty": "COLMAP's reconstruct-from-known-poses recipe: an empty points3D.txt is a "
                                     "model without points (recon/data/colmap.py: _text_lines)"},
}
"""Variants that are legitimate files of their format in their own right: their load is not compared with the
good file's (only the finite and range checks apply)."""


_GLTF_DTYPES = {5120: "i1", 5121: "u1", 5122: "<i2", 5123: "<u2", 5125: "<u4", 5126: "<f4"}
_GLTF_WIDTH = {"SCALAR": 1, "VEC2": 2, "VEC3": 3, "VEC4": 4}


def _gltf_accessor(gltf, blob: bytes, index: int) -> np.ndarray | None:
    """Accessor ``index`` of a pygltflib document as [count, components] by glTF 2.0's rules (no buffer view:
    zeros); None when it cannot be decoded or lies outside its buffer view (an invalid file)."""
    acc = gltf.accessors[index]
    dtype, width = np.dtype(_GLTF_DTYPES.get(acc.componentType, "V1")), _GLTF_WIDTH.get(acc.type)
    if dtype.kind == "V" or width is None or acc.sparse is not None or not 0 < acc.count < 10**7:
        return None
    if acc.bufferView is None:
        return np.zeros((acc.count, width), dtype)
    view = gltf.bufferViews[acc.bufferView]
    row = view.byteStride or dtype.itemsize * width
    first = (view.byteOffset or 0) + (acc.byteOffset or 0)
    last = first + row * (acc.count - 1) + dtype.itemsize * width
    if last > (view.byteOffset or 0) + view.byteLength or last > len(blob):
        return None
    raw = np.frombuffer(blob, np.uint8, last - first, first)
    rows = np.stack([raw[i * row:i * row + dtype.itemsize * width] for i in range(acc.count)])
    return rows.view(dtype).reshape(acc.count, width)


def _declared_bounds_hold(acc, values: np.ndarray) -> bool:
    """POSITION's declared min / max (glTF requires them) are its data's bounds, to float32 rounding."""
    width = values.shape[1]
    if not all(isinstance(b, list) and len(b) == width and all(isinstance(v, (int, float)) for v in b)
               for b in (acc.min, acc.max)):
        return False
    return bool(np.allclose(values.min(axis=0), acc.min, rtol=1e-5, atol=0)
                and np.allclose(values.max(axis=0), acc.max, rtol=1e-5, atol=0))


def gltf_mesh_expectation(path: Path, good: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The load a third-party mesh GLB (format ``mesh-glb``) must give, re-derived from the mutated file itself:
    ``good`` with its vertices and triangles replaced by what the file's own accessors hold by glTF 2.0's rules,
    decoded here through pygltflib (not trimesh, the reader under test). A mutation can turn a file into another
    *valid* glTF file that means other geometry (a key ``bufferView`` misspelt: that accessor is zeros, glTF
    2.0 section 3.6.2.1; the Khronos validator reports no error for such a file): the reader must load what
    that file means. Only a file of the fuzzed good file's shape qualifies (one node without a transform, one
    mesh of one indexed triangle primitive, POSITION a FLOAT VEC3 whose declared min / max are its data's
    bounds, every accessor inside its buffer view); for any other file None: the load is judged against the
    good file's as for every format, so an invalid file that loads other geometry stays ``wrong``."""
    import warnings

    import pygltflib

    try:
        with warnings.catch_warnings():  # pygltflib warns of every chunk it does not know
            warnings.simplefilter("ignore")
            gltf = pygltflib.GLTF2().load_binary(str(path))
        blob = gltf.binary_blob() or b""
        (node,), (mesh,) = gltf.nodes, gltf.meshes
        (prim,) = mesh.primitives
        if node.mesh != 0 or node.matrix or node.translation or node.rotation or node.scale or node.children \
                or prim.mode not in (None, 4) or prim.indices is None:
            return None
        pos_acc = gltf.accessors[prim.attributes.POSITION]
        positions = _gltf_accessor(gltf, blob, prim.attributes.POSITION)
        indices = _gltf_accessor(gltf, blob, prim.indices)
    except Exception:  # noqa: BLE001 - anything pygltflib or the shape cannot take: no re-derived expectation
        return None
    if positions is None or indices is None or pos_acc.componentType != 5126 or positions.shape[1] != 3 \
            or not _declared_bounds_hold(pos_acc, positions) or indices.shape[1] != 1 or len(indices) % 3 \
            or indices.dtype.kind != "u" or (len(indices) and indices.max() >= len(positions)):
        return None
    vertices, faces = positions.astype(np.float64), indices.reshape(-1, 3).astype(np.int64)
    expected = dict(good)
    expected["parts.0.vertices"], expected["parts.0.triangles"] = vertices, _triangle_set(vertices[faces])
    return expected


REDERIVED = {"mesh-glb": gltf_mesh_expectation}
"""Formats whose expected load is re-derived from each variant's own bytes (``f(path, good canonical) ->
canonical or None``), because a mutation can make another valid file of the format with another meaning: the
variant is judged against that (:func:`gltf_mesh_expectation`), or against the good load where it returns None."""


def judge(variant: str, good: dict[str, np.ndarray] | None, case: dict[str, np.ndarray],
          allow_nonfinite: bool = False) -> str | None:
    """None when ``case`` (the load of variant ``variant``) is a correct load next to the good file's load
    ``good`` (None: only the finite and range checks, for a file with no good original); else why it is wrong
    (one line). ``allow_nonfinite``: the format's domain includes NaN/Inf
    (:data:`NONFINITE_ALLOWED`)."""
    bad = [] if allow_nonfinite else nonfinite(case)
    if bad:
        return f"loaded non-finite values in {', '.join(bad[:3])}"
    bad = out_of_range(case)
    if bad:
        return f"loaded out-of-range values: {'; '.join(bad[:2])}"
    if good is None:  # a replayed corpus file: no good load to compare with
        return None
    units, paths = differences(good, case)
    if units == 0:
        return None
    if variant.startswith("truncate-"):
        cut = [k for k in paths if k in good and k in case and not _is_prefix(case[k], good[k])
               and not _row_subset(case[k], good[k])]
        extra = [k for k in paths if k not in good or k not in case]
        if not cut and not extra:
            return None
        return f"a truncated file loaded other values than the good one's prefix: {', '.join((cut + extra)[:3])}"
    if variant.startswith(POINT_MUTATIONS):
        if units <= MAX_UNITS:
            return None
        return f"one changed byte changed {units} values or rows: {', '.join(paths[:4])}"
    return f"loaded other values than the good file: {', '.join(paths[:4])}"

"""Every case of the bad-file corpus is refused with one line naming the file (see bad_files.py)."""

from __future__ import annotations

import re
import tracemalloc

import pytest

from recon.export import read_spz
from recon.export.splats import SplatFileError

from .bad_files import BOMB_BYTES, CASES, BadFile, spz_bomb_after_valid_header, spz_bomb_without_header


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_file_is_refused_in_one_line(case: BadFile, tmp_path):
    path = case.write(tmp_path)
    with pytest.raises(case.exception) as info:
        case.read(path)
    message = str(info.value)
    assert "\n" not in message, f"{case.name}: message spans lines: {message!r}"
    assert re.search(case.error, message), f"{case.name}: {message!r} does not match {case.error!r}"
    assert (case.names or path.name) in message, f"{case.name}: {message!r} does not name the file"


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("make", [spz_bomb_after_valid_header, spz_bomb_without_header])
def test_spz_gzip_bomb_is_refused_with_little_memory(make, tmp_path):
    """64 MiB of zeros behind a ~65 KB file: reading allocates a tiny fraction of that."""
    path = tmp_path / "bomb.spz"
    path.write_bytes(make())
    assert path.stat().st_size < BOMB_BYTES // 500
    tracemalloc.start()
    try:
        with pytest.raises(SplatFileError):
            read_spz(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"peak {peak:,} bytes while refusing a {BOMB_BYTES:,}-byte bomb"


# cases whose file declares gigabytes to terabytes: refused from the header, before anything that size
# is allocated (recon/core/limits.py); the nested-JSON cases check the depth scan stays small too
LOW_MEMORY_CASES = ["panoptic-npz-declares-1e12-points", "npy-header-declares-huge",
                    "ply-70kb-comment-declares-2g-vertices", "camera-path-huge-resolution",
                    "image-fit-decompression-bomb", "blender-decompression-bomb-png", "glb-nested-json",
                    "transforms-nested-json"]


@pytest.mark.parametrize("name", LOW_MEMORY_CASES)
def test_huge_declared_sizes_are_refused_with_little_memory(name, tmp_path):
    """Peak Python-side allocation while refusing stays under 32 MiB (the files declare up to 8 TB)."""
    case = next(c for c in CASES if c.name == name)
    path = case.write(tmp_path)
    tracemalloc.start()
    try:
        with pytest.raises(case.exception):
            case.read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"{name}: peak {peak:,} bytes while refusing"

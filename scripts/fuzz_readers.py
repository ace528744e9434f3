"""Fuzz every file reader with hostile variants of files our own writers make; print a JSON table per format.

    python scripts/fuzz_readers.py                   # every format, every variant, in worker subprocesses
    python scripts/fuzz_readers.py --formats ply glb --limit-mb 1024 --max-cases 200
    python scripts/fuzz_readers.py --replay DIR      # every file of an external corpus (docs/fuzzing.md)

Variants of one good file per format (:func:`variants`): truncations at structural boundaries (every
offset in the first bytes, after each header line, powers of two, the last byte), single bit flips at
seeded positions, 32- and 64-bit words in the header replaced by huge counts, decimal numbers in text
headers replaced by huge ones, NaN/Infinity in JSON, nesting, and a folder / FIFO / ``/dev/zero`` where
the file should be. Each format runs in a worker subprocess whose address space is capped at its size
after imports plus ``--limit-mb`` (so an allocation a file cannot back fails instead of swapping); a
crashed worker is restarted at the next case.

Per case the outcome is one of: ``error`` (a user error, one line naming the file: what every bad input
must give), ``load`` (the reader returned a correct load: tests/corpus/load_oracle.py), ``wrong`` (the reader
returned a load that is not: values changed beyond what the mutation touched, NaN/Inf, out of range),
``unclear`` (a user error whose message spans lines or does not name the file), ``traceback`` (any other
exception: a bug), ``crash`` (the worker died), ``hang`` (still reading after :data:`CASE_TIMEOUT` seconds: a
FIFO opened, ``/dev/zero`` read). The table per format: cases, clear errors, loads, wrong, unclear, tracebacks,
crashes, hangs, peak MB (tracemalloc, numpy included), the workers' peak RSS (getrusage) and how far it rose above
the worker's RSS after its setup (``max_rss_added_mb``: a bound on any one case's memory, as the cases run one
after another in the worker), the cases refused with the out-of-memory line (an input needing more than
``--limit-mb``) and the first few failures. ``tests/corpus/test_fuzz_subset.py`` runs a fast subset in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

HUGE_WORDS = (0xFFFFFFFF, 0x7FFFFFFF, 0x10000000)
HUGE_DECIMAL = "4000000000"


# ------------------------------------------------------------------------------------------ formats


def _splats():
    from recon.core.splat_data import random_splats

    return random_splats(16, sh_degree=1)


def _via_file(write: Callable[[Path], None]) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f"
        write(path)
        return path.read_bytes()


def good_ply() -> bytes:
    from recon.export import write_ply

    return _via_file(lambda p: write_ply(p, _splats()))


def good_spz() -> bytes:
    from recon.export.spz import encode_spz

    return encode_spz(_splats())


def good_splat() -> bytes:
    from recon.export.splat_format import encode_splat

    return encode_splat(_splats())


def good_glb() -> bytes:
    from recon.export.glb import encode_glb

    return encode_glb(_splats())


def good_ply4d() -> bytes:
    from tests.corpus.bad_files import ply4d_edited

    with tempfile.TemporaryDirectory() as tmp:
        return ply4d_edited(lambda v: None)(Path(tmp)).read_bytes()


def good_gimg() -> bytes:
    from recon.image.gimg import encode_gimg
    from tests.corpus.bad_files import tiny_image_model

    return encode_gimg(tiny_image_model())


def good_png() -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (12, 8), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


def good_camera_path() -> bytes:
    from tests.corpus.bad_files import camera_path_json

    return camera_path_json()()


def good_keyframes() -> bytes:
    return json.dumps({"keyframes": [{"time": 0.0, "pose": "0,0,0,0,0,0,1"},
                                     {"time": 1.0, "pose": [1, 0, 0, 10, 0, 0, 1]}]}).encode()


def good_npz() -> bytes:
    import io

    import numpy as np

    buf = io.BytesIO()
    np.savez_compressed(buf, data=np.random.default_rng(0).uniform(0, 1, (20, 7)))
    return buf.getvalue()


def good_transforms() -> bytes:
    from tests.corpus.bad_files import nerfstudio_dataset

    with tempfile.TemporaryDirectory() as tmp:
        return (nerfstudio_dataset(lambda m: None)(Path(tmp)) / "transforms.json").read_bytes()


def _read_in_folder(name: str, read: Callable[[Path], object], make_folder=None):
    """A reader of a file that lives in a dataset folder: the case's bytes are written as ``name`` there."""
    def place(path: Path) -> Path:
        folder = path.parent / "folder"
        if make_folder is not None and not folder.exists():
            make_folder(path.parent)
        folder.mkdir(exist_ok=True)
        target = folder / name
        if target.exists() or target.is_symlink():
            target.unlink() if not target.is_dir() else os.rmdir(target)
        os.replace(path, target) if path.is_file() else os.symlink(path.resolve(), target)
        return folder

    def reader(path: Path):
        return read(place(path))

    reader.place = place  # the folder, for tests that hand it to a command
    return reader


def _nerfstudio_folder(tmp: Path) -> None:
    from tests.corpus.bad_files import nerfstudio_dataset

    root = nerfstudio_dataset(lambda m: None)(tmp)
    root.rename(tmp / "folder")


def readers() -> dict[str, tuple[Callable[[], bytes], Callable[[Path], object], str]]:
    """{format: (good bytes, reader of a path, file suffix)}."""
    from recon.data import load_scene
    from recon.data.panoptic import load_points
    from recon.export import read_ply, read_ply4d, read_splat, read_spz
    from recon.export.glb import read_glb
    from recon.hybrid.assets import load_asset_path
    from recon.image.gimg import read_gimg
    from recon.image.io import read_image
    from tests.corpus.fuzz_formats import build_panoptic, formats, in_folder
    from tests.corpus.fuzz_formats_viewer import formats as viewer_formats
    from viewer.camera_path import load_camera_path

    return {
        "ply": (good_ply, read_ply, ".ply"),
        "spz": (good_spz, read_spz, ".spz"),
        "splat": (good_splat, read_splat, ".splat"),
        "glb": (good_glb, read_glb, ".glb"),
        "ply4d": (good_ply4d, read_ply4d, ".ply"),
        "gimg": (good_gimg, read_gimg, ".gimg"),
        "png": (good_png, read_image, ".png"),
        "camera-path": (good_camera_path, load_camera_path, ".json"),
        "keyframes": (good_keyframes, load_asset_path, ".json"),
        # in a copy of a small Panoptic folder, so the CLI tests can hand that folder to `train --data`
        "panoptic-npz": (good_npz, in_folder("panoptic", build_panoptic, "init_pt_cld.npz", load_points), ".npz"),
        "transforms": (good_transforms, _read_in_folder("transforms.json", load_scene, _nerfstudio_folder),
                       ".json"),
        **formats(),  # COLMAP, checkpoints, run-folder metadata, blocks, sequences, meshes, N3DV, D-NeRF, Panoptic
        **viewer_formats(),  # the viewer's loaders, render --splats, dataset masks, the frame cache's entries
    }


# ----------------------------------------------------------------------------------------- variants


def _boundaries(data: bytes) -> list[int]:
    """Offsets where a truncation breaks a structure: the first 64 bytes, after each header line or JSON
    punctuation in the first 4 kB, powers of two, the middle and the last byte."""
    cuts = set(range(0, min(len(data), 64)))
    head = data[:4096]
    cuts |= {m.end() for m in re.finditer(rb"[\n,:\[\]{}]", head)}
    cuts |= {1 << k for k in range(6, 40) if (1 << k) < len(data)}
    cuts |= {len(data) // 2, len(data) - 1}
    return sorted(c for c in cuts if 0 <= c < len(data))


def variants(data: bytes, seed: int = 0, flips: int = 64) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of hostile variants of ``data``."""
    import random
    import struct

    for cut in _boundaries(data):
        yield f"truncate-{cut}", data[:cut]
    rng = random.Random(seed)
    for _ in range(flips):
        pos = rng.randrange(len(data))
        bit = rng.randrange(8)
        yield f"flip-{pos}.{bit}", data[:pos] + bytes([data[pos] ^ (1 << bit)]) + data[pos + 1:]
    for off in range(0, min(len(data) - 4, 64), 4):
        for word in HUGE_WORDS:
            yield f"word-{off}-{word:#x}", data[:off] + struct.pack("<I", word) + data[off + 4:]
    for off in range(0, min(len(data) - 8, 256), 8):  # 64-bit counts of records past the first (COLMAP)
        yield f"qword-{off}", data[:off] + struct.pack("<Q", 1 << 60) + data[off + 8:]
    head = data[:4096]
    for m in list(re.finditer(rb"(?<![\w.])\d+(?![\w.])", head))[:40]:  # integers in text headers / JSON
        yield f"number-{m.start()}", data[:m.start()] + HUGE_DECIMAL.encode() + data[m.end():]
    for m in list(re.finditer(rb"-?\d+\.\d+(e-?\d+)?", head))[:20]:  # floats in JSON / text
        for lit in (b"NaN", b"Infinity", b"1e400"):
            yield f"float-{m.start()}-{lit.decode()}", data[:m.start()] + lit + data[m.end():]
    if data[:1] in (b"{", b"["):
        yield "nested", b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b", " + data.lstrip()[1:]
        yield "not-utf8", data.replace(b'"', b'"\xff', 1)
        yield "wrong-type", b"[1, 2, 3]"
    if re.match(rb"[A-Za-z_]+:", data):  # YAML (config.yaml)
        yield "yaml-nested", data + b"\nx: " + b"[" * 100_000 + b"]" * 100_000 + b"\n"
        yield "yaml-aliases", data + b"\n" + _yaml_alias_bomb()
        yield "yaml-python-tag", data + b"\nx: !!python/object/apply:os.getpid []\n"
        yield "yaml-not-utf8", data.replace(b":", b":\xff", 1)
        yield "yaml-list", b"- 1\n- 2\n"
        yield "yaml-tabs", data.replace(b"\n  ", b"\n\t", 1)
    yield "empty", b""
    yield "zeros-1mb", bytes(1 << 20)


def _yaml_alias_bomb(levels: int = 9) -> bytes:
    """Billion laughs: each anchor a list of ten aliases of the previous one (10^9 leaves from 1 kB)."""
    lines = [b"l0: &l0 [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [".encode() + b", ".join([f"*l{i - 1}".encode()] * 10) + b"]")
    return b"\n".join(lines) + b"\n"


SPECIAL = ("folder", "fifo", "dev-zero")


def write_case(folder: Path, suffix: str, name: str, data: bytes | None) -> Path:
    """The case's path under ``folder``: bytes written, or a special entry for SPECIAL names."""
    path = folder / f"case{suffix}"
    if name == "folder":
        path.mkdir()
    elif name == "fifo":
        os.mkfifo(path)
    elif name == "dev-zero":
        os.symlink("/dev/zero", path)
    else:
        path.write_bytes(data)
    return path


# ------------------------------------------------------------------------------------------- running


def classify(err: BaseException, path: Path) -> str:
    """``error`` for a one-line user error naming the file, ``unclear`` for another user error,
    ``traceback`` for anything else."""
    from recon.core.errors import SplatforgeError, describe, is_user_error

    if not (is_user_error(err) or isinstance(err, SplatforgeError)):
        return "traceback"
    text = describe(err)
    names = path.name in text or "folder" in text or "case" in text
    return "error" if names and "\n" not in str(err) else "unclear"


class CaseTimeout(BaseException):
    """A reader ran past the per-case time limit (a hang: a FIFO opened, ``/dev/zero`` read to its end)."""


def _alarm(signum, frame):
    raise CaseTimeout()


def reference_load(fmt: str, read: Callable[[Path], object], good: bytes, suffix: str) -> dict:
    """The good file's canonical load (tests/corpus/load_oracle.py), what every variant that loads is judged
    against: ``{"canon": {path: array}, "allow_nonfinite": bool, "valid": variants that are legitimate files of
    their own (load_oracle.VALID_VARIANTS), "rederive": the format's load_oracle.REDERIVED rule}``."""
    from tests.corpus.load_oracle import NONFINITE_ALLOWED, REDERIVED, VALID_VARIANTS, canonical

    with tempfile.TemporaryDirectory() as tmp:
        path = write_case(Path(tmp), suffix, "good", good)
        return {"canon": canonical(read(path), Path(tmp)), "allow_nonfinite": fmt in NONFINITE_ALLOWED,
                "valid": set(VALID_VARIANTS.get(fmt, ())), "rederive": REDERIVED.get(fmt)}


def run_case(read: Callable[[Path], object], path: Path, timeout: int = 0, reference: dict | None = None,
             variant: str = "good") -> dict:
    """Run one reader on ``path``: outcome, message and peak MB (tracemalloc: Python and numpy). With
    ``timeout`` seconds (main thread only) a reader still running then is a ``hang``. With ``reference`` (the
    good file's :func:`reference_load`) a load is judged by the oracle (``load_oracle.judge``): a load that is
    not correct is ``wrong``; for a format of ``load_oracle.REDERIVED`` the expected load is re-derived from the
    case's own bytes where that format's rule allows."""
    import signal
    import traceback

    result = None
    expected = None
    if reference is not None and reference.get("rederive") and reference["canon"] is not None and path.is_file() \
            and not path.is_symlink():  # before the read: a folder format's reader moves the file
        expected = reference["rederive"](path, reference["canon"])

    if timeout:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout)
    tracemalloc.start()
    try:
        result = read(path)
        outcome, message = "load", ""
    except CaseTimeout:
        outcome, message = "hang", f"still reading after {timeout} s"
    except MemoryError as err:  # must have become a one-line error before reaching here
        outcome, message = "traceback", f"MemoryError: {err}"
    except Exception as err:  # noqa: BLE001 - classifying is the point
        outcome = classify(err, path)
        message = str(err) if outcome != "traceback" else "".join(
            traceback.format_exception(err)[-3:])
    finally:
        if timeout:
            signal.alarm(0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if outcome == "load" and reference is not None:
        from tests.corpus.load_oracle import canonical, judge

        good = None if variant in reference.get("valid", ()) else expected or reference["canon"]
        why = judge(variant, good, canonical(result, path.parent), reference["allow_nonfinite"])
        if why:
            outcome, message = "wrong", why
    return {"outcome": outcome, "message": message[:400], "peak_mb": round(peak / 2**20, 2)}


def _cap_memory(limit_mb: int) -> None:
    """Cap the address space at what the worker uses now plus ``limit_mb``."""
    import resource

    vm = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
    cap = vm * 1024 + limit_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


CASE_TIMEOUT = 60  # seconds one case may take (the slowest good load, N3DV's videos, takes about 2)


def worker(fmt: str, start: int, limit_mb: int, max_cases: int | None, replay: Path | None = None) -> None:
    """Run format ``fmt``'s cases from index ``start``, one JSON line per case on stdout. With ``replay`` the
    cases are the files of that corpus folder the format's reader is chosen for (judged without a good file:
    finite and in range only)."""
    good, read, suffix = readers()[fmt]
    if replay is None:
        cases = all_cases(good())[:max_cases]
        reference = reference_load(fmt, read, cases[0][1], suffix)
    else:
        good()  # builds the format's template folder now, not inside the first case's time limit
        cases = replay_cases(replay)[fmt][:max_cases]
        reference = {"canon": None, "allow_nonfinite": fmt in _nonfinite_allowed()}
    base = peak_rss_mb()
    _cap_memory(limit_mb)
    for i in range(start, len(cases)):
        name, data = cases[i]
        with tempfile.TemporaryDirectory() as tmp:
            path = write_case(Path(tmp), suffix, name, data)
            result = run_case(read, path, CASE_TIMEOUT, reference, name)
        rss = peak_rss_mb()
        print(json.dumps({"index": i, "name": name, **result, "rss_mb": rss, "rss_added_mb": round(rss - base, 1)}),
              flush=True)


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (MB, getrusage: every case it ran, the imports included)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _nonfinite_allowed() -> dict:
    from tests.corpus.load_oracle import NONFINITE_ALLOWED

    return NONFINITE_ALLOWED


def replay_cases(folder: Path) -> dict[str, list[tuple[str, bytes]]]:
    """{format: [(file name relative to ``folder``, bytes)]} of an external corpus; files no reader is chosen
    for are under ``"unplaced"`` (tests/corpus/replay_formats.py)."""
    from tests.corpus.replay_formats import choose_format, corpus_files

    known = set(readers())
    out: dict[str, list[tuple[str, bytes]]] = {}
    for path in corpus_files(folder):
        fmt = choose_format(path, known) or "unplaced"
        out.setdefault(fmt, []).append((str(path.relative_to(folder)), path.read_bytes()))
    return out


def all_cases(good: bytes) -> list[tuple[str, bytes | None]]:
    """The good file itself (must load), every variant, then the special entries."""
    return [("good", good), *variants(good), *((s, None) for s in SPECIAL)]


def fuzz_format(fmt: str, limit_mb: int, max_cases: int | None, timeout: int, replay: Path | None = None) -> dict:
    """Run every case of ``fmt`` (or, with ``replay``, every corpus file chosen for it) in worker subprocesses
    (restarted after a crash); its table row."""
    results: list[dict] = []
    start, total = 0, None
    while True:
        cmd = [sys.executable, __file__, "--worker", fmt, "--start", str(start), "--limit-mb", str(limit_mb)]
        if max_cases:
            cmd += ["--max-cases", str(max_cases)]
        if replay is not None:
            cmd += ["--replay", str(replay)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            lines, rc, err = proc.stdout.splitlines(), proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exp:
            out = exp.stdout.decode() if isinstance(exp.stdout, bytes) else (exp.stdout or "")
            lines, rc, err = out.splitlines(), -9, "timeout"
        done = [json.loads(line) for line in lines if line.startswith("{")]
        results += done
        start += len(done)
        if rc == 0:
            break
        results.append({"index": start, "name": f"case {start}", "outcome": "crash",
                        "message": (err or "")[-400:], "peak_mb": None})
        start += 1
        if total is None:
            total = len((replay_cases(replay)[fmt] if replay is not None else all_cases(readers()[fmt][0]()))
                        [:max_cases])
        if start >= total:
            break
    return summarise(fmt, results, replayed=replay is not None)


BAD_OUTCOMES = ("traceback", "crash", "hang", "unclear", "wrong")


def summarise(fmt: str, results: list[dict], replayed: bool = False) -> dict:
    """The table row of a format's results (``good_file_loads`` is None for a replayed corpus: it has no good
    file)."""
    count = lambda o: sum(r["outcome"] == o for r in results)  # noqa: E731
    good = next((r for r in results if r["name"] == "good"), None)
    peaks = [r["peak_mb"] for r in results if r.get("peak_mb") is not None]
    rss = [r["rss_mb"] for r in results if r.get("rss_mb") is not None]
    added = [r["rss_added_mb"] for r in results if r.get("rss_added_mb") is not None]
    bad, seen = [], set()
    for r in results:  # one example per distinct failure (outcome and the message's last line)
        lines = (r["message"] or "").strip().splitlines()
        key = (r["outcome"], lines[-1] if lines else "")
        if r["outcome"] in BAD_OUTCOMES and key not in seen:
            seen.add(key)
            bad.append(r)
    return {"format": fmt, "cases": len(results), "clear_errors": count("error"), "loads": count("load"),
            "wrong": count("wrong"),
            "good_file_loads": None if replayed else bool(good and good["outcome"] == "load"),
            "unclear": count("unclear"),
            "tracebacks": count("traceback"), "crashes": count("crash"), "hangs": count("hang"), "peak_mb": max(peaks, default=0.0),
            "peak_rss_mb": max(rss, default=0.0), "max_rss_added_mb": max(added, default=0.0),
            "out_of_memory": sum("out of memory" in (r["message"] or "") for r in results),
            "examples": [{k: r[k] for k in ("name", "outcome", "message")} for r in bad[:8]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--formats", nargs="*", help="formats to fuzz (default: all)")
    ap.add_argument("--limit-mb", type=int, default=1024, help="address space each worker may add (MB)")
    ap.add_argument("--max-cases", type=int, default=None, help="at most this many cases per format")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per worker run")
    ap.add_argument("--replay", type=Path, default=None,
                    help="run every file under this folder through the reader its name, extension or first bytes "
                         "choose (tests/corpus/replay_formats.py) instead of generating variants")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker, args.start, args.limit_mb, args.max_cases, args.replay)
        return 0
    unplaced: list[str] = []
    if args.replay is not None:
        if not args.replay.is_dir():
            print(f"fuzz_readers: --replay {args.replay}: not a folder; give the corpus folder", file=sys.stderr)
            return 2
        grouped = replay_cases(args.replay)
        unplaced = [name for name, _ in grouped.pop("unplaced", [])]
        formats = [f for f in (args.formats or sorted(grouped)) if f in grouped]
    else:
        formats = args.formats or list(readers())
    table = [fuzz_format(f, args.limit_mb, args.max_cases, args.timeout, args.replay) for f in formats]
    print(json.dumps(table if args.replay is None else {"formats": table, "unplaced": unplaced}, indent=1))
    bad = sum(r["wrong"] + r["tracebacks"] + r["crashes"] + r["hangs"] + r["unclear"]
              + (r["good_file_loads"] is False) for r in table)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

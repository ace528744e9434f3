"""scripts/roofline.py: the quick run writes its JSON and plot; every kernel of each step (3DGS, 2DGS, 4DGS,
NeRF) was timed where it runs (called in the step, a share of it); the shares add up to the step with its rest;
every fraction of a roof is positive and not far above 1; the counting helpers on hand-built cases."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"


def load(name: str):
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("roofline")
    roofline = load("roofline")
    import numba

    report = roofline.main(["--quick", "--threads", str(numba.config.NUMBA_NUM_THREADS), "--out", str(out)])
    return report, out


def test_quick_run_writes_json_and_plot(quick_report):
    report, out = quick_report
    assert json.loads((out / "roofline.json").read_text()) == json.loads(json.dumps(report))
    assert (out / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    run = report["runs"][0]
    assert run["peaks"]["flops_per_s"] > 1e8 and run["peaks"]["bytes_per_s"] > 1e8


@pytest.mark.parametrize("group", ["3dgs", "2dgs", "4dgs", "nerf"])
def test_every_kernel_is_timed_in_the_step_and_shares_add_up(quick_report, group):
    report, _ = quick_report
    step = report["runs"][0][group]
    assert step["median_step_seconds"] > 0
    names = [k["kernel"] for k in step["kernels"]]
    assert len(names) == len(set(names)) >= 10
    # a kernel never called means a wrapper missed the code the step runs (renamed or moved); 2dgs and 4dgs
    # share the 3DGS list and leave out what they do not call, but must call their own kernels
    assert step["not_called"] == [] or group in ("2dgs", "4dgs")
    own = {"2dgs": {"surfel composite forward", "surfel composite backward", "surfel projection forward"},
           "4dgs": {"4D slicing forward", "4D slicing backward", "composite forward"}}.get(group, set())
    assert own <= set(names)
    for k in step["kernels"]:
        assert k["calls_per_step"] >= 1, k["kernel"]
        assert 0.0 <= k["share"] < 1.0, k
        if k["seconds"] > 0 and (k["flops"] > 0 or k["bytes"] > 0):  # None: work not counted
            # above the compute roof by half: a counting rule over-counts. Under the memory roof (DRAM stream
            # copy) a working set that stays in the caches (Adam's moments of 800 Gaussians) can run faster
            limit = 1.5 if k["roof"] == "compute" else 4.0
            assert 0.0 < k["fraction_of_roof"] <= limit, k
        assert k["rule"]
    # the timed kernels run inside the step: what they leave is never negative, and they cover a real part of it.
    # The part is a ratio of times, so it moves with the machine's load: the --quick 4DGS step measured 0.37-0.57
    # with a CI run on the other core, and a bound of 0.3 failed 2 runs in about 12 there (7 Dec 2026)
    assert step["rest"]["share"] >= 0.0
    assert 0.1 < step["sum_of_kernel_shares"] <= 1.0
    assert math.isclose(step["sum_of_kernel_shares"] + step["rest"]["share"], 1.0, abs_tol=0.01)


def test_roof_fraction_is_achieved_over_the_attainable_roof():
    roofline = load("roofline")
    pf, pb = 100e9, 10e9  # ridge at 10 flops / byte
    for flops, nbytes in [(1e9, 1e9), (1e9, 1e7), (5e8, 5e7), (0.0, 1e9)]:
        secs = 0.1
        attainable = min(pf, flops / nbytes * pb)
        expected = nbytes / secs / pb if flops == 0 else flops / secs / attainable
        assert math.isclose(roofline.roof_fraction(flops, nbytes, secs, pf, pb), expected, rel_tol=1e-12)


def test_pixels_visited_counts_the_rows_within_each_extent():
    work = load("roofline_work")
    # one camera, 2 x 2 tiles of a 32 x 20 image (the second tile row has 4 pixel rows); tile 0 has two
    # intersections, tile 2 (second row) one, tiles 1 and 3 none
    offsets = np.array([0, 2, 2, 3, 3])
    rows = np.array([[1.0, 8.0],     # rows whose centres lie within 1 of y = 8: 7.5 and 8.5 -> 2 rows
                     [-1.0, 8.0],    # transparent: no rows
                     [np.inf, 18.0]])  # every row of its tile: 4
    assert work.pixels_visited(offsets, rows, 2, 2, 32, 20) == (2 + 0 + 4) * 16


def test_fma_rule_and_measured_peaks_are_positive():
    peaks = load("roofline_peaks")
    assert peaks.fma_flops(10, 2) == 2 * peaks.LANES * 10 * 2
    r = peaks.peak_flops(1, iters=20_000, repeats=2)
    assert r["flops_per_s"] > 0 and r["flops"] == peaks.fma_flops(20_000, 1)
    b = peaks.peak_bandwidth(1, mib=4, repeats=2)
    assert b["bytes"] == 2 * 4 * (1 << 20) and b["bytes_per_s"] > 0

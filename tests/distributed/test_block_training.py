"""Block training on torchrun workers (gloo, CPU): determinism over worker counts, a killed worker, reruns,
and the refusals (another dataset's partition, a held run folder, workers with different configs)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from recon.export import read_splats

from .conftest import ROOT, torchrun, worker_env

STEPS = ["--steps", "150", "--save-every", "15", "--sh-degree", "1", "--eval-every", "0"]


def train_args(city, blocks, out, steps=STEPS):
    return ["--data", str(city), "--blocks", str(blocks), "--out", str(out), *steps]


def run_job(workers, args, max_restarts=0, timeout=300):
    proc = torchrun(workers, args, max_restarts)
    output, _ = proc.communicate(timeout=timeout)
    return proc.returncode, output


def same_model(a: Path, b: Path) -> None:
    x, y = read_splats(a), read_splats(b)
    for name in ("means", "quats", "log_scales", "logit_opacities", "sh"):
        np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)


@pytest.fixture(scope="module")
def reference(tiny_city, tiny_blocks, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "run"
    rc, output = run_job(1, train_args(tiny_city, tiny_blocks, out))
    assert rc == 0, output
    return out


def test_one_worker_trains_every_block_and_merges(reference, tiny_blocks):
    metrics = json.loads((reference / "metrics.json").read_text())
    assert metrics["num_blocks"] == 6 and len(metrics["blocks"]) == 6
    assert metrics["num_gaussians"] == sum(b["kept_gaussians"] for b in metrics["blocks"])
    assert all(b["kept_gaussians"] < b["trained_gaussians"] for b in metrics["blocks"])  # overlap cut away
    assert metrics["test"]["num_views"] > 0 and metrics["test"]["psnr"] > 12
    assert (reference / "blocks.json").is_file() and (reference / "config.yaml").is_file()
    for b in range(6):
        assert (reference / "blocks" / f"block_{b:03d}" / "checkpoints").is_dir()


@pytest.mark.parametrize("workers", [2, 3])
def test_more_workers_give_the_same_model_bit_for_bit(workers, reference, tiny_city, tiny_blocks, tmp_path):
    rc, output = run_job(workers, train_args(tiny_city, tiny_blocks, tmp_path / "run"))
    assert rc == 0, output
    assert f"on {workers} worker(s) (gloo)" in output
    trained_by = {line.split("]")[0] for line in output.splitlines() if "done in" in line}
    assert len(trained_by) >= 2, output  # the blocks were shared
    same_model(reference / "splats.ply", tmp_path / "run" / "splats.ply")


def test_killed_worker_resumes_and_gives_the_same_model(reference, tiny_city, tiny_blocks, tmp_path):
    out = tmp_path / "run"
    proc = torchrun(2, train_args(tiny_city, tiny_blocks, out), max_restarts=1)
    killed = None
    deadline = time.time() + 240
    while killed is None and time.time() < deadline and proc.poll() is None:
        for d in sorted((out / "blocks").glob("block_*")) if (out / "blocks").is_dir() else []:
            ckpts = list((d / "checkpoints").glob("*.pt")) if (d / "checkpoints").is_dir() else []
            if ckpts and not (d / "metrics.json").exists() and (d / ".lock").is_file():
                try:
                    holder = json.loads((d / ".lock").read_text() or "{}")
                    os.kill(int(holder["pid"]), signal.SIGKILL)
                except (ValueError, KeyError, ProcessLookupError):
                    continue  # the lock was being written or released: look again
                killed = d.name
                break
        time.sleep(0.02)
    output, _ = proc.communicate(timeout=300)
    assert killed is not None, f"no block was caught mid-training\n{output}"
    assert proc.returncode == 0, output
    assert "resuming" in output, output
    same_model(reference / "splats.ply", out / "splats.ply")


def test_rerun_skips_finished_blocks_and_resumes_unfinished(reference, tiny_city, tiny_blocks, tmp_path):
    import shutil

    out = tmp_path / "run"
    shutil.copytree(reference, out)
    # block 4 stopped after its first checkpoint: keep only that one, remove its results
    b4 = out / "blocks" / "block_004"
    for p in list(b4.iterdir()):
        if p.name not in ("checkpoints", "config.yaml"):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    ckpts = sorted((b4 / "checkpoints").glob("*.pt"))
    for p in ckpts[1:]:
        p.unlink()
    (out / "splats.ply").unlink()
    rc, output = run_job(2, train_args(tiny_city, tiny_blocks, out))
    assert rc == 0, output
    assert "5 finished before, 1 to train" in output and "block 4: resuming" in output, output
    same_model(reference / "splats.ply", out / "splats.ply")
    rc, output = run_job(1, train_args(tiny_city, tiny_blocks, out))
    assert rc == 0 and "6 finished before, 0 to train" in output and "up to date" in output, output
    (out / "metrics.json").write_text('{"test": [1, 2')  # a damaged merged metrics.json: merge again
    rc, output = run_job(1, train_args(tiny_city, tiny_blocks, out))
    assert rc == 0 and "metrics.json" in output and "merging the blocks again" in output, output
    assert "up to date" not in output, output
    json.loads((out / "metrics.json").read_text())


# ------------------------------------------------------------------------------------------ refusals


def run_cli(args, timeout=120):
    return subprocess.run([sys.executable, "-m", *args], env=worker_env(), capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


def test_partition_from_another_dataset_is_refused(tiny_blocks, tmp_path):
    for module in (["recon.cli", "train"], ["recon.distributed"]):  # the launcher and a worker alone
        r = run_cli([*module, "--data", "procedural", "--blocks", str(tiny_blocks), "--out", str(tmp_path / "x")])
        assert r.returncode == 2, r.stdout + r.stderr
        assert "made from another dataset" in r.stderr and "Traceback" not in r.stderr


def test_run_folder_held_by_another_job_is_refused(tiny_city, tiny_blocks, tmp_path):
    from recon.outputs.files import RunLock

    out = tmp_path / "run"
    with RunLock(out):
        r = run_cli(["recon.distributed", *train_args(tiny_city, tiny_blocks, out)])
        assert r.returncode == 2 and f"pid {os.getpid()}" in r.stderr, r.stderr
        r = run_cli(["recon.cli", "train", *train_args(tiny_city, tiny_blocks, out), "--workers", "2"])
        assert r.returncode == 2 and f"pid {os.getpid()}" in r.stderr, r.stderr


def test_workers_with_different_configs_are_refused(tiny_city, tiny_blocks, tmp_path):
    from recon.distributed.worker import free_port

    port = free_port()
    procs = []
    for rank, steps in ((0, "150"), (1, "151")):
        env = worker_env(RANK=rank, WORLD_SIZE=2, LOCAL_RANK=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        args = train_args(tiny_city, tiny_blocks, tmp_path / "run", ["--steps", steps])
        procs.append(subprocess.Popen([sys.executable, "-m", "recon.distributed", *args, "--timeout-seconds", "60"],
                                      env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 2, err
        assert "workers [1] were started with another configuration" in err


def test_train_blocks_auto_with_finetune_through_the_cli(tiny_city, tmp_path):
    out = tmp_path / "run"
    r = run_cli(["recon.cli", "train", "--data", str(tiny_city), "--blocks", "auto", "--blocks-xy", "2x1",
                 "--workers", "2", "--out", str(out), "--steps", "20", "--sh-degree", "0", "--finetune-steps", "10",
                 "--strategy", "mcmc", "--max-gaussians-per-block", "700"],
                timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "blocks.json").is_file() and (out / "blocks.png").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["num_blocks"] == 2 and len(metrics["workers"]) == 2
    assert metrics["seams"]["seam_pixels"] > 0 and metrics["seams"]["interior_pixels"] > 0
    assert all(w["peak_rss_mib"] > 0 for w in metrics["workers"])
    # each worker kept its block under the per-block cap; the merged scene holds more than one worker could
    per_block = [json.loads((out / "blocks" / f"block_{b:03d}" / "metrics.json").read_text()) for b in range(2)]
    assert all(m["num_gaussians"] <= 700 for m in per_block), [m["num_gaussians"] for m in per_block]
    assert metrics["num_gaussians"] > 700
    # the global fine-tune ran on the merged model (no densification: same count) and was measured before
    assert metrics["finetune_steps"] == 10 and metrics["merged_test"]["num_views"] == metrics["test"]["num_views"]
    ft = json.loads((out / "finetune" / "metrics.json").read_text())
    assert ft["steps"] == 10 and ft["num_gaussians"] == metrics["num_gaussians"]


def test_momentum_mode_keeps_replicas_identical_with_an_idle_worker(tiny_city, tmp_path):
    out = tmp_path / "run"
    rc, output = run_job(2, ["--data", str(tiny_city), "--blocks", "auto", "--blocks-xy", "3x1", "--out", str(out),
                             "--steps", "20", "--sh-degree", "0", "--consistency", "momentum"])
    assert rc == 0, output
    assert "round 2/2: no block left for this worker; joining the exchange" in output, output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["consistency"] == "momentum" and metrics["num_blocks"] == 3
    digests = {w["appearance_digest"] for w in metrics["workers"]}
    assert len(digests) == 1 and None not in digests  # one flattened all-reduce per step kept them equal
    assert (out / "appearance.pt").is_file()


def test_prior_then_blocks_same_model_on_one_and_two_workers(tiny_city, tmp_path):
    """--prior-steps: worker 0 trains the whole-scene prior (the other waits), the blocks refine it (frozen
    context, no densification); 1 and 2 workers give the same merged model, and a rerun skips everything."""
    def args(out):
        return ["--data", str(tiny_city), "--blocks", "auto", "--blocks-xy", "2x1", "--out", str(out), "--steps", "15",
                "--prior-steps", "30", "--sh-degree", "0", "--save-every", "0"]

    rc, output = run_job(1, args(tmp_path / "one"))
    assert rc == 0, output
    assert "training the prior: 30 steps on the whole scene" in output
    prior = json.loads((tmp_path / "one" / "prior" / "metrics.json").read_text())
    assert prior["steps"] == 30
    for b in range(2):  # a block starts from every prior Gaussian and does not densify
        block = json.loads((tmp_path / "one" / "blocks" / f"block_{b:03d}" / "metrics.json").read_text())
        assert block["steps"] == 15 and block["num_gaussians"] == prior["num_gaussians"]
    rc, output = run_job(2, args(tmp_path / "two"))
    assert rc == 0, output
    assert "[worker 1] the prior is ready" in output, output
    same_model(tmp_path / "one" / "splats.ply", tmp_path / "two" / "splats.ply")
    seams = json.loads((tmp_path / "two" / "metrics.json").read_text())["seams"]
    ref = seams["reference"]  # the prior's seam metric: the gap without block borders
    assert seams["gap_change"] == pytest.approx((seams["seam_psnr"] - seams["interior_psnr"])
                                                - (ref["seam_psnr"] - ref["interior_psnr"]))
    rc, output = run_job(1, args(tmp_path / "one"))
    assert rc == 0, output
    assert "training the prior" not in output and "4 blocks" not in output
    assert "2 blocks, 2 finished before, 0 to train" in output, output


def test_momentum_mode_starts_its_blocks_from_the_prior(tiny_city, tmp_path):
    out = tmp_path / "run"
    rc, output = run_job(2, ["--data", str(tiny_city), "--blocks", "auto", "--blocks-xy", "2x1", "--out", str(out),
                             "--steps", "10", "--prior-steps", "20", "--sh-degree", "0", "--save-every", "0",
                             "--consistency", "momentum"])
    assert rc == 0, output
    prior = json.loads((out / "prior" / "metrics.json").read_text())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["consistency"] == "momentum" and metrics["num_blocks"] == 2
    assert all(b["trained_gaussians"] == prior["num_gaussians"] for b in metrics["blocks"])  # prior + frozen context
    assert len({w["appearance_digest"] for w in metrics["workers"]}) == 1
    # the prior was trained through an appearance module of its own, which the rounds started from
    assert (out / "prior" / "appearance.pt").is_file()
    assert f"the blocks start from the prior's appearance module ({out / 'prior' / 'appearance.pt'})" in output, output

"""The PSNR a user reads is the one eval measures (issue 55): each step's PSNR is the full-image PSNR of the
plain render (never one with loss-masked pixels filled in from the target), a loss mask adds a separately
labelled masked PSNR; ``eval --split train`` scores training views; ``--eval-every`` copes with a capture
that has no test views."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from recon.data import load_scene
from recon.data.frame_images import FrameImages
from recon.data.procedural_scene import InMemoryFrame
from recon.training.evaluation import evaluate_model
from recon.training.trainer import TrainConfig, Trainer, named_background
from tests.recon.data.test_data_nerfstudio import W, make_dataset
from tests.recon.tiny_runs import tiny_run
from tests.recon.training.test_train_masks import _masked_dataset


def quiet(*_a) -> None:
    pass


def peek_view(trainer: Trainer) -> int:
    """Index of the training view the next step draws (from a copy of its view generator)."""
    g = torch.Generator()
    g.set_state(trainer.view_gen.get_state())
    return int(torch.randint(len(trainer.images), (1,), generator=g))


def test_wrong_masked_out_half_is_not_a_high_full_image_psnr(tmp_path):
    """Targets equal to the model's own render where the loss mask keeps pixels (left half) and 0.5 off it
    elsewhere: the step reports the full-image PSNR (< 15 dB) and a masked PSNR (> 40 dB) apart."""
    data = _masked_dataset(tmp_path / "d", W // 2)
    trainer = Trainer(TrainConfig(data=data, out=tmp_path / "run", progress=False, init_num_random=300,
                                  background="white"), log=quiet)
    i = peek_view(trainer)
    state = trainer.view_gen.get_state()
    with torch.no_grad():
        _, _, render, _ = trainer.render_views(0)
    trainer.view_gen.set_state(state)  # the step draws the same view and background again
    rgb = render[0].clamp(0, 1)
    target = torch.where(trainer.images.mask(i) > 0.5, rgb, (rgb + 0.5) % 1.0)  # masked-out half: wrong
    rgba = torch.cat([(target * 255).round().to(torch.uint8),
                      torch.full_like(target[..., :1], 255, dtype=torch.uint8)], -1)
    frame = trainer.images.frames[i]
    fields = {f.name: getattr(frame, f.name) for f in dataclasses.fields(frame)}
    trainer.images.replace_frame(i, InMemoryFrame(**fields, rgba=rgba.numpy()))  # its decoded copies dropped
    result = trainer.advance(0)
    assert result.psnr < 15.0, result
    assert result.masked_psnr is not None and result.masked_psnr > 40.0, result
    assert trainer.history.psnr == [round(result.psnr, 4)]
    assert trainer.history.masked_psnr == [round(min(result.masked_psnr, 99.0), 4)]


def test_unmasked_step_has_no_masked_psnr(tmp_path):
    root, _ = make_dataset(tmp_path / "ns")
    trainer = Trainer(TrainConfig(data=root, out=tmp_path / "run", progress=False, init_num_random=200), log=quiet)
    result = trainer.advance(0)
    assert result.masked_psnr is None and trainer.history.masked_psnr == [None]


def test_eval_of_a_training_view_equals_the_steps_psnr(tmp_path):
    """The step's PSNR is of the render before its optimiser step: eval of the same view with the same
    parameters (and SH degree, background) gives the same number."""
    root, _ = make_dataset(tmp_path / "ns")
    trainer = Trainer(TrainConfig(data=root, out=tmp_path / "run", progress=False, init_num_random=300,
                                  background="white"), log=quiet)
    i = peek_view(trainer)
    frame = trainer.scene.frames_train[i]
    bg = named_background("white", trainer.scene)
    before = evaluate_model(trainer.model, [frame], FrameImages([frame]), bg,
                            sh_degree=trainer.active_sh_degree(0))
    result = trainer.advance(0)
    assert abs(before["psnr"] - result.psnr) < 0.01, (before["psnr"], result.psnr)
    assert abs(before["psnr"] - trainer.history.psnr[0]) < 0.01


def test_eval_split_train(tmp_path, capsys):
    from recon.cli import main

    run = tiny_run(tmp_path)
    main(["eval", "--run", str(run), "--split", "train", "--every", "4", "--device", "cpu"])
    printed = capsys.readouterr().out
    assert "train PSNR" in printed
    metrics = json.loads((run / "eval" / "metrics_train.json").read_text())
    assert metrics["train"]["num_views"] >= 1 and metrics["every"] == 4
    assert np.isfinite(metrics["train"]["psnr"])
    assert (run / "eval" / "renders" / "train_000.png").is_file()
    assert not (run / "eval" / "metrics.json").exists()  # the test metrics are not overwritten


def test_eval_every_without_test_views_logs_na(tmp_path):
    root, _ = make_dataset(tmp_path / "ns")
    scene = load_scene(root)
    scene = dataclasses.replace(scene, frames_test=[])
    lines = []
    trainer = Trainer(TrainConfig(data=root, out=tmp_path / "run", progress=False, init_num_random=200, steps=2,
                                  eval_every=1, save_every=0), log=lines.append, scene=scene,
                      writes_outputs=False)
    trainer.run()
    assert "step 1: test PSNR n/a (no test views)" in lines, lines
    assert "step 2: test PSNR n/a (no test views)" in lines, lines


def test_eval_bad_every_is_one_line(tmp_path, capsys):
    import pytest

    from recon.cli import main

    run = tiny_run(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--run", str(run), "--split", "train", "--every", "0", "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "--every 0" in err, err


def test_next_views_are_the_views_the_next_step_draws(tmp_path):
    """The trainer prefetches ``next_views()``: they must be the next step's picks (random backgrounds too)."""
    root, _ = make_dataset(tmp_path / "ns")
    for background, batch in (("white", 1), ("random", 2)):
        trainer = Trainer(TrainConfig(data=root, out=tmp_path / f"run_{background}", progress=False,
                                      init_num_random=200, steps=3, save_every=0, background=background,
                                      batch=batch), log=quiet, writes_outputs=False)
        for step in range(3):
            expected = trainer.next_views()
            with torch.no_grad():
                picks, _, _, _ = trainer.render_views(step)
            assert [i for i, _ in picks] == expected
        trainer.images.close()


def test_prefetch_does_not_change_the_picks(tmp_path):
    """For a seed, the sequence of picks (view indices and random backgrounds) is the same whether the trainer
    prefetches the next views or not: next_views replays the sampling on a copy of the generator."""
    root, _ = make_dataset(tmp_path / "ns")

    def picks_of(prefetch: bool) -> list:
        trainer = Trainer(TrainConfig(data=root, out=tmp_path / "run", progress=False, init_num_random=200,
                                      steps=4, save_every=0, background="random", batch=2, seed=7),
                          log=quiet, writes_outputs=False)
        if not prefetch:
            trainer.next_views = lambda: []  # nothing drawn ahead, nothing prefetched
        out = []
        for step in range(4):
            with torch.no_grad():
                picks, _, _, _ = trainer.render_views(step)
            out += [(i, bg.tolist()) for i, bg in picks]
        trainer.images.close()
        return out

    with_prefetch, without = picks_of(True), picks_of(False)
    assert with_prefetch == without and len({i for i, _ in without}) > 1


CLASSROOM = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "d3dgs_classroom"


@pytest.mark.skipif(not CLASSROOM.is_dir(), reason="shared classroom capture (../shared/data/d3dgs_classroom) absent")
def test_eval_of_a_classroom_training_view_equals_the_4d_steps_psnr(tmp_path):
    """On the real classroom capture (4dgs, a view at its own time): ``eval`` of the view the step draws, with the
    step's parameters, SH degree and background, gives the step's full-image PSNR (what the progress bar shows)."""
    cfg = TrainConfig(data=CLASSROOM, out=tmp_path / "run", method="4dgs", progress=False, init_num_random=2000,
                      background="white", frame_cache="off", test_every=10, save_every=0)
    trainer = Trainer(cfg, log=quiet)
    i = trainer.next_views()[0]
    frame = trainer.scene.frames_train[i]
    before = evaluate_model(trainer.model, [frame], FrameImages([frame]), named_background("white", trainer.scene),
                            sh_degree=trainer.active_sh_degree(0))
    result = trainer.advance(0)
    assert abs(before["psnr"] - result.psnr) < 0.01, (before["psnr"], result.psnr)
    assert abs(before["psnr"] - trainer.history.psnr[0]) < 0.01

"""The CLI prints one line for user errors (SplatforgeError, an OSError naming its file) and, for
anything else, the traceback and a request to report the bug."""

from __future__ import annotations

import errno

import pytest

from recon.training import trainer
from recon.cli import main
from recon.core.errors import BUG_HINT, SplatforgeError, is_user_error


def run_main(argv, capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    err = capsys.readouterr().err
    return exc.value.code, [line for line in err.splitlines() if line.strip()]


TRAIN = ["train", "--data", "procedural", "--data-factor", "4", "--steps", "1", "--no-progress"]


def test_user_error_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(trainer.torch.cuda, "is_available", lambda: False)
    status, lines = run_main([*TRAIN, "--out", tmp_path / "run", "--device", "cuda"], capsys)
    assert status == 2 and len(lines) == 1, lines
    assert lines[0].startswith("splatforge train: error: --device cuda: no CUDA device is available")


@pytest.mark.parametrize("command, target", [
    (TRAIN, "recon.training.trainer.load_training_scene"),  # caught by the train command's own handler
    (["compare", "a", "b"], "recon.commands.compare.read_run"),
])
def test_internal_error_prints_traceback_and_hint(tmp_path, capsys, monkeypatch, command, target):
    def deep(*args, **kw):
        raise ValueError("an internal inconsistency")

    monkeypatch.setattr(target, deep)
    monkeypatch.chdir(tmp_path)
    status, lines = run_main([*command, "--out", tmp_path / "out.png"] if command[0] == "compare" else
                             [*command, "--out", tmp_path / "run"], capsys)
    text = "\n".join(lines)
    assert status == 1
    assert "Traceback (most recent call last)" in text and "in deep" in text
    assert "ValueError: an internal inconsistency" in text
    assert lines[-1] == f"splatforge {command[0]}: error: {BUG_HINT}"
    assert "please report it with the command and the traceback" in BUG_HINT


def test_os_error_with_errno_but_no_file_is_a_bug(tmp_path, capsys, monkeypatch):
    def broken(*args, **kw):
        raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    monkeypatch.setattr("recon.training.trainer.load_training_scene", broken)
    status, lines = run_main([*TRAIN, "--out", tmp_path / "run"], capsys)
    assert status == 1 and lines[-1].endswith(BUG_HINT) and "ConnectionResetError" in "\n".join(lines)


@pytest.mark.parametrize("err, user", [
    (SplatforgeError("x"), True),
    (PermissionError(errno.EACCES, "Permission denied", "/runs/x/config.yaml"), True),
    (FileNotFoundError("--config x.yaml: no such file"), True),  # splatforge's own message, no errno
    (ConnectionResetError(errno.ECONNRESET, "reset"), False),
    (ValueError("bad"), False),
    (KeyError("k"), False),
])
def test_is_user_error(err, user):
    assert is_user_error(err) is user


def user_error_classes():
    from recon.commands.render import MissingEncoderError
    from recon.data.colmap import ColmapFormatError
    from recon.data.scene import DataFormatError, MissingImageError
    from recon.export import SplatFileError
    from recon.models.init_region import InitBoxError
    from recon.losses.lpips import LPIPSWeightsError
    from recon.training.trainer import ConfigMismatchError
    from viewer.camera_path import CameraPathError
    from viewer.scene import ViewerInputError

    return [DataFormatError, MissingImageError, ColmapFormatError, SplatFileError, InitBoxError,
            LPIPSWeightsError, ConfigMismatchError, CameraPathError, ViewerInputError, MissingEncoderError]


def test_user_facing_errors_are_splatforge_errors():
    for cls in user_error_classes():
        assert issubclass(cls, SplatforgeError), cls
    for cls in user_error_classes()[:-1]:
        assert issubclass(cls, ValueError), cls  # existing `except ValueError` callers keep working


def test_device_and_dataset_errors(monkeypatch):
    from recon.data.detect import load_scene
    from recon.core.errors import DeviceError

    monkeypatch.setattr(trainer.torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="--device cuda"):
        trainer.resolve_device("cuda")  # still importable from recon.training.trainer
    with pytest.raises(SplatforgeError, match="unknown dataset format 'bogus'"):
        load_scene(".", format="bogus")




def test_data_factor_is_a_usage_error():
    from recon.data.procedural_scene import procedural_scene
    from recon.core.errors import UsageError

    with pytest.raises(UsageError, match="--data-factor 0: must be a positive integer"):
        procedural_scene(data_factor=0)

"""What ``--data`` and the ``data`` of a run's config.yaml name: the built-in procedural scene or a
dataset folder. One rule for training (:func:`resolved_data` writes config.yaml), resuming
(:func:`recon.trainer.check_resumable` compares with it) and reading runs back (:class:`recon.run.Run`).
"""

from __future__ import annotations

from pathlib import Path

PROCEDURAL = "procedural"  # --data procedural: the built-in scene of recon.data.procedural_scene


def names_procedural_scene(data: str | Path) -> bool:
    """Whether ``data`` names the built-in procedural scene: it is "procedural" and no folder or file
    of that name exists (a dataset folder called "procedural" is a path like any other)."""
    return str(data) == PROCEDURAL and not Path(data).exists()


def resolved_data(data: str | Path) -> Path:
    """``data`` as written to config.yaml: an absolute path, or the procedural scene's name as it is."""
    if names_procedural_scene(data):
        return Path(PROCEDURAL)
    return Path(data).resolve()


def saved_data_path(data: str | Path, run_dir: Path) -> Path:
    """The dataset of a config.yaml's ``data``: absolute as written by this version, or the procedural
    scene; a relative one (older versions) is taken from the working directory when it exists there,
    else from the run folder, else kept as it is (:attr:`recon.run.Run.scene` then says it is not there)."""
    data = Path(data)
    if data.is_absolute() or names_procedural_scene(data) or data.exists():
        return data
    beside = Path(run_dir) / data
    return beside if beside.exists() else data

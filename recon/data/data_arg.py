"""What ``--data`` and the ``data`` of a run's config.yaml name: a built-in procedural scene (static or 4D)
or a dataset folder. One rule for training (:func:`resolved_data` writes config.yaml), resuming
(:func:`recon.training.trainer.check_resumable` compares with it) and reading runs back (:class:`recon.run.folder.Run`).
"""

from __future__ import annotations

from pathlib import Path

PROCEDURAL = "procedural"  # --data procedural: the built-in scene of recon.data.procedural_scene
PROCEDURAL_4D = "procedural-4d"  # --data procedural-4d: the built-in dynamic scene of recon.data.procedural_4d
PROCEDURAL_SCENES = (PROCEDURAL, PROCEDURAL_4D)


def names_procedural_scene(data: str | Path) -> bool:
    """Whether ``data`` names a built-in procedural scene ("procedural", or the dynamic "procedural-4d") and
    no folder or file of that name exists (a dataset folder called so is a path like any other)."""
    return str(data) in PROCEDURAL_SCENES and not Path(data).exists()


def resolved_data(data: str | Path) -> Path:
    """``data`` as written to config.yaml: an absolute path, or the procedural scene's name as it is."""
    if names_procedural_scene(data):
        return Path(str(data))
    return Path(data).resolve()


def saved_data_path(data: str | Path, run_dir: Path) -> Path:
    """The dataset of a config.yaml's ``data``: absolute as written by this version, or the procedural
    scene; a relative one (older versions) is taken from the working directory when it exists there,
    else from the run folder, else kept as it is (:attr:`recon.run.folder.Run.scene` then says it is not there)."""
    data = Path(data)
    if data.is_absolute() or names_procedural_scene(data) or data.exists():
        return data
    beside = Path(run_dir) / data
    return beside if beside.exists() else data

"""A frame-by-frame sequence run folder (``--method neus`` on dynamic data) opened as one object.

The folder :class:`recon.training.frame_sequence.FrameSequence` writes (RUN/config.yaml, RUN/frames/frame_NNNNN/,
RUN/meshes/) is what ``splatforge eval RUN`` and ``splatforge view RUN`` are given. :class:`SequenceRun` opens
it as :class:`recon.run.folder.Run` opens a single run: RUN's config.yaml names the dataset (loaded once, on
first use: the frames' times come from RUN/meshes/manifest.json, so ``view`` never loads it); each frame is a
:class:`Run` of its own folder whose scene is the frame's part of the dataset
(:func:`recon.training.frame_sequence.frame_scene`: its training views, the test views nearest its time), so
a frame evaluates and renders as the trainer saw it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recon.outputs import files as rf
from recon.run.folder import Run
from recon.training.frame_sequence import FRAMES_DIR, frame_folder, frame_scene, frame_times, manifest_times


def is_sequence_run(path: str | Path) -> bool:
    """Whether ``path`` is a sequence run folder: a folder holding config.yaml and frames/ (no error raised)."""
    path = Path(path)
    return path.is_dir() and (path / rf.CONFIG_FILE).is_file() and (path / FRAMES_DIR).is_dir()


@dataclass
class SequenceRun:
    """An opened sequence run folder. Build it with :meth:`open`. ``run``: RUN itself (config, dataset)."""

    run: Run
    _times: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str | Path, data: str | Path | None = None, data_factor: int | None = None
             ) -> "SequenceRun":
        """Open sequence folder ``path`` (``data`` / ``data_factor`` as for :meth:`Run.open`)."""
        return cls(Run.open(path, data=data, data_factor=data_factor))

    @property
    def dir(self) -> Path:
        return self.run.dir

    @property
    def scene(self):
        """The whole dynamic dataset (every time), loaded once."""
        return self.run.scene

    @property
    def times(self) -> list[float]:
        """The frames' times, in order (frame k trains on the views at ``times[k]``): RUN/meshes/manifest.json's
        (:func:`recon.training.frame_sequence.manifest_times`), the dataset's only where the manifest has none."""
        if self._times is None:
            self._times = manifest_times(self.dir)
        if self._times is None:
            self._times = frame_times(self.scene)
        return self._times

    def frame_dir(self, k: int) -> Path:
        """RUN/frames/frame_{k:05d}."""
        return frame_folder(self.dir, k)

    def frame_run(self, k: int) -> Run:
        """Frame ``k`` as a :class:`Run` of its folder whose scene is the frame's views (NotARunError when the
        frame has not started: no config.yaml)."""
        frame = Run.open(self.frame_dir(k), data=self.run.config.data, data_factor=self.run.config.data_factor)
        frame._scene = frame_scene(self.scene, self.times[k], self.times)
        return frame

    def missing(self, k: int) -> str | None:
        """Why frame ``k`` has no model to show (one line), or None when its folder holds a checkpoint."""
        folder = self.frame_dir(k)
        if not rf.list_checkpoints(folder):
            return (f"frame {k} (time {self.times[k]:g}): {folder} holds no checkpoint (not trained yet); rerun "
                    f"`splatforge train` with the same options to train it")
        return None

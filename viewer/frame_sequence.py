"""A frame-by-frame sequence run (``--method neus`` on dynamic data) in the viewer: :class:`FrameSequenceScene`.

The sequence folder (:mod:`recon.run.sequence`) holds one trained field per time step. The viewer shows it as a
dynamic scene like a 4D model (:mod:`viewer.spacetime`) or an avatar (:mod:`viewer.avatar`): the Time folder's
slider and play button drive :meth:`FrameSequenceScene.set_time`, which shows the frame whose time is nearest
(:func:`recon.training.frame_sequence.nearest_time`, the rule that gives test views to frames). A frame is shown
as its baked Gaussians (the frame's splats.ply, else baked from its newest checkpoint when first shown: the
field's occupied cells, :meth:`recon.models.nerf.NerfModel.to_splat_data`), and the last :data:`BAKED_FRAMES`
frames shown are kept (least recently shown dropped first: a trained frame bakes to about a million
Gaussians, so a long sequence cannot keep them all); frames without a checkpoint are left out (one line each when
the scene opens). The frames' times come from the run's mesh manifest: the dataset is not loaded
(:attr:`recon.run.sequence.SequenceRun.times`). The "render" button renders the shown frame's Gaussians.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from viewer.errors import ViewerInputError
from viewer.splat_scene import SplatScene

BAKED_FRAMES = 4  # baked frames kept (the most recently shown)


@dataclass
class FrameSequenceScene(SplatScene):
    """A :class:`SplatScene` whose ``splats`` are the baked Gaussians of the frame nearest normalised ``time``.
    ``frames``: [(time, frame folder)] of the frames that have a model, in time order."""

    frames: list = field(default_factory=list)
    time: float = 0.0
    frame: int = 0
    time_label: str = "frame time"
    time_hint: str = ""
    _baked: OrderedDict = field(default_factory=OrderedDict, repr=False)  # frame index -> SplatData, oldest first
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    def frame_at(self, t: float) -> int:
        """Index into ``frames`` of the frame shown at time ``t`` (the nearest; the earlier on a tie)."""
        from recon.training.frame_sequence import nearest_time

        times = [ft for ft, _ in self.frames]
        return times.index(nearest_time(t, times))

    def splats_of(self, i: int):
        """The baked Gaussians of ``frames[i]``: kept from an earlier call among the last :data:`BAKED_FRAMES`,
        else read or baked (:func:`frame_splats`) and kept (:meth:`keep`)."""
        with self._lock:
            splats = self._baked.get(i)
            if splats is not None:
                self._baked.move_to_end(i)
                return splats
        splats = frame_splats(self.frames[i][1])
        self.keep(i, splats)
        return splats

    def keep(self, i: int, splats) -> None:
        """Keep ``splats`` as frame ``i``'s, the most recently shown; the least recently shown beyond
        :data:`BAKED_FRAMES` are dropped."""
        with self._lock:
            self._baked[i] = splats
            self._baked.move_to_end(i)
            while len(self._baked) > BAKED_FRAMES:
                self._baked.popitem(last=False)

    def set_time(self, t: float) -> bool:
        """Show the frame nearest normalised time ``t`` (clamped into [0, 1]); True when the frame changed."""
        t = min(max(float(t), 0.0), 1.0)
        i = self.frame_at(t)
        splats = self.splats_of(i)
        with self._lock:
            changed = i != self.frame
            self.splats, self.time, self.frame = splats, t, i
        return changed

    def facts(self) -> dict[str, str]:
        facts = super().facts()
        facts.pop("file size", None)
        facts["frames"] = f"{len(self.frames)} (times {self.frames[0][0]:g} .. {self.frames[-1][0]:g})"
        return facts


def frame_splats(folder: Path):
    """A frame run's baked Gaussians: its splats.ply when written, else baked from its newest checkpoint."""
    from recon.export import read_splats
    from recon.outputs import files as rf
    from recon.run.folder import Run

    splats = Path(folder) / rf.SPLATS_FILE
    if splats.is_file():
        return read_splats(splats)
    return Run.open(folder).checkpoint_model(device="cpu").to_splat_data()


def load_frame_sequence_scene(run_dir: Path, verbose: bool = True) -> FrameSequenceScene:
    """The scene of sequence run ``run_dir`` at time 0 (its first frame with a model); ViewerInputError when no
    frame has one."""
    from recon.run.sequence import SequenceRun

    seq = SequenceRun.open(run_dir)
    frames = []
    for k, t in enumerate(seq.times):
        why = seq.missing(k)
        if why is None:
            frames.append((t, seq.frame_dir(k)))
        elif verbose:
            print(f"[splatforge view] {why}", flush=True)
    if not frames:
        raise ViewerInputError(f"{run_dir}: no frame of this sequence has a checkpoint yet; train it first")
    hint = (f"{len(frames)} frames at times {', '.join(f'{t:g}' for t, _ in frames[:6])}"
            f"{' ...' if len(frames) > 6 else ''}; the frame nearest the slider's time is shown")
    scene = FrameSequenceScene(frame_splats(frames[0][1]), Path(run_dir), Path(run_dir), dynamic=True,
                               frames=frames, time_hint=hint)
    scene.keep(0, scene.splats)
    return scene

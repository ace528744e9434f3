"""An avatar (a ``--method meshgs`` run) in the viewer: :class:`AvatarScene`, posed on the server at the GUI's time.

The run's model (:class:`recon.models.MeshGaussians`, from its checkpoint) is a dynamic scene like a 4D one
(:mod:`viewer.spacetime`): the Time folder's slider and play button drive :meth:`AvatarScene.set_time`, which
skins the template into the pose of that time (captured pose k at ``k / (P - 1)``, slerped between poses:
:mod:`recon.avatar.pose_time`), binds the Gaussians to the posed triangles (the fused Numba kernel on the CPU)
and re-sends them. The "render" button renders those world Gaussians (:meth:`SplatScene.render_image`), which
is the model's own render at that time.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from viewer.splat_scene import SplatScene


@dataclass
class AvatarScene(SplatScene):
    """A :class:`SplatScene` whose ``splats`` are ``model`` (a :class:`recon.models.MeshGaussians` on the CPU)
    posed at normalised ``time`` (:meth:`set_time`)."""

    model: Any = None
    time: float = 0.0
    time_label: str = "pose time"
    time_hint: str = ""
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_model(cls, model, source: Path, run_dir: Path | None = None, time: float = 0.0) -> "AvatarScene":
        """The scene of avatar ``model`` read from ``source``, posed at normalised ``time`` first."""
        t = min(max(float(time), 0.0), 1.0)
        P = len(model.avatar.names)
        hint = (f"the {P} captured poses are at times k / {max(P - 1, 1)}; times between two poses slerp their "
                f"joint rotations")
        return cls(model.to_splat_data(t), Path(source), run_dir, dynamic=True, model=model, time=t,
                   time_hint=hint)

    def set_time(self, t: float) -> bool:
        """Pose the avatar at normalised time ``t`` (clamped into [0, 1]); True (the splats changed)."""
        t = min(max(float(t), 0.0), 1.0)
        splats = self.model.to_splat_data(t)
        with self._lock:
            self.splats, self.time = splats, t
        return True

    def facts(self) -> dict[str, str]:
        facts = super().facts()
        facts.pop("file size", None)  # the model is in the run's checkpoint
        av = self.model.avatar
        facts["splats"] = f"{len(self.model):,} bound Gaussians"
        facts["avatar"] = (f"{len(av.faces):,} triangles, {av.skin.num_joints} joints, {len(av.names)} poses "
                           f"({int(av.unseen.sum())} unseen)")
        return facts


def is_avatar_run(run) -> bool:
    """Whether :class:`recon.run.folder.Run` ``run``'s method poses its model by time (meshgs)."""
    return bool(getattr(run.model_class, "POSED_BY_TIME", False))


def load_avatar_scene(run_dir: Path) -> AvatarScene:
    """The avatar scene of a meshgs run (its newest checkpoint's model, on the CPU), at time 0."""
    from recon.run.folder import Run

    run = Run.open(run_dir)
    model = run.load_model(device="cpu")
    return AvatarScene.from_model(model, run_dir, run_dir)

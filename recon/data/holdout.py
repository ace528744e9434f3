"""A held-out test split for multi-view video captures that ship none (``--test-cameras``, ``--test-every``).

Dynamic 3D Gaussians' Panoptic folders without ``test_meta.json`` (and N3DV rigs, beyond their ``cam00``) have no
views to score on. :func:`hold_out` moves frames from the training split to the test split:

- ``test_cameras`` "A,B": every frame of the named cameras (a camera's name is the folder of its frames:
  ``ims/<cam>/...`` for Panoptic, ``<camNN>/...`` for N3DV);
- ``test_every`` N >= 2: every camera's frames at time steps k with ``k % N == N // 2`` (k indexes the sorted
  distinct frame times), so the held-out times lie between training times; 0 = none.

Frames already in the test split stay there. Both options are TrainConfig fields, so a run's config.yaml states
the split and ``splatforge eval`` on the run scores the same held-out frames.
"""

from __future__ import annotations

from pathlib import Path

from recon.core.errors import UsageError
from recon.data.scene import Frame, Scene

VIDEO_FORMATS = ("panoptic", "n3dv")  # formats whose frames are (camera, time step) samples of a rig


def camera_name(frame: Frame) -> str:
    """The camera of a video frame: the folder its image is listed under (``ims/3/000001.jpg`` -> "3")."""
    return Path(frame.name).parent.name


def parse_camera_names(text: str | None) -> list[str]:
    """``"a, b"`` -> ["a", "b"]; None or "" -> []."""
    return [part.strip() for part in str(text or "").split(",") if part.strip()]


def held_out_steps(times: list[float], test_every: int) -> set[float]:
    """The frame times held out by ``test_every`` N: the k-th of the sorted distinct ``times`` with
    ``k % N == N // 2`` (none when N is 0)."""
    if test_every <= 0:
        return set()
    steps = sorted(set(times))
    return {t for k, t in enumerate(steps) if k % test_every == test_every // 2}


def hold_out(scene: Scene, test_cameras: str | None = None, test_every: int = 0) -> Scene:
    """``scene`` with the frames named by ``test_cameras`` / ``test_every`` (module docstring) moved from its
    training to its test split (in place; returned). UsageError, one line, for a camera the capture lacks, a
    format without cameras and time steps, or a split that leaves no training frame."""
    names = parse_camera_names(test_cameras)
    if not names and not test_every:
        return scene
    if int(test_every) != test_every or test_every < 0:
        raise UsageError(f"--test-every {test_every!r}: must be 0 (none) or a positive integer")
    if scene.source_format not in VIDEO_FORMATS:
        raise UsageError(f"--test-cameras / --test-every hold out cameras or time steps of multi-view video "
                         f"({', '.join(VIDEO_FORMATS)}), not of a {scene.source_format} dataset")
    cameras = sorted({camera_name(f) for f in scene.frames_train + scene.frames_test})
    unknown = [n for n in names if n not in cameras]
    if unknown:
        raise UsageError(f"--test-cameras: no camera {unknown[0]!r} in {scene.root} (cameras: {', '.join(cameras)})")
    steps = held_out_steps([f.time for f in scene.frames_train + scene.frames_test], int(test_every))
    held = [f for f in scene.frames_train if camera_name(f) in names or f.time in steps]
    train = [f for f in scene.frames_train if not (camera_name(f) in names or f.time in steps)]
    if not train:
        raise UsageError(f"--test-cameras {test_cameras or ''!r} --test-every {test_every}: holds out all "
                         f"{len(held)} training frames of {scene.root}; no training frame is left")
    scene.frames_train, scene.frames_test = train, list(scene.frames_test) + held
    return scene

"""A built-in dynamic demo/test scene without files (``--data procedural-4d``): a multi-view video.

The ground and the objects of :mod:`recon.data.procedural_scene` (checkered ground, banded red sphere,
striped green sphere, blue box), made to move: over normalised time t in [0, 1]

- the banded red sphere rolls along x (centre moves, the body rotates about the z axis, so its
  latitude bands tilt);
- the striped green sphere spins about the vertical axis (its longitude stripes turn) and hops;
- the blue box turns a quarter turn about the vertical axis and slides along z.

Fixed cameras (a synchronised rig), ``rig="ring"``: ``n_train`` train cameras alternating between 15 and 35
degrees elevation around the scene and one test camera at 25 degrees between two of them; ``rig="dome"`` (a
proxy of a CMU Panoptic dome's layout, issue 55: 27 train + 4 test cameras by default): train cameras on
three rings at 10, 30 and 50 degrees elevation, and ``n_test`` test cameras at 20 and 40 degrees between
them. Each camera films ``n_times`` time steps t_k = k / (n_times - 1). Train frames are every (train camera,
time); test frames are the test cameras at every ``test_time_stride``-th time step. Frames carry ``time``; the scene carries
``points`` with ``point_times`` (ground-truth centres at a random time each, jittered) for
initialisation. Rendered with our rasterizer; world frame as the static scene (up = -y).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rasterizer import Camera
from recon.data.procedural import orbit_cameras
from recon.data.procedural_scene import (GROUND_Y, LOOK_AT, InMemoryFrame, Surfels, box, ground, render_surfels,
                                         sphere)
from recon.data.scene import WHITE, Frame, Scene
from recon.core.errors import UsageError

NAME = "procedural-4d"
RED_RADIUS, GREEN_RADIUS, BOX_HALF = 0.3, 0.22, 0.22


def quat_multiply(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (w, x, y, z) quaternions [..., 4] (rotation ``a`` after ``b``)."""
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def axis_angle_quat(axis, angle: float) -> np.ndarray:
    """[4] unit (w, x, y, z) quaternion of a rotation by ``angle`` radians about ``axis`` [3]."""
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    return np.concatenate([[math.cos(angle / 2)], math.sin(angle / 2) * axis])


def rotation_matrix(q: np.ndarray) -> np.ndarray:
    """[3, 3] rotation of a unit (w, x, y, z) quaternion [4]."""
    w, x, y, z = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


@dataclass
class MovingObject:
    """Surfels in a body frame centred on the origin, and their pose at time t: centre(t) [3], a rotation
    about ``axis`` by ``angle(t)``."""

    body: Surfels
    axis: tuple[float, float, float]
    centre: callable
    angle: callable

    def at(self, t: float) -> Surfels:
        """The object's surfels at time ``t`` (world frame)."""
        q = axis_angle_quat(self.axis, self.angle(t))
        R = rotation_matrix(q)
        means = self.body.means @ R.T + np.asarray(self.centre(t))
        quats = quat_multiply(np.broadcast_to(q, self.body.quats.shape), self.body.quats)
        return Surfels(means, quats, self.body.scales, self.body.colors)


def moving_objects() -> list[MovingObject]:
    """The three moving objects (body frames at the origin; motion laws in the module docstring)."""
    red = sphere((0.0, 0.0, 0.0), RED_RADIUS, 700, "bands")
    green = sphere((0.0, 0.0, 0.0), GREEN_RADIUS, 400, "stripes")
    blue = box((0.0, 0.0, 0.0), BOX_HALF, 8)
    roll = 0.8  # distance rolled along x over the clip
    return [
        MovingObject(red, (0.0, 0.0, 1.0), lambda t: (-0.7 + roll * t, GROUND_Y - RED_RADIUS, 0.2),
                     lambda t: -roll * t / RED_RADIUS),
        MovingObject(green, (0.0, 1.0, 0.0),
                     lambda t: (0.5, GROUND_Y - GREEN_RADIUS - 0.3 * abs(math.sin(2 * math.pi * t)), -0.45),
                     lambda t: 1.5 * math.pi * t),
        MovingObject(blue, (0.0, 1.0, 0.0), lambda t: (0.35, GROUND_Y - BOX_HALF, 0.7 - 0.6 * t),
                     lambda t: 0.5 * math.pi * t),
    ]


def surfels_at(t: float, objects: list[MovingObject] | None = None, floor: Surfels | None = None) -> Surfels:
    """All ground-truth surfels of the scene at time ``t`` (the static ground first)."""
    objects = moving_objects() if objects is None else objects
    floor = ground() if floor is None else floor
    return Surfels.cat([floor] + [o.at(t) for o in objects])


def rig_cameras(n_train: int, width: int, height: int, radius: float, fov: float) -> tuple[list[Camera], Camera]:
    """(train cameras, test camera): ``n_train`` fixed cameras around the scene alternating between 15
    and 35 degrees elevation, and one at 25 degrees half-way between the first two."""
    train = []
    for i in range(n_train):
        elevation = math.radians(15.0 if i % 2 == 0 else 35.0)
        train += orbit_cameras(1, radius, width, height, fov, LOOK_AT, elevation=elevation,
                               start_azimuth=2 * math.pi * i / n_train)
    test = orbit_cameras(1, radius, width, height, fov, LOOK_AT, elevation=math.radians(25.0),
                         start_azimuth=math.pi / n_train)[0]
    return train, test


DOME_ELEVATIONS = (10.0, 30.0, 50.0)  # degrees: the dome rig's train rings (bottom to top)
DOME_TEST_ELEVATIONS = (20.0, 40.0)  # degrees: its test cameras alternate between these


def dome_cameras(n_train: int, n_test: int, width: int, height: int, radius: float, fov: float
                 ) -> tuple[list[Camera], list[Camera]]:
    """(train cameras, test cameras) on a dome around LOOK_AT, all looking at it: ``n_train`` spread over the
    rings of DOME_ELEVATIONS (as evenly as the count allows; each ring's azimuths offset by a third of its
    spacing from the ring below, so the rings interleave), ``n_test`` at alternating DOME_TEST_ELEVATIONS,
    evenly spaced in azimuth starting half a train spacing off the first train camera (between train views)."""
    if n_train < 1 or n_test < 0:
        raise UsageError(f"procedural-4d dome: needs n_train >= 1 and n_test >= 0 (got {n_train}, {n_test})")
    rings = len(DOME_ELEVATIONS)
    train = []
    for r, elevation in enumerate(DOME_ELEVATIONS):
        n = n_train // rings + (1 if r < n_train % rings else 0)
        if n:
            train += orbit_cameras(n, radius, width, height, fov, LOOK_AT, elevation=math.radians(elevation),
                                   start_azimuth=2 * math.pi * r / (rings * n))
    spacing = 2 * math.pi * rings / n_train
    test = [orbit_cameras(1, radius, width, height, fov, LOOK_AT,
                          elevation=math.radians(DOME_TEST_ELEVATIONS[j % len(DOME_TEST_ELEVATIONS)]),
                          start_azimuth=spacing / 2 + 2 * math.pi * j / n_test)[0] for j in range(n_test)]
    return train, test


def procedural_4d_scene(width: int = 96, height: int = 96, n_train: int = 8, n_times: int = 30,
                        test_time_stride: int = 3, radius: float = 3.0, fov_deg: float = 50.0,
                        n_points: int = 2000, seed: int = 0, data_factor: int = 1, rig: str = "ring",
                        n_test: int = 4) -> Scene:
    """The dynamic demo scene as a :class:`Scene` with in-memory frames carrying ``time``.

    Args:
        width, height: image size before ``data_factor`` (integer downscale).
        n_train: fixed train cameras; n_times: time steps filmed by every camera (>= 2), at
            t = k / (n_times - 1).
        test_time_stride: the test camera's frames are time steps 1, 1 + stride, ... (between ends).
        radius, fov_deg: camera distance from LOOK_AT and horizontal field of view.
        n_points: initial points: ground-truth centres at a random time each (jittered by 2 cm), with
            their colours and times.
        rig: "ring" (one test camera) or "dome" (``n_test`` test cameras; the module docstring).
    Returns:
        Scene with train frames ordered camera-major (``cam{c:02d}_t{k:03d}``), test frames (``test_t{k:03d}``;
        dome: ``test{j}_t{k:03d}``), ``points``
        [P, 3] float32, ``point_colors`` [P, 3] uint8, ``point_times`` [P] float32 in [0, 1], white
        background, ``source_format`` "procedural-4d".
    """
    if data_factor < 1 or int(data_factor) != data_factor:
        raise UsageError(f"--data-factor {data_factor!r}: must be a positive integer")
    if n_times < 2 or n_train < 1 or test_time_stride < 1:
        raise UsageError(f"procedural-4d: needs n_times >= 2, n_train >= 1, test_time_stride >= 1 "
                         f"(got {n_times}, {n_train}, {test_time_stride})")
    if rig not in ("ring", "dome"):
        raise UsageError(f"procedural-4d: rig {rig!r}: must be ring or dome")
    W, H = max(1, width // data_factor), max(1, height // data_factor)
    if rig == "dome":
        train_cams, test_cams = dome_cameras(n_train, n_test, W, H, radius, math.radians(fov_deg))
        test_names = [f"test{j}" for j in range(len(test_cams))]
    else:
        train_cams, test_cam = rig_cameras(n_train, W, H, radius, math.radians(fov_deg))
        test_cams, test_names = [test_cam], ["test"]
    times = [k / (n_times - 1) for k in range(n_times)]
    test_steps = list(range(1, n_times, test_time_stride))
    objects, floor = moving_objects(), ground()
    train: list[Frame] = []
    test: list[Frame] = []
    for k, t in enumerate(times):
        s = surfels_at(t, objects, floor)
        with_test = k in test_steps
        images = render_surfels(s, train_cams + (test_cams if with_test else []))
        for c, cam in enumerate(train_cams):
            name = f"cam{c:02d}_t{k:03d}"
            train.append(InMemoryFrame(name, Path(f"<{NAME}>/{name}.png"), cam, time=t, rgba=images[c]))
        if with_test:
            for j, (cam, cam_name) in enumerate(zip(test_cams, test_names)):
                name = f"{cam_name}_t{k:03d}"
                test.append(InMemoryFrame(name, Path(f"<{NAME}>/{name}.png"), cam, time=t,
                                          rgba=images[len(train_cams) + j]))
    train.sort(key=lambda f: f.name)
    points, colors, point_times = initial_points(objects, floor, n_points, seed)
    return Scene(frames_train=train, frames_test=test, points=points, point_colors=colors, background=WHITE,
                 source_format=NAME, root=None, point_times=point_times)


def initial_points(objects: list[MovingObject], floor: Surfels, n: int, seed: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points [n, 3] float32, colours [n, 3] uint8, times [n] float32): surfel centres at a uniformly
    random time each, jittered by 2 cm (colours by 8/255)."""
    rng = np.random.default_rng(seed)
    times = rng.uniform(0.0, 1.0, size=n)
    counts = [len(floor.means)] + [len(o.body.means) for o in objects]
    pick = rng.integers(0, sum(counts), size=n)
    points = np.empty((n, 3))
    colors = np.empty((n, 3))
    for i, (p, t) in enumerate(zip(pick, times)):
        points[i], colors[i] = _surfel_at(objects, floor, counts, int(p), float(t))
    points += rng.normal(0.0, 0.02, size=points.shape)
    colors = np.clip(colors * 255 + rng.normal(0, 8, size=colors.shape), 0, 255)
    return points.astype(np.float32), colors.astype(np.uint8), times.astype(np.float32)


def _surfel_at(objects, floor, counts, index, t):
    """(centre [3], colour [3]) of surfel ``index`` (ground first, then the objects') at time ``t``."""
    if index < counts[0]:
        return floor.means[index], floor.colors[index]
    index -= counts[0]
    for obj, n in zip(objects, counts[1:]):
        if index < n:
            q = axis_angle_quat(obj.axis, obj.angle(t))
            return rotation_matrix(q) @ obj.body.means[index] + np.asarray(obj.centre(t)), obj.body.colors[index]
        index -= n
    raise IndexError(index)

"""View sidecars (recon/export/view_sidecar.py): FILE.cameras.json (3DGS layout) and FILE.view.json beside a
splat file, in its axes; written by ``export``, carried over from an input file, off with --no-view-sidecars."""

import json

import numpy as np
import pytest

from rasterizer.camera import Camera, rigid_inverse, world_to_cam_from_pose
from recon.commands.export import ExportConfig, run_export
from recon.export import write_splats
from recon.export.splats import SplatFileError, random_splats
from recon.export.view_sidecar import (FORMAT, ViewSidecar, read_view_sidecar, sidecar_paths,
                                       up_from_world_to_cams, write_view_sidecars)


def ring_cameras(n=6, z_up=True, radius=3.0):
    """Cameras on a ring 20 degrees above the horizon looking at the origin, world up +z (or -y)."""
    cams = []
    for i in range(n):
        a = 2 * np.pi * i / n
        pos = radius * np.array([np.cos(a), np.sin(a), 0.35])
        fwd = -pos / np.linalg.norm(pos)
        up = np.array([0.0, 0.0, 1.0])
        right = np.cross(fwd, up)
        right /= np.linalg.norm(right)
        down = np.cross(fwd, right)
        c2w = np.eye(4)
        c2w[:3, :3] = np.stack([right, down, fwd], axis=1)
        c2w[:3, 3] = pos
        if not z_up:  # rotate the world so that up is -y (OpenCV)
            Rw = np.array([[1.0, 0, 0], [0, 0, -1.0], [0, 1.0, 0]])
            c2w[:3] = Rw @ c2w[:3]
        K = np.array([[50.0, 0, 31.0], [0, 52.0, 24.0], [0, 0, 1]])
        cams.append(Camera.from_arrays(rigid_inverse(c2w), K, 64, 48))
    return cams


def same_cameras(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.allclose(x.world_to_cam_numpy(), y.world_to_cam_numpy(), atol=1e-9)
        assert np.allclose(x.K_numpy(), y.K_numpy()) and (x.width, x.height) == (y.width, y.height)


def test_round_trip_and_3dgs_layout(tmp_path):
    cams = ring_cameras()
    up = up_from_world_to_cams([c.world_to_cam_numpy() for c in cams])
    assert np.allclose(up, [0, 0, 1], atol=1e-6)
    f = tmp_path / "m.ply"
    write_view_sidecars(f, ViewSidecar(cams, [f"r_{i}" for i in range(6)], up, start=2))
    cams_path, view_path = sidecar_paths(f)
    plain = json.loads(cams_path.read_text())
    assert [e["img_name"] for e in plain] == [f"r_{i}" for i in range(6)]
    e = plain[1]
    assert {"id", "img_name", "width", "height", "position", "rotation", "fx", "fy"} <= set(e)
    c2w = rigid_inverse(cams[1].world_to_cam_numpy())  # world-from-camera, like the original 3DGS
    assert np.allclose(e["position"], c2w[:3, 3]) and np.allclose(e["rotation"], c2w[:3, :3])
    view = json.loads(view_path.read_text())
    assert view["format"] == FORMAT and view["version"] == 1 and view["camera"] == 2
    assert np.allclose(view["up"], [0, 0, 1])
    back = read_view_sidecar(f)
    same_cameras(back.cameras, cams)
    assert back.start == 2 and np.allclose(back.up, up) and back.names[0] == "r_0"
    view_path.unlink()  # the plain 3DGS file alone still gives cameras and an up
    only = read_view_sidecar(f)
    same_cameras(only.cameras, cams)
    assert np.allclose(only.up, [0, 0, 1], atol=1e-6) and only.start == 0


def rotated(cams, axis_angle_deg):
    """``cams`` with the world rotated about x by ``axis_angle_deg`` degrees."""
    a = np.radians(axis_angle_deg)
    Rw = np.eye(4)
    Rw[1:3, 1:3] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return [Camera.from_arrays(c.world_to_cam_numpy() @ np.linalg.inv(Rw), c.K_numpy(), c.width, c.height)
            for c in cams]


def test_one_up_rule_for_export_and_viewer():
    """Export's sidecars and the viewer share up_from_world_to_cams; the viewer only keeps -y for ups near it."""
    from viewer.scene import up_from_cameras
    from viewer.splat_scene import TrainingCamera

    def both(cams):
        return (up_from_world_to_cams([c.world_to_cam_numpy() for c in cams]),
                up_from_cameras([TrainingCamera(f"{i}", c) for i, c in enumerate(cams)]))

    z_up = ring_cameras()
    for up in both(z_up):
        assert np.allclose(up, [0, 0, 1], atol=1e-6)
    tilted = rotated(ring_cameras(z_up=False), 30.0)  # the world's up 30 degrees from -y
    expected = np.array([0.0, -np.cos(np.radians(30)), -np.sin(np.radians(30))])
    export_up, viewer_up = both(tilted)
    assert np.allclose(export_up, expected, atol=1e-6) and np.allclose(viewer_up, [0, -1, 0])
    export_up, viewer_up = both(rotated(ring_cameras(z_up=False), 60.0))  # beyond 45 degrees: both follow
    assert np.allclose(export_up, viewer_up) and abs(export_up[1] + 0.5) < 1e-6
    opposed = ring_cameras(2) + rotated(ring_cameras(2), 180.0)  # ups cancel: no agreement
    for up in both(opposed) + both([]):
        assert np.allclose(up, [0, -1, 0])


def test_writes_are_atomic_and_refuse_overwrite(tmp_path, monkeypatch):
    f = tmp_path / "m.ply"
    sc = ViewSidecar(ring_cameras(), up=np.array([0.0, 0, 1]))
    write_view_sidecars(f, sc)
    before = [p.read_bytes() for p in sidecar_paths(f)]
    with pytest.raises(FileExistsError):
        write_view_sidecars(f, sc)
    import recon.export.view_sidecar as vs

    def broken(obj):
        raise RuntimeError("disk full")

    monkeypatch.setattr(vs, "_json_bytes", broken)
    with pytest.raises(RuntimeError):
        write_view_sidecars(f, sc, force=True)
    assert [p.read_bytes() for p in sidecar_paths(f)] == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.ply.cameras.json", "m.ply.view.json"]  # no temp left


def test_spz_sidecar_is_flipped_like_its_splats(tmp_path):
    cams = ring_cameras(z_up=False)
    sc = ViewSidecar(cams, up=np.array([0.0, -1.0, 0.0]))
    ply, spz = tmp_path / "m.ply", tmp_path / "m.spz"
    write_view_sidecars(ply, sc)
    write_view_sidecars(spz, sc)
    a = json.loads(sidecar_paths(ply)[1].read_text())
    b = json.loads(sidecar_paths(spz)[1].read_text())
    D = np.diag([1.0, -1.0, -1.0])
    assert np.allclose(b["up"], [0, 1, 0])  # SPZ's RUB axes: up is +y
    for ea, eb in zip(a["cameras"], b["cameras"]):
        assert np.allclose(D @ np.array(ea["position"]), eb["position"])
        assert np.allclose(D @ np.array(ea["rotation"]), eb["rotation"])
    same_cameras(read_view_sidecar(spz).cameras, cams)
    assert np.allclose(read_view_sidecar(spz).up, [0, -1, 0])


def test_malformed_sidecar_is_one_line(tmp_path):
    f = tmp_path / "m.ply"
    sidecar_paths(f)[1].write_text('{"format": "something-else"}')
    with pytest.raises(SplatFileError, match="m.ply.view.json"):
        read_view_sidecar(f)
    sidecar_paths(f)[1].write_text("{not json")
    with pytest.raises(SplatFileError, match=r"m.ply.view.json: not valid JSON \(view sidecar"):
        read_view_sidecar(f)
    sidecar_paths(f)[1].unlink()
    sidecar_paths(f)[0].write_bytes(b"[\xff]")
    with pytest.raises(SplatFileError, match="m.ply.cameras.json: view sidecar is not UTF-8"):
        read_view_sidecar(f)


def test_export_carries_sidecars_over_and_no_view_sidecars(tmp_path):
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(50, sh_degree=1, seed=3))
    cams = ring_cameras()
    write_view_sidecars(src, ViewSidecar(cams, up=np.array([0.0, 0, 1]), start=4))
    out = tmp_path / "out.spz"
    report = run_export(ExportConfig(input=src, out=out, quiet=True))
    assert all(p.is_file() for p in sidecar_paths(out))
    assert any("view sidecars" in n for n in report.notes)
    back = read_view_sidecar(out)
    same_cameras(back.cameras, cams)
    assert back.start == 4 and np.allclose(back.up, [0, 0, 1])
    assert np.allclose(json.loads(sidecar_paths(out)[1].read_text())["up"], [0, 0, -1])  # file axes

    off = tmp_path / "off.ply"
    run_export(ExportConfig(input=src, out=off, quiet=True, view_sidecars=False))
    assert off.is_file() and not any(p.exists() for p in sidecar_paths(off))

    bare = tmp_path / "bare.ply"
    write_splats(bare, random_splats(20, sh_degree=0, seed=1))
    report = run_export(ExportConfig(input=bare, out=tmp_path / "bare_out.ply", quiet=True))
    assert any("has none" in n for n in report.notes)
    assert not any(p.exists() for p in sidecar_paths(tmp_path / "bare_out.ply"))


def test_export_refuses_existing_sidecar_before_writing(tmp_path):
    src = tmp_path / "in.ply"
    write_splats(src, random_splats(20, sh_degree=0, seed=2))
    out = tmp_path / "out.ply"
    sidecar_paths(out)[0].write_text("[]")
    with pytest.raises(FileExistsError, match="out.ply.cameras.json"):
        run_export(ExportConfig(input=src, out=out, quiet=True))
    assert not out.exists()


def test_pose_helper_agrees():
    """world_to_cam_from_pose and the sidecar's world-from-camera entries describe the same camera."""
    cam = ring_cameras()[0]
    c2w = rigid_inverse(cam.world_to_cam_numpy())
    from rasterizer.quaternions import rotmat_to_quat

    assert np.allclose(world_to_cam_from_pose(rotmat_to_quat(c2w[:3, :3]), c2w[:3, 3]), cam.world_to_cam_numpy())


def test_export_of_a_run_writes_its_training_cameras(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from recon.run.folder import Run
    from tests.recon.commands.test_export_cli import make_run

    run = make_run(tmp_path, n=30)
    cams = ring_cameras()
    frames = [SimpleNamespace(name=f"r_{i}", camera=c) for i, c in enumerate(cams)]  # the run's dataset
    monkeypatch.setattr(Run, "scene", property(lambda self: SimpleNamespace(frames_train=frames)))
    out = tmp_path / "o.glb"
    report = run_export(ExportConfig(input=run, out=out, quiet=True, evaluate=False))
    assert any("view sidecars" in n for n in report.notes)
    back = read_view_sidecar(out)
    same_cameras(back.cameras, cams)
    assert back.names == [f"r_{i}" for i in range(len(cams))]
    assert back.start == 0 and np.allclose(back.up, [0, 0, 1], atol=1e-6)  # the mean camera up
    assert np.allclose(json.loads(sidecar_paths(out)[1].read_text())["up"], [0, 0, -1], atol=1e-6)  # glTF axes
    monkeypatch.undo()  # the run's dataset (/nonexistent/dataset) is not here: no cameras, no sidecar
    report = run_export(ExportConfig(input=run, out=tmp_path / "p.ply", quiet=True))
    assert any("no view sidecar" in n for n in report.notes)

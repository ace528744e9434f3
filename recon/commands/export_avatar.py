"""``splatforge export RUN --out avatar.glb`` for an avatar (a --method meshgs run): the skinned template, its
skeleton, the captured poses as an animation and the bound Gaussians in triangle-local form, in one GLB
(recon/export/avatar_glb.py, spec recon/export/AVATAR_GLB.md). ``--target`` caps the Gaussians per triangle
(:data:`TRIANGLE_CAPS`, the most opaque kept). A pose MLP (``--meshgs.pose-mlp-width``) goes into the extension's
``poseCorrection`` (weights and the raw offsets it corrects), said in the report's notes."""

from __future__ import annotations

import os
from pathlib import Path

from recon.core.avatar_record import cap_per_triangle
from recon.core.errors import UsageError
from recon.export.report import ExportReport

TRIANGLE_CAPS = {"phone": 2, "android": 2, "iphone": 2, "quest3": 4, "visionpro": 8}
"""--target -> most Gaussians kept per triangle (desktop and web: all)."""


def is_avatar_run(src: Path) -> bool:
    """True when ``src`` is a run folder of --method meshgs."""
    from recon.run.folder import Run

    if not Path(src).is_dir():
        return False
    try:
        return Run.open(src).config.method == "meshgs"
    except Exception:  # not a run: the ordinary export path reports it
        return False


def export_avatar(config, fmt: str) -> ExportReport:
    """Write the run's avatar GLB; UsageError for another format or options that do not apply."""
    from recon.export.avatar_glb import write_avatar_glb
    from recon.export.atomic import refuse_overwrite
    from recon.outputs.paths import ensure_writable_folder
    from recon.run.folder import Run

    if fmt != "glb":
        raise UsageError(f"--out {config.out}: an avatar (--method meshgs run) exports as a GLB with its skin and "
                         f"animation (--out NAME.glb); its splats.ply is only the rest pose")
    if config.max_splats is not None or config.remove_floaters or config.time is not None:
        raise UsageError("--max-splats / --remove-floaters / --time do not apply to an avatar export; use --target "
                         "to cap the Gaussians per triangle")
    refuse_overwrite(config.out, config.force)
    ensure_writable_folder(Path(config.out).parent, f"--out {config.out}: folder")
    model = Run.open(config.input).load_model()
    record = model.to_avatar_record()
    n = len(record)
    cap = TRIANGLE_CAPS.get(config.target) if config.target else None
    if cap is not None:
        record = cap_per_triangle(record, cap)
    if config.sh_degree is not None:
        record.sh = record.sh[:, : (min(config.sh_degree, 3) + 1) ** 2]
    write_avatar_glb(config.out, record, force=config.force)
    notes = [f"avatar GLB: {len(record.faces)} triangles, {len(record.parents)} joints, {len(record.rotations)} "
             f"animation keyframes (the captured poses), Gaussians in triangle-local form"]
    if cap is not None:
        notes.append(f"--target {config.target}: at most {cap} Gaussians per triangle")
    if model.pose_mlp is not None:  # AVATAR_GLB.md, "poseCorrection"
        notes.append(f"the pose MLP (--meshgs.pose-mlp-width {model.options.pose_mlp_width}) is in the extension's "
                     f"poseCorrection; an engine that skips it poses the uncorrected Gaussians (exact in the rest "
                     f"pose; the PSNR this costs: scripts/bench_avatar.py --ablation, without_mlp_at_test)")
    return ExportReport(path=Path(config.out), format="glb", splats=len(record), bytes=os.path.getsize(config.out),
                        sh_degree=int(round(record.sh.shape[1] ** 0.5)) - 1, input_splats=n, dropped_nonfinite=0,
                        dropped_budget=n - len(record), importance="opacity" if cap else "none", target=config.target,
                        notes=notes)

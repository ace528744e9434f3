"""The template (rest-pose) mesh of an avatar: an OBJ whose vertex order is the skin file's row order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from recon.avatar.skin_file import AvatarInputError
from recon.core.limits import require_finite, require_regular_file, with_path

MAX_TEMPLATE_BYTES = 1 << 30


def read_template(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """(vertices [V, 3] float32, faces [F, 3] int64) of the OBJ at ``path``, vertex order kept;
    AvatarInputError naming the file when it is missing, unreadable, holds no triangle or indexes outside
    its vertices."""
    import trimesh

    path = Path(path)
    if path.suffix.lower() in (".glb", ".gltf"):
        raise AvatarInputError(f"{path}: a glTF template holds its own skin: name it template.glb (read by "
                               f"recon.data.skinned_glb), or give an OBJ with a skin.json beside it")
    size = require_regular_file(path, "template mesh", with_path(AvatarInputError))
    if size > MAX_TEMPLATE_BYTES:
        raise AvatarInputError(f"{path}: {size} bytes, more than the {MAX_TEMPLATE_BYTES} a template may have")
    try:
        mesh = trimesh.load(path, file_type="obj", process=False, maintain_order=True, force="mesh")
    except Exception as err:  # trimesh raises many types for bad files
        raise AvatarInputError(f"{path}: not a readable OBJ mesh ({err})") from None
    vertices, faces = np.asarray(mesh.vertices, dtype=np.float64), np.asarray(mesh.faces, dtype=np.int64)
    if faces.ndim != 2 or faces.shape[1] != 3 or not len(faces):
        raise AvatarInputError(f"{path}: the template holds no triangles")
    require_finite(vertices, path, "vertices", with_path(AvatarInputError))
    return torch.tensor(vertices, dtype=torch.float32), torch.tensor(faces, dtype=torch.int64)

"""Checks of a third-party mesh file before trimesh reads it (``insert`` / ``mesh2splat``, ``sdf fit`` and mesh
datasets): what trimesh would otherwise allocate without bound or load as other geometry without a word.

- GLB: chunk lengths, then accessor layouts and declared bounds (:func:`recon.export.glb.check_glb_container`);
- OBJ: no face names vertex 0 (OBJ counts from 1, negative indices count back from the last vertex, so trimesh
  reads ``f 0 1 2`` as the last vertex and two others: a silently different triangle).
"""

from __future__ import annotations

import os
import re

from recon.export.glb import check_glb_container

_OBJ_ZERO_INDEX = re.compile(rb"(?m)^[ \t]*f[ \t]+(?:[^\n]*[ \t])?[+-]?0+(?=/|[ \t]|\r?$)")


def check_obj_face_indices(path, error) -> None:
    """For an ``.obj`` file: ``error(path, problem)`` when a face line names vertex index 0 (the line given)."""
    if not os.fspath(path).lower().endswith(".obj"):
        return
    with open(path, "rb") as f:
        data = f.read()
    found = _OBJ_ZERO_INDEX.search(data)
    if found:
        line = data.count(b"\n", 0, found.start()) + 1
        raise error(path, f"line {line:,}: a face names vertex 0, but OBJ vertex indices start at 1 (negative ones "
                          f"count back from the last vertex); the file is damaged: re-export the mesh")


def check_mesh_file(path, error) -> None:
    """``error(path, problem)`` (one line) for the mesh file problems of the module docstring; other files pass."""
    check_glb_container(path, error)
    check_obj_face_indices(path, error)

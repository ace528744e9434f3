"""Read a rigged binary glTF (.glb) as an avatar template: the file's checks here, the skin in
:mod:`recon.avatar.gltf_skin`.

The container and every accessor go through the splat GLB reader's helpers (:func:`recon.export.glb.parse_glb`,
:func:`recon.export.glb.read_accessor`: chunk lengths against the file, accessor bounds against the BIN chunk,
strides, component types), the file through :func:`recon.core.limits.read_bytes_limited`. Only embedded
buffers (a .glb) are read; a .gltf with external buffers is refused with a one-line hint. Every problem is
one line naming the file (:class:`recon.avatar.skin_file.AvatarInputError`).
"""

from __future__ import annotations

from pathlib import Path

from recon.avatar.gltf_skin import GltfSkin, skinned_mesh
from recon.avatar.skin_file import AvatarInputError
from recon.core.limits import read_bytes_limited, with_path
from recon.export.glb import parse_glb, read_accessor
from recon.export.splats import SplatFileError

MAX_GLB_BYTES = 1 << 30


def is_glb_path(path) -> bool:
    """True for a path ending in .glb or .gltf (either case)."""
    return Path(path).suffix.lower() in (".glb", ".gltf")


def read_skinned_glb(path) -> GltfSkin:
    """The skinned mesh of the GLB at ``path`` (:func:`recon.avatar.gltf_skin.skinned_mesh`): vertices,
    faces, skin; AvatarInputError naming the file for anything wrong."""
    path = Path(path)
    if path.suffix.lower() == ".gltf":
        raise AvatarInputError(f"{path}: a .gltf with separate buffers is not read; save the rig as one binary "
                               f".glb (Blender: glTF Binary)")
    raw = read_bytes_limited(path, MAX_GLB_BYTES, "skinned GLB", with_path(AvatarInputError))
    try:
        doc, binary = parse_glb(path, raw)
        return skinned_mesh(path, doc, lambda index: read_accessor(path, doc, binary, index))
    except SplatFileError as err:  # the container and accessor checks of the splat GLB reader
        raise AvatarInputError(str(err)) from None

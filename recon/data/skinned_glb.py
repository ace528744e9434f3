"""Read a rigged binary glTF (.glb) as an avatar template, or its animation as a clip of poses: the file's checks
here, the skin in :mod:`recon.avatar.gltf_skin`, the animation in :mod:`recon.avatar.gltf_animation`.

The container and every accessor go through the splat GLB reader's helpers (:func:`recon.export.glb.parse_glb`,
:func:`recon.export.glb.read_accessor`: chunk lengths against the file, accessor bounds against the BIN chunk,
strides, component types), the file through :func:`recon.core.limits.read_bytes_limited`. A .gltf (JSON) holds
its one buffer in a ``data:`` URI (base64) or in a file named by a relative or absolute URI, read where it is
(datasets/README.md: paths outside a folder are followed, through the same reader limits); a .gltf of several
buffers is refused with a hint (re-save it as a .glb). Every problem is one line naming the file
(:class:`recon.avatar.skin_file.AvatarInputError`).
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from urllib.parse import unquote

import torch

from recon.avatar.gltf_animation import animation_poses
from recon.avatar.gltf_skin import GltfSkin, skinned_mesh
from recon.avatar.skinning import Skeleton
from recon.avatar.skin_file import AvatarInputError
from recon.core.limits import parse_json, read_bytes_limited, with_path
from recon.export.glb import parse_glb, read_accessor
from recon.export.splats import SplatFileError

MAX_GLB_BYTES = 1 << 30


def is_glb_path(path) -> bool:
    """True for a path ending in .glb or .gltf (either case)."""
    return Path(path).suffix.lower() in (".glb", ".gltf")


def read_skinned_glb(path) -> GltfSkin:
    """The skinned mesh of the GLB at ``path`` (:func:`recon.avatar.gltf_skin.skinned_mesh`): vertices,
    faces, skin; AvatarInputError naming the file for anything wrong."""
    return _read_glb(Path(path), "skinned GLB", skinned_mesh)


def read_glb_animation(path, skeleton: Skeleton, fps: float, choice: str | None = None
                       ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The poses of ``skeleton`` (an avatar's), one per frame at ``fps``, of the GLB's animation ``choice``
    (name or index; None: the first), joints matched by name
    (:func:`recon.avatar.gltf_animation.animation_poses`); AvatarInputError naming the file for anything
    wrong."""
    return _read_glb(Path(path), "animation GLB",
                     lambda p, doc, accessor: animation_poses(p, doc, accessor, skeleton, fps, choice))


def _read_glb(path: Path, what: str, parse):
    """``parse(path, doc, accessor)`` of the GLB (or .gltf and its buffer) at ``path``, container and accessors
    checked as the splat GLB reader does."""
    raw = read_bytes_limited(path, MAX_GLB_BYTES, what, with_path(AvatarInputError))
    try:
        if path.suffix.lower() == ".gltf":
            doc = parse_json(raw, path, f"{what} (glTF JSON)", SplatFileError)
            binary = gltf_buffer(path, doc)
        else:
            doc, binary = parse_glb(path, raw)
        return parse(path, doc, lambda index: read_accessor(path, doc, binary, index))
    except SplatFileError as err:  # the container and accessor checks of the splat GLB reader
        raise AvatarInputError(str(err)) from None


def gltf_buffer(path: Path, doc: dict) -> bytes:
    """The bytes of the one buffer of the .gltf document ``doc`` at ``path``: a base64 ``data:`` URI or a file
    relative to the .gltf's folder (percent-escapes decoded), at least ``byteLength`` bytes long."""
    buffers = doc.get("buffers") if isinstance(doc, dict) else None
    if not buffers:
        return b""
    if not isinstance(buffers, list) or len(buffers) != 1 or not isinstance(buffers[0], dict):
        raise SplatFileError(path, f"{len(buffers) if isinstance(buffers, list) else 'bad'} buffers: only a "
                                   f".gltf with one buffer is read; re-save the rig as one binary .glb")
    uri, length = buffers[0].get("uri"), buffers[0].get("byteLength")
    if not isinstance(uri, str) or not uri or not isinstance(length, int) or not 0 <= length <= MAX_GLB_BYTES:
        raise SplatFileError(path, f"buffer 0 needs a 'uri' string and a 'byteLength' in [0, {MAX_GLB_BYTES:,}] "
                                   f"(got {uri!r:.40}, {length!r:.40})")
    if uri.startswith("data:"):
        head, _, payload = uri.partition(",")
        if not head.endswith(";base64") or len(payload) > 4 * (MAX_GLB_BYTES // 3 + 1):
            raise SplatFileError(path, "buffer 0's data: URI is not base64 (or too long)")
        try:
            binary = base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise SplatFileError(path, "buffer 0's data: URI is not valid base64") from None
    else:
        target = path.parent / unquote(uri)
        binary = read_bytes_limited(target, MAX_GLB_BYTES, f"buffer of {path.name}", SplatFileError)
    if len(binary) < length:
        raise SplatFileError(path, f"buffer 0 holds {len(binary):,} bytes, less than its byteLength {length:,}")
    return binary

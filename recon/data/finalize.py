"""Loader output -> training frames: check cameras and files, undistort, downscale.

Every dataset loader ends with :func:`finalize_frames`. It sits above :mod:`recon.data.scene` (records,
image IO, downscaling) and :mod:`recon.data.undistort` (lens distortion), so neither imports the other
upwards.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from recon.data.scene import (
    DataFormatError,
    Distortion,
    Frame,
    MissingImageError,
    _map_threads,
    check_cameras,
    check_files_exist,
    check_image_size,
    default_cache_root,
    downscale_frame,
    image_size,
)
from recon.data.undistort import UndistortError, undistort_frame
from recon.core.errors import UsageError

PROGRESS_MIN_FRAMES = 100  # preparing this many frames shows a progress bar


def finalize_frames(
    raw: Sequence[tuple[Frame, Distortion | None]],
    root: Path,
    listed_in: Path | str,
    data_factor: int = 1,
    cache_dir: Path | None = None,
) -> list[Frame]:
    """Turn loader output into training frames: check cameras and files, undistort, downscale.

    Args:
        raw: (frame, distortion) pairs; ``frame.camera`` is the full-resolution camera whose K is the
            distorted camera's K when ``distortion`` is not None.
        root: dataset folder (derived images are named relative to it).
        listed_in: the dataset file that lists the images (named in errors).
        data_factor: integer downscale factor N >= 1.
        cache_dir: where derived images are written; default ``root`` when writable, else
            ``~/.cache/splatforge/<name>-<hash>``.
    Returns:
        Frames with pinhole cameras whose images exist on disk at the returned size.
    """
    if int(data_factor) != data_factor or data_factor < 1:
        raise UsageError(f"--data-factor {data_factor!r}: must be a positive integer")
    data_factor = int(data_factor)
    root = Path(root)
    check_cameras([f for f, _ in raw], listed_in)
    cache_root = Path(cache_dir) if cache_dir is not None else default_cache_root(root)
    if data_factor == 1 or any(d is not None for _, d in raw):
        check_files_exist([f for f, _ in raw], listed_in)

    def one(item: tuple[Frame, Distortion | None]) -> Frame:
        frame, dist = item
        if dist is not None:
            try:
                frame = undistort_frame(frame, dist, root, cache_root)
            except UndistortError as e:
                raise DataFormatError(f"{listed_in}: image {frame.name!r}: {e}") from None
        if data_factor > 1:
            try:
                frame = downscale_frame(frame, data_factor, root, cache_root)
            except MissingImageError as e:
                raise MissingImageError(f"{e} (listed in {listed_in})") from e
        else:  # the loss mask's and segmentation's headers now (a bomb or a wrong size), not when training draws them
            check_channel_headers(frame, listed_in)
        return frame

    if (data_factor == 1 and all(d is None for _, d in raw)) or len(raw) < PROGRESS_MIN_FRAMES:
        return _map_threads(one, list(raw))
    from rich.progress import Progress

    with Progress(transient=True) as bar:  # derived images are written on the first run: minutes on big captures
        task = bar.add_task(f"preparing {len(raw)} images (1/{data_factor} size)", total=len(raw))

        def one_shown(item: tuple[Frame, Distortion | None]) -> Frame:
            frame = one(item)
            bar.advance(task)
            return frame

        return _map_threads(one_shown, list(raw))


def check_channel_headers(frame: Frame, listed_in: Path | str) -> None:
    """MissingImageError naming ``frame``'s loss mask or foreground segmentation (and ``listed_in``) unless each
    it has declares, in its header, an image within the pixel limit and of the frame's size (read from the
    header only: no pixels decoded; the pixels are decoded when training draws the frame)."""
    for path, what in ((frame.mask_path, "mask"), (frame.segmentation_path, "segmentation")):
        if path is None:
            continue
        try:
            check_image_size(path, image_size(path), frame.width, frame.height, what)
        except MissingImageError as e:
            raise MissingImageError(f"{e} (listed in {listed_in})") from e

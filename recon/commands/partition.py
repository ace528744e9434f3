"""`splatforge partition`: split a dataset into blocks for block-partitioned training (blocks.json + blocks.png)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import tyro

from recon.distributed.partition import PartitionConfig, partition_scene, write_partition
from recon.core.errors import USER_ERRORS, fail


def load_partition_scene(data: Path, data_factor: int):
    """The dataset as training would load it (same ``data_factor``: the partition records image sizes)."""
    from recon.training.trainer import TrainConfig, load_training_scene

    return load_training_scene(TrainConfig(data=data, data_factor=data_factor))


def partition(data: Path, out: Path = Path("blocks.json"), data_factor: int = 1,
              split: Annotated[PartitionConfig, tyro.conf.arg(name="")] = PartitionConfig(), plot: bool = True) -> None:
    """Split a dataset (COLMAP, nerfstudio, Blender folder, or "procedural") into blocks on the ground plane.

    The up axis comes from the cameras; cells are balanced k-d cells of a robust bounding box (--blocks-xy
    AxB, or splits until --max-images-per-block / --max-points-per-block hold); cameras join a block when
    their centre is in its expanded box (--overlap) or the block covers >= --visibility of the image.
    Writes OUT (blocks.json) and blocks.png (top view) beside it. Train with
    `splatforge train --data DIR --blocks OUT --workers N --out RUN`.
    """
    try:
        scene = load_partition_scene(data, data_factor)
        part = partition_scene(scene, split, source=str(data))
        paths = write_partition(part, out, scene, plot=plot)
    except USER_ERRORS as err:
        fail("partition", err)
    for b in part.blocks:
        print(f"block {b.id}: {len(b.train_images)} train / {len(b.test_images)} test images, {b.num_points:,} points")
    print(f"wrote {', '.join(str(p) for p in paths)}")

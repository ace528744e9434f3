"""The block cells of a block-trained run (``RUN/blocks.json``, issue 22) drawn in the viewer.

Each block's ground cell (its core box cut to the scene's robust box: ``Block.bounded``) becomes a wire
box between the box's height range along the scene's up axis, one colour per block, with a label
"block k" at its top centre; the expanded (training) box is drawn thinner in the same colour. A GUI
checkbox "block cells" (off at start) shows or hides them.
"""

from __future__ import annotations

import colorsys
from pathlib import Path

import numpy as np

BLOCKS_FILE = "blocks.json"

# the 12 edges of a box, as corner index pairs; corner k = (bit 0: x, bit 1: y, bit 2: height)
_EDGES = np.array([[0, 1], [2, 3], [4, 5], [6, 7], [0, 2], [1, 3], [4, 6], [5, 7], [0, 4], [1, 5], [2, 6], [3, 7]])


def block_colour(k: int, n: int) -> tuple[int, int, int]:
    """A distinct RGB (0-255) for block ``k`` of ``n`` (hues spread around the wheel)."""
    r, g, b = colorsys.hsv_to_rgb((k / max(n, 1)) % 1.0, 0.75, 0.95)
    return int(255 * r), int(255 * g), int(255 * b)


def box_corners(box: list, heights: tuple[float, float], basis: np.ndarray) -> np.ndarray:
    """[8, 3] world corners of the ground box [[xlo, ylo], [xhi, yhi]] (ground coordinates along e1, e2)
    between ``heights`` (along up); ``basis`` [3, 3] rows e1, e2, up."""
    (x0, y0), (x1, y1) = box
    corners = [[(x0, x1)[i & 1], (y0, y1)[(i >> 1) & 1], heights[(i >> 2) & 1]] for i in range(8)]
    return np.asarray(corners, np.float64) @ basis


def box_segments(corners: np.ndarray) -> np.ndarray:
    """[12, 2, 3] line segments of a box's edges from its :func:`box_corners`."""
    return corners[_EDGES]


def read_cells(run_dir: Path | None):
    """The run's :class:`recon.distributed.partition.Partition`, or None when the folder has no blocks.json."""
    if run_dir is None or not (Path(run_dir) / BLOCKS_FILE).is_file():
        return None
    from recon.distributed.partition import Partition

    return Partition.read(Path(run_dir) / BLOCKS_FILE)


def add_block_cells(server, gui, run_dir: Path | None, thickness: float) -> tuple[list, object]:
    """Draw the cells of ``run_dir``'s blocks.json into the viser ``server`` (hidden) and add the "block
    cells" checkbox to ``gui``; returns (the scene handles, the checkbox), ([], None) when the run has no
    blocks."""
    part = read_cells(run_dir)
    if part is None:
        return [], None
    basis, n = part.basis, len(part.blocks)
    heights = part.box.z
    handles = []
    for k, block in enumerate(part.blocks):
        colour = np.array(block_colour(k, n), np.uint8)
        core = box_segments(box_corners(block.bounded, heights, basis))
        grown = box_segments(box_corners(block.expanded, heights, basis))
        handles.append(server.scene.add_line_segments(f"/blocks/{block.id:03d}/core", core.astype(np.float32),
                                                      colour, thickness=thickness, visible=False))
        handles.append(server.scene.add_line_segments(f"/blocks/{block.id:03d}/expanded",
                                                      grown.astype(np.float32), colour,
                                                      thickness=0.4 * thickness, visible=False))
        top = box_corners(block.bounded, (heights[1], heights[1]), basis).mean(axis=0)
        handles.append(server.scene.add_label(f"/blocks/{block.id:03d}/label", f"block {block.id}",
                                              position=top, visible=False))
    toggle = gui.add_checkbox("block cells", initial_value=False)

    @toggle.on_update
    def _(_event) -> None:
        for h in handles:
            h.visible = toggle.value

    return handles, toggle

"""A PyTorch dataset of splat objects: the rows of a ``splatforge mesh2splat`` index (ShapeSplat's format).

``SplatDataset(OUT)`` reads ``OUT/index.jsonl`` (rows with ``status`` "done"; docs/mesh2splat.md) and yields
per object a dict of float32 tensors

- ``means`` [N, 3], ``scales`` [N, 3] (activated: exp of the log-scales), ``rotations`` [N, 4] (unit
  quaternions, wxyz), ``opacities`` [N] (sigmoid of the logits), ``colors`` [N, 3] (RGB of the SH DC term,
  clamped to [0, 1]);
- ``label`` (int64 scalar): index of the object's folder name in :attr:`SplatDataset.classes` (sorted);
- ``source`` (str): the mesh path relative to the mesh folder.

Options: ``normalize`` centres the means on their mean and scales them (and the scales) so the farthest
mean is at distance 1; ``num_points`` sub-samples each object to a fixed count, without replacement when
it has enough Gaussians, else all of them plus repeats drawn at random; the draw depends only on
``seed`` and the object's index, so every epoch and every worker sees the same points (reproducible
experiments; pass another seed for other draws).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from recon.core.splat_data import dc_to_rgb, normalized_quats, sigmoid
from recon.data.scene import DataFormatError
from recon.data.splat_index import index_path, latest_rows, read_index
from recon.export import read_splats

def read_done_rows(root: Path) -> list[dict]:
    """The rows of ``root/index.jsonl`` whose status is "done" (the last row of each source), sorted by
    source. DataFormatError naming the file when it is missing."""
    path = index_path(root)
    if not path.is_file():
        raise DataFormatError(f"{path}: no such index (give the --out folder of splatforge mesh2splat)")
    rows = latest_rows(read_index(root)).values()
    return sorted((r for r in rows if r.get("status") == "done" and r.get("output")), key=lambda r: r["source"])


def gaussian_arrays(path: Path) -> dict[str, np.ndarray]:
    """Activated per-Gaussian arrays of the splat file ``path``: means, scales, rotations, opacities, colors."""
    data = read_splats(path)
    return {"means": data.means, "scales": np.exp(data.log_scales), "rotations": normalized_quats(data.quats),
            "opacities": sigmoid(data.logit_opacities),
            "colors": np.clip(dc_to_rgb(data.sh[:, 0]), 0.0, 1.0)}


def normalize_object(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Means centred on their mean and scaled (scales too) so the farthest mean is at distance 1."""
    centre = arrays["means"].mean(axis=0)
    radius = float(np.linalg.norm(arrays["means"] - centre, axis=1).max(initial=0.0))
    s = 1.0 / radius if radius > 0 else 1.0
    return {**arrays, "means": (arrays["means"] - centre) * s, "scales": arrays["scales"] * s}


def subsample_indices(n: int, count: int, generator: np.random.Generator) -> np.ndarray:
    """[count] indices into n Gaussians: a random subset when n >= count, else all n plus random repeats."""
    if n == 0:
        raise ValueError("an object without Gaussians cannot be sub-sampled")
    if n >= count:
        return np.sort(generator.choice(n, count, replace=False))
    return np.concatenate([np.arange(n), generator.integers(0, n, count - n)])


class SplatDataset(Dataset):
    """Objects of a mesh2splat output folder as Gaussian parameters (see the module docstring)."""

    def __init__(self, root: str | Path, num_points: int | None = None, normalize: bool = True, seed: int = 0,
                 labels: list[str] | None = None):
        self.root = Path(root)
        self.rows = read_done_rows(self.root)
        if num_points is not None and num_points < 1:
            raise ValueError(f"num_points {num_points}: must be >= 1 (or None: every Gaussian)")
        self.num_points, self.normalize, self.seed = num_points, normalize, seed
        self.classes = sorted({r.get("label") or "" for r in self.rows}) if labels is None else list(labels)
        self.class_index = {name: i for i, name in enumerate(self.classes)}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        row = self.rows[i]
        arrays = gaussian_arrays(self.root / row["output"])
        if self.normalize:
            arrays = normalize_object(arrays)
        if self.num_points is not None:
            idx = subsample_indices(len(arrays["means"]), self.num_points, np.random.default_rng([self.seed, i]))
            arrays = {k: v[idx] for k, v in arrays.items()}
        item = {k: torch.as_tensor(np.ascontiguousarray(v), dtype=torch.float32) for k, v in arrays.items()}
        item["label"] = torch.tensor(self.class_index[row.get("label") or ""], dtype=torch.int64)
        item["source"] = row["source"]
        return item

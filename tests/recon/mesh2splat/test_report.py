"""The batch report: summary.json from the index, histograms and a contact sheet of renders."""

import json

import imageio.v3 as iio
import numpy as np

from recon.core.splat_data import random_splats
from recon.data.splat_index import append_row
from recon.export import write_splats
from recon.mesh2splat.report import render_object, write_report


def test_report_files(tmp_path):
    for k in range(3):
        data = random_splats(200, sh_degree=0, seed=k)
        data.means = data.means / np.abs(data.means).max() * 0.3  # inside the sphere the sheet's camera sees
        data.log_scales = np.full_like(data.log_scales, np.log(0.03))
        source = f"cat{k % 2}/o{k}.obj"
        (tmp_path / f"cat{k % 2}").mkdir(exist_ok=True)
        write_splats(tmp_path / f"{source}.ply", data)
        append_row(tmp_path, {"source": source, "output": f"{source}.ply", "label": f"cat{k % 2}", "status": "done",
                              "method": "3dgs", "gaussians": 200, "train_psnr": 30.0 + k, "test_psnr": 29.0 + k,
                              "chamfer_pct": 0.5, "seconds": 10.0 * (k + 1)})
    append_row(tmp_path, {"source": "bad/x.obj", "output": None, "status": "failed", "reason": "empty mesh"})
    summary = write_report(tmp_path, sample=2)
    assert summary["done"] == 3 and summary["failed"] == 1 and summary["failures"] == {"bad/x.obj": "empty mesh"}
    assert summary["median"]["test_psnr"] == 30.0 and summary["median"]["seconds"] == 20.0
    assert json.loads((tmp_path / "report" / "summary.json").read_text()) == summary
    assert iio.imread(tmp_path / "report" / "contact_sheet.png").shape[0] > 100
    image = render_object(tmp_path / "cat0/o0.obj.ply", "3dgs", 32)  # what the sheet shows of an object
    assert image.shape == (32, 32, 3)
    assert image[12:20, 12:20].mean() < 0.95 and image[0, 0].min() > 0.99  # the object in the middle, white around
    assert iio.imread(tmp_path / "report" / "histograms.png").shape[1] > 400

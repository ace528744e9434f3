"""Datasets: one Scene/Frame model and one loader per format, converting to our conventions at load time.

See rasterizer/CONVENTIONS.md: OpenCV camera axes, ``world_to_cam`` [4, 4], ``K`` [3, 3] in pixels, images
float32 [H, W, 3] in [0, 1].

Layer 3: may import layers 1-2 (recon.core; recon.export, for nerfstudio's ``ply_file_path`` points) and
rasterizer. Also: the train/test images of a scene (``frame_images.py``), camera paths for videos
(``camera_paths.py``) and the ``--data`` argument's names (``data_arg.py``).
"""

from recon.data.blender import load_blender
from recon.data.colmap import (
    ColmapFormatError,
    ColmapModel,
    load_colmap,
    read_model,
    write_model,
)
from recon.data.detect import detect_format, load_scene
from recon.data.nerfstudio import load_nerfstudio, opengl_cam_to_world_to_opencv_world_to_cam
from recon.data.undistort import UnsupportedCameraModelError, distort_points, undistort_points
from recon.data.procedural import look_at_world_to_cam, orbit_cameras
from recon.data.scene import (
    DataFormatError,
    Frame,
    MissingImageError,
    Scene,
    load_image,
    load_image_tensor,
    load_mask,
    load_segmentation,
    nerfpp_norm,
)

__all__ = [
    "ColmapFormatError",
    "ColmapModel",
    "DataFormatError",
    "Frame",
    "MissingImageError",
    "Scene",
    "UnsupportedCameraModelError",
    "detect_format",
    "distort_points",
    "load_blender",
    "load_colmap",
    "load_image",
    "load_image_tensor",
    "load_mask",
    "load_segmentation",
    "load_nerfstudio",
    "load_scene",
    "look_at_world_to_cam",
    "nerfpp_norm",
    "opengl_cam_to_world_to_opencv_world_to_cam",
    "orbit_cameras",
    "read_model",
    "undistort_points",
    "write_model",
]

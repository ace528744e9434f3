"""Scene representations: one module per representation (parameters + optimiser groups + render), each a
:class:`recon.models.base.SceneModel` registered under its method name in ``MODELS``.

Layer 4: may import layers 1-3 (recon.core, recon.losses, recon.nerf, recon.data) and rasterizer; never
recon.export or recon.strategy. ``init_region.py``: where random initial Gaussians go.
"""

from recon.models.base import MODELS, SceneModel, model_class, register_model
from recon.models.gaussians import GaussianModel, LearningRates, resize_optimizer_state
from recon.models.meshgs import MeshGaussians
from recon.models.nerf import NerfModel
from recon.models.neus import NeusModel
from recon.models.spacetime import SpaceTimeGaussians
from recon.models.surfels import SurfelModel

__all__ = ["MODELS", "SceneModel", "model_class", "register_model", "GaussianModel", "SurfelModel",
           "SpaceTimeGaussians", "NerfModel", "NeusModel", "MeshGaussians", "LearningRates",
           "resize_optimizer_state"]

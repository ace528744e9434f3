"""splatforge's reconstruction side: data, training, evaluation, export and the command line.

Its Numba kernels (SSIM, the NeRF hash grid and ray marching) are cached under the key of their sources
too (``rasterizer.kernel_cache``), set here before any of them is defined.
"""

from rasterizer.kernel_cache import key_numba_cache as _key_numba_cache

_key_numba_cache(__path__[0])

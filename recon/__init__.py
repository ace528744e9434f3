"""splatforge's reconstruction side: data, training, evaluation, export and the command line.

``rasterizer`` is imported first: it keys Numba's kernel cache by the sources of both packages
(``rasterizer.kernel_cache``) before any kernel here (SSIM, the NeRF hash grid, ray marching) is defined.
"""

import rasterizer  # noqa: F401

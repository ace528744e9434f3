"""torchrun entry: ``torchrun --standalone --nproc_per_node=N -m recon.distributed --data DIR --blocks blocks.json --out RUN``."""

import rasterizer  # noqa: F401  (first: sets GOMP_SPINCOUNT before torch loads)
import sys

from recon.distributed.worker import main

if __name__ == "__main__":
    sys.exit(main())

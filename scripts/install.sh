#!/usr/bin/env bash
# Create .venv and install splatforge into it (editable). Argument: optional extras, e.g. "test".
# torch is pinned to the CPU build first, so that no multi-GB CUDA build is pulled on a CPU machine;
# on a GPU machine install your CUDA build of torch into .venv before running this.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
spec="."
[ -n "$extras" ] && spec=".[$extras]"
.venv/bin/python -m pip install -q -e "$spec"
# open3d (splatforge mesh / insert, the geometry scripts) loads system libraries; say which are missing
.venv/bin/python - <<'PY'
from recon.core.open3d_import import Open3DMissingError, open3d
try:
    open3d("splatforge mesh and insert, and the geometry scripts")
except Open3DMissingError as err:
    print(f"install.sh: warning: {err}")
PY

#!/usr/bin/env bash
# Install splatforge with its test extras into .venv (CPU build of torch) and run the test suite.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.venv/numba_cache}"
exec .venv/bin/python -m pytest -ra --durations=15 "$@"

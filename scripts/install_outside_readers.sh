#!/usr/bin/env bash
# Install the outside readers used by tests/recon/export/test_outside_readers.py and test_export_glb.py:
#   - Debian chromium (/usr/bin/chromium) for Spark in a headless browser (only if missing);
#   - python playwright (driver only; NEVER `playwright install`, we launch /usr/bin/chromium)
#     and pygltflib (a second glTF reader) into .venv;
#   - the Node side (splat-transform, Spark, three) from scripts/js/package-lock.json (npm ci).
# Needs root for apt-get (skipped when chromium is already there). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PLAYWRIGHT_VERSION="1.65.2"
PYGLTFLIB_VERSION="1.16.5"
PY=".venv/bin/python"

if [ ! -x /usr/bin/chromium ]; then
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
fi

[ -x "$PY" ] || { echo "install_outside_readers: $PY missing; run scripts/install.sh first" >&2; exit 1; }
"$PY" -m pip install -q "playwright==${PLAYWRIGHT_VERSION}" "pygltflib==${PYGLTFLIB_VERSION}"

command -v npm >/dev/null || { echo "install_outside_readers: npm not found (Node >= 18 needed)" >&2; exit 1; }
(cd scripts/js && npm ci --no-audit --no-fund)
echo "outside readers installed: $(scripts/js/node_modules/.bin/splat-transform --version 2>&1 | head -1); $(/usr/bin/chromium --version 2>/dev/null)"

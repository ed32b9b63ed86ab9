#!/usr/bin/env bash
# Runs the test suite on a tested ComfyUI host shipped in scripts/hosts/ (extracted once into
# .hosts/), in that host's own venv (.venv-comfyui-<version>):
#     scripts/test_host.sh 0.28.0 [pytest arguments]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${1:?which host: e.g. 0.28.0}
shift
archive="$root/scripts/hosts/comfyui-$version.tar.gz"
[ -f "$archive" ] || { echo "no $archive: the shipped hosts are $(ls "$root/scripts/hosts" | grep tar.gz)" >&2; exit 2; }
host="$root/.hosts/comfyui-$version"
if [ ! -f "$host/ComfyUI/nodes.py" ]; then
  rm -rf "$host" && mkdir -p "$host"
  tar -xzf "$archive" -C "$host"
fi
export COMFYUI_PATH="$host/ComfyUI"
export ERIDIFFUSION_VENV=${ERIDIFFUSION_VENV:-$root/.venv-comfyui-$version}
exec "$root/scripts/test.sh" "$@"

#!/usr/bin/env bash
# Pins a tested ComfyUI host: bootstraps a scratch venv for it without pins and writes what pip
# resolved to scripts/hosts/comfyui-<version>.txt, which later bootstraps of that host install.
# The host is chosen as in bootstrap.sh (COMFYUI_PATH, the enclosing ComfyUI, or the bundled
# 0.3.75). The torch stack is the arguments, else the one the host's current pins name:
#     COMFYUI_PATH=/path/to/ComfyUI scripts/freeze_host.sh torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
version=$("$python" "$root/eridiffusion/host.py" --external --version 2>/dev/null || echo 0.3.75)
pins="$root/scripts/hosts/comfyui-$version.txt"
stack=${*:-$(grep -E '^(torch|torchvision|torchaudio)==' "$pins" 2>/dev/null | tr '\n' ' ' || true)}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ERIDIFFUSION_VENV="$scratch/venv" ERIDIFFUSION_UNPINNED=1 ERIDIFFUSION_TORCH_STACK="$stack" "$root/scripts/bootstrap.sh"
{
  echo "# ComfyUI $version: versions resolved together on $(date +%F) by scripts/freeze_host.sh; bootstrap.sh installs with these."
  "$scratch/venv/bin/python" -m pip freeze --exclude-editable
} > "$pins"
echo "wrote $pins" >&2

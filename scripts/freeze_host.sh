#!/usr/bin/env bash
# Pins a tested ComfyUI host: bootstraps a scratch venv for it without pins and writes what pip
# resolved to scripts/hosts/comfyui-<version>.txt, which later bootstraps of that host install.
# The host is chosen as in bootstrap.sh (ERIDIFFUSION_HOST, COMFYUI_PATH, the enclosing ComfyUI, or
# the shipped 0.28.0). The torch stack is the arguments, else the one the host's current pins name:
#     ERIDIFFUSION_HOST=0.3.75 scripts/freeze_host.sh torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
version=${ERIDIFFUSION_HOST:-$("$python" "$root/eridiffusion/host.py" --external --version 2>/dev/null || echo 0.28.0)}
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

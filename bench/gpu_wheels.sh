#!/usr/bin/env bash
# The wheels bench/gpu_host.sh installs on the lent GPU machine (its image lacks them), fetched here into
# .whl/ (ignored; carry it), at the versions this checkout's venv (./scripts/bootstrap.sh) holds:
#     bash bench/gpu_wheels.sh          # what the suite and the benches need, bitsandbytes included
#     bash bench/gpu_wheels.sh server   # those without bitsandbytes, with ComfyUI's server's packages
#                                       # (bench/whole_job.py): the tree and both sets pass 64 MiB
# bitsandbytes keeps only its CUDA 13 libraries (the image's torch is cu130): 14 MB instead of ~60.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv=${ERIDIFFUSION_VENV:-$root/.venv}
want=${1:-suite}
common="lycoris_lora toml torchsde trampoline comfy-kitchen comfy-aimdo spandrel simpleeval blake3 prodigyopt"
server="SQLAlchemy alembic pydantic pydantic_core pydantic-settings greenlet Mako annotated-types typing-inspection
  python-dotenv"
case "$want" in
  suite) names="$common bitsandbytes" ;;
  server) names="$common $server" ;;
  *) echo "unknown set $want: suite or server" >&2; exit 2 ;;
esac
pins=()
for name in $names; do
  version=$("$venv/bin/python" -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
  [ -n "$version" ] || { echo "$name is not in $venv: run ./scripts/bootstrap.sh first" >&2; exit 1; }
  pins+=("$name==$version")
done
rm -rf "$root/.whl" && mkdir -p "$root/.whl"
platforms=()
for n in 17 24 27 28 31 34 35 39; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
"$venv/bin/python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any \
  -d "$root/.whl" "${pins[@]}"
for wheel in "$root"/.whl/bitsandbytes-*.whl; do
  [ -f "$wheel" ] || continue
  others=$(unzip -Z1 "$wheel" | grep -E 'libbitsandbytes_(cuda1[0-2]|rocm|cpu|xpu|mps)' || true)
  # shellcheck disable=SC2086  # (one name per word)
  [ -z "$others" ] || zip -q -d "$wheel" $others
done
du -sh "$root/.whl"

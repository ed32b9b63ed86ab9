#!/usr/bin/env bash
# Bootstraps the venv and the ComfyUI host (scripts/bootstrap.sh), then runs the test suite (CPU only).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${ERIDIFFUSION_VENV:-$root/.venv}
"$root/scripts/bootstrap.sh"
# The browser test drives Debian's chromium (Playwright cannot download its own browser here).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "[test] installing Debian's chromium for the browser test" >&2
    (apt-get update -q && apt-get install -y -q chromium) >/dev/null || echo "[test] could not install chromium" >&2
  else
    echo "[test] chromium is missing: install Debian's chromium package, or the browser test fails" >&2
  fi
fi
cd "$root" && exec "$venv/bin/python" -m pytest -q "$@"

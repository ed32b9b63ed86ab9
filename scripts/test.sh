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
# One thread per process: the tiny test models gain nothing from intra-op threads, and beside a
# second busy process (the other test worker, a test's subprocess, the browser test's ComfyUI
# server) OpenMP's spinning threads slow both several times over. The tests are spread over a
# worker per core (at most 4; ERIDIFFUSION_TEST_WORKERS overrides), an idle worker taking tests
# that a busy one has queued.
# The cores are counted before OMP_NUM_THREADS is set: GNU nproc reads that variable and would
# answer 1.
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
workers=${ERIDIFFUSION_TEST_WORKERS:-$(( cores < 4 ? cores : 4 ))}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# The slowest tests are listed at the end, so a suite growing past CI's time shows where.
cd "$root" && exec "$venv/bin/python" -m pytest -q -n "$workers" --dist worksteal --durations=25 "$@"

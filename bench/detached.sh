#!/usr/bin/env bash
# A bench command longer than one device call (10 minutes): the first call starts it detached, every call
# (the first too) waits for it until LIMIT seconds of that call (default 580), then copies what it wrote so
# far to the call's $OUT: its log as NAME.log and its own $OUT folder's files. Give the same line each call:
#     bash bench/detached.sh fsdp env SINGLE=fit ALGORITHM=full SHARDING=fsdp MODEL=flux PLAN=2x1,1x1 \
#       bash bench/gpu_host.sh python3 bench/multi_gpu.py
# NAME's folder is /tmp/detached/NAME (a new machine starts without it: the command starts again there).
# The command runs in a copy of the tree made at its start (NAME's folder's tree/): each call re-sends the
# working tree over the repository, which would change the files under a command still running.
set -uo pipefail
name=${1:?a name, then the command}
shift
dir=/tmp/detached/$name
limit=${LIMIT:-580}
mkdir -p "$dir/out"
if [ ! -f "$dir/started" ]; then
  touch "$dir/started"
  root=$(cd "$(dirname "$0")/.." && pwd)
  COMMIT=${COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
  export COMMIT
  mkdir -p "$dir/tree" && (cd "$root" && tar --exclude=./.git --exclude='./.venv*' --exclude=./.hosts --exclude=./.mypy_cache -cf - .) | tar -xf - -C "$dir/tree"
  cd "$dir/tree" || exit 1
  # shellcheck disable=SC2016  # ($0 and $@ are the inner shell's: the folder and the command)
  OUT="$dir/out" PYTHONUNBUFFERED=1 setsid nohup bash -c '"$@"; echo $? > "$0/exit"' "$dir" "$@" \
    >"$dir/run.log" 2>&1 </dev/null &
fi
while [ ! -f "$dir/exit" ] && [ "$SECONDS" -lt "$limit" ]; do sleep 5; done
out=${OUT:-.}
mkdir -p "$out"
cp -r "$dir/out/." "$out/" 2>/dev/null
cp "$dir/run.log" "$out/$name.log"
if [ -f "$dir/exit" ]; then
  echo "$name: exit $(cat "$dir/exit") after this call's $SECONDS s"
else
  echo "$name: still running after this call's $SECONDS s: give the same line again"
fi
grep -E "^RESULT|Error" "$dir/run.log" | tail -n 8 | cut -c1-1500

#!/usr/bin/env bash
# Issue 41's acceptance on the lent GPU machine: bench/train_speed.py's step times of the tree before
# the refactor (b836128, carried as .ab_old/) and of this working tree, interleaved in one run
# (old, new, old, new), then a table of each run's median s/step and the new/old ratio.
# Carry .whl and .ab_old:
#     set -o pipefail; bash bench/ab_step_times.sh 2>&1 | tee $OUT/ab.log
# .ab_old is `git archive b836128 eridiffusion devkit bench __init__.py pyproject.toml` unpacked, with
# devkit/dynamic_vram.py's comfy-aimdo log level set as in this tree (the harness, not the product: without
# it comfy-aimdo 0.4.10 logs every allocation to stdout and the eager rows of both trees slow and scatter).
# PLAN and ROUNDS may be set; MFU is off (its FLOP count runs two more eager trainings per model).
# Each run's JSON: $OUT/ab/<old|new>_<round>.json; the table: $OUT/ab/table.txt.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
old="$root/.ab_old"
OUT="${OUT:-/tmp/ab_out}"
PLAN="${PLAN:-ours_sdxl_ckpt_graphs,ours_sdxl_ckpt,ours_flux_ckpt}"
ROUNDS="${ROUNDS:-2}"
export PYTHONUNBUFFERED=1 MFU=0 PLAN ROUNDS
mkdir -p "$OUT/ab"
if [ ! -f "$old/bench/train_speed.py" ] || [ ! -f "$old/pyproject.toml" ]; then
  echo "no old tree at $old: carry .ab_old (see the header)" >&2
  exit 2
fi
started=$(date +%s)
elapsed() { echo "[$(($(date +%s) - started)) s]"; }

# The image lacks ComfyUI 0.28's own packages, LyCORIS and torchsde: the carried wheels, ahead of
# the image's site-packages.
if ls "$root"/.whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$root"/.whl/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
host=/tmp/comfyui-0.28.0
if [ ! -f "$host/ComfyUI/main.py" ]; then
  mkdir -p "$host" && tar -xzf "$root/scripts/hosts/comfyui-0.28.0.tar.gz" -C "$host"
fi
export COMFYUI_PATH="$host/ComfyUI"
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
new_commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)+worktree"
echo "$(elapsed) PLAN=$PLAN ROUNDS=$ROUNDS old=b836128 new=$new_commit"

# Both trees read the same random weights: train_speed.py's weights_file() keeps them at one fixed
# path, $TMPDIR/eridiffusion_bench_<model>.safetensors, and writes them only where missing. Written
# here first, in a process of their own, so no timed run pays for (or inherits the allocator state
# of) building them.
(cd "$root" && python3 - <<'EOF'
import os, sys, time
sys.path.insert(0, os.getcwd())
from bench import train_speed as ts

ts.stub_pyav()
ts.load_aimdo()
from eridiffusion.runtime import start_host_in_temp_dir

start_host_in_temp_dir("eridiffusion-ab-weights-")
ts.enable_dynamic_vram()
for model in dict.fromkeys(item.split("_")[1] for item in os.environ["PLAN"].split(",") if item):
    t = time.time()
    print("weights", ts.weights_file(model), f"{time.time() - t:.1f} s", flush=True)
EOF
)
echo "$(elapsed) weights ready"

run() {  # run TREE NAME COMMIT: one train_speed.py process of TREE; its JSON to $OUT/ab/NAME.json
  local tree="$1" name="$2" commit="$3" dir="/tmp/ab_runs/$2" rc=0
  rm -rf "$dir" && mkdir -p "$dir"
  echo "$(elapsed) == $name ($tree)"
  (cd "$tree" && OUT="$dir" COMMIT="$commit" python3 bench/train_speed.py) || rc=$?
  if [ -f "$dir/train_speed.json" ]; then
    cp "$dir/train_speed.json" "$OUT/ab/$name.json"
  elif [ -f "$dir/train_speed_partial.json" ]; then
    cp "$dir/train_speed_partial.json" "$OUT/ab/$name.json"
  fi
  echo "$(elapsed) == $name done, rc=$rc"
}

for round in $(seq 1 "$ROUNDS"); do
  run "$old" "old_$round" b836128
  run "$root" "new_$round" "$new_commit"
done

python3 - "$OUT/ab" <<'EOF' | tee "$OUT/ab/table.txt"
import json, os, statistics, sys

folder = sys.argv[1]
rounds = int(os.environ["ROUNDS"])
plan = [p for p in os.environ["PLAN"].split(",") if p]


def rows(name):
    path = os.path.join(folder, name + ".json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        data = json.load(f)
    return {r["exp"]: r for r in (data["results"] if isinstance(data, dict) else data)}


runs = {f"{tree}_{k}": rows(f"{tree}_{k}") for k in range(1, rounds + 1) for tree in ("old", "new")}


def step(run, exp):
    return runs[run].get(exp, {}).get("s_per_step")


def fmt(x, spec=".4f"):
    return "-" if x is None else format(x, spec)


names = [f"{tree}_{k}" for k in range(1, rounds + 1) for tree in ("old", "new")]
head = ["experiment", *names, *[f"new/old r{k}" for k in range(1, rounds + 1)], "new/old", "max dloss"]
lines = [" | ".join(head), " | ".join("---" for _ in head)]
worst = 0.0
for exp in plan:
    per_round = []
    for k in range(1, rounds + 1):
        o, n = step(f"old_{k}", exp), step(f"new_{k}", exp)
        per_round.append(n / o if o and n else None)
    paired = [x for x in per_round if x is not None]  # each round's runs ran next to each other
    ratio = statistics.median(paired) if paired else None
    if ratio is not None:
        worst = max(worst, abs(ratio - 1))
    # the per-step losses of old and new runs of a round (GPU runs differ by ~1e-6 within one tree)
    dloss = [
        max(abs(a - b) for a, b in zip(lo, ln))
        for k in range(1, rounds + 1)
        if (lo := runs[f"old_{k}"].get(exp, {}).get("losses")) and (ln := runs[f"new_{k}"].get(exp, {}).get("losses"))
    ]
    cells = [exp, *[fmt(step(r, exp)) for r in names], *[fmt(x) for x in per_round], fmt(ratio), fmt(max(dloss) if dloss else None, ".1e")]
    lines.append(" | ".join(cells))
errors = [f"{run}: {exp}: {r['error']}" for run, results in runs.items() for exp, r in results.items() if "error" in r]
lines.append("")
lines.append("s/step: median over each run's timed steps; new/old: the median of the rounds' new/old;")
lines.append("max dloss: the largest difference of a step's loss between the trees in a round")
lines.append(f"largest |new/old - 1|: {worst:.2%} ({'within' if worst <= 0.02 else 'OUTSIDE'} 2%)")
lines += ["errors:", *errors] if errors else []
missing = [run for run, results in runs.items() if not results]
lines += [f"runs without results: {', '.join(missing)}"] if missing else []
print("\n".join(lines))
EOF
echo "$(elapsed) done"

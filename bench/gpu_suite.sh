#!/usr/bin/env bash
# The GPU side of the suite in one call per part (issue 44): every test file whose checks depend on a
# GPU (CUDA graphs, compiled blocks, block swap, fp8 products and kernels, the trainer's node and
# family runs with graphs on, the reproduction of saved files in stock ComfyUI, which merges in half
# precision there), on the lent GPU machine through bench/gpu_host.sh (carry .whl). Writes the
# pytest report to $OUT (or bench/results/) as <date>_gpu_suite_<part>_<gpu>_comfyui028.txt:
#     bash bench/gpu_suite.sh graphs      # speed, memory and model tests (~4 min on an H200)
#     bash bench/gpu_suite.sh files       # adapters, trained files, nodes, compat (~5 min)
#     bash bench/gpu_suite.sh runs        # fine-tunes, precision, trained weights, audio examples
#     bash bench/gpu_suite.sh trainer     # tests/training/run/test_trainer.py (~5 min)
#     bash bench/gpu_suite.sh all         # the four in one call
# Extra arguments go to pytest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
part=${1:?which part: graphs, files, runs, trainer or all}
shift
graphs="tests/training/speed tests/training/memory tests/training/model/test_model_loading.py
  tests/training/model/test_text_encoder.py tests/training/model/test_text_encoder_fp8.py
  tests/training/model/test_text_encoder_checkpointing.py tests/training/model/test_text_encoder_edit.py"
files="tests/training/adapters tests/training/run/test_trained.py tests/nodes/test_trainer_node.py
  tests/nodes/test_family_training_node.py tests/reliability/test_gpu_memory.py tests/test_comfy_compat.py
  tests/training/run/test_fused_backward.py tests/formats/test_checkpoint_file.py"
runs="tests/training/trained tests/nodes/test_fine_tune_node.py tests/training/run/test_precision.py
  tests/nodes/test_audio_workflows.py"
trainer="tests/training/run/test_trainer.py"
case "$part" in
  graphs) paths=$graphs ;;
  files) paths=$files ;;
  runs) paths=$runs ;;
  trainer) paths=$trainer ;;
  all) paths="$graphs $files $runs $trainer" ;;  # (the four in one call)
  *) echo "unknown part $part: graphs, files, runs, trainer or all" >&2; exit 2 ;;
esac
gpu=$(python3 -c "import torch; print(torch.cuda.get_device_name(0).split()[-1].lower() if torch.cuda.is_available() else 'none')" 2>/dev/null || echo none)
out_dir=${OUT:-$root/bench/results}
report="$out_dir/$(date +%F)_gpu_suite_${part}_${gpu}_comfyui028.txt"
mkdir -p "$out_dir"
cd "$root"
# shellcheck disable=SC2086
status=0
# 8 workers on the machine's 16 cores: two intra-op threads each (torch's default of one per core
# made the CPU-side runs 8x oversubscribed). A call is cut at 10 minutes: the suite stops itself
# before that (SIGINT: pytest still writes which tests failed) so the report comes back.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
timeout -s INT "${SUITE_LIMIT_S:-540}" bash bench/gpu_host.sh python3 -m pytest -q -rfE -n 8 --dist worksteal \
  -p no:cacheprovider --durations=10 $paths "$@" \
  >"$report" 2>&1 || status=$?
echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, part $part, exit $status" >>"$report"
grep -E "^(FAILED|ERROR)|passed|failed" "$report" | tail -n 40
exit $status

#!/usr/bin/env bash
# Every GPU figure and check of docs/training.md ("Not measured here"), in stages meant to fit in
# ten minutes each on one H100, their output written to OUTDIR:
#
#   bash scripts/gpu_check.sh tests OUTDIR        # pytest -m gpu; history overhead on CUDA; block-wise
#                                                 # decoding (bd3lm, udlm, hybrid) per token and the
#                                                 # token choice (bench_sampling.py) and the weight
#                                                 # average's update (bench_weight_average.py) and the
#                                                 # prefix cache (bench_prefix_cache.py) on CUDA
#   bash scripts/gpu_check.sh bench-125m OUTDIR   # bench_gpu_training.py 125m: eager, compiled, plain loss
#   bash scripts/gpu_check.sh bench-550m OUTDIR   # bench_gpu_training.py 550m: eager, compiled
#   bash scripts/gpu_check.sh runs OUTDIR         # varlen_sort_packed trainer=gpu (recompile warnings),
#                                                 # generation on cuda against cpu, the loop's host
#                                                 # time between steps, sudoku_mlm_gpu step rate
#   bash scripts/gpu_check.sh all OUTDIR
#   bash scripts/gpu_check.sh open OUTDIR         # what docs/training.md lists as not measured yet,
#                                                 # most wanted first (with DEADLINE: one short session)
#
# Each stage leaves <stage>.log (everything printed) and <stage>.json (one JSON object per line:
# the figures) in OUTDIR. PYTHON names the interpreter that has xdllm installed (default python3).
# DEADLINE=SECONDS stops each command when that many seconds have passed since the script began
# and skips the ones after it (each recorded with its rc, 124 when stopped, or as skipped), so a
# lease of a few minutes still brings back what finished.
# SMOKE=1 shrinks every run to seconds and uses the CPU: a check of this script, not a measurement.
set -uo pipefail

if [ $# -ne 2 ]; then
  echo "usage: bash scripts/gpu_check.sh tests|bench-125m|bench-550m|runs|open|all OUTDIR" >&2
  exit 2
fi
stage=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)
py=${PYTHON:-python3}
smoke=${SMOKE:-0}
deadline=${DEADLINE:-}
if [ -n "$deadline" ] && ! [[ "$deadline" =~ ^[0-9]+$ ]]; then
  echo "error: DEADLINE must be a whole number of seconds, got '$deadline'" >&2
  exit 2
fi
cd "$(dirname "$0")/.."

if ! "$py" -c "import hydra, beartype, xdllm, xdllm_models" 2>/dev/null; then
  echo "error: $py cannot import hydra, beartype and xdllm: install the project first" \
       "(pip install -e ., or offline: the wheels, then pip install --no-deps -e .)" >&2
  exit 2
fi
if [ "$smoke" = 1 ]; then
  device=cpu
else
  device=cuda
  "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
    || { echo "error: torch sees no CUDA device (SMOKE=1 checks this script on the CPU)" >&2; exit 2; }
fi

# The last JSON object a command printed (one line, or indented over several), on one line.
LAST_JSON='
import json, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
for start in reversed([i for i, line in enumerate(lines) if line.startswith("{")]):
    try:
        value, _ = json.JSONDecoder().raw_decode("\n".join(lines[start:]))
    except ValueError:
        continue
    print(json.dumps(value))
    break
else:
    print("null")
'

# record NAME COMMAND...: run COMMAND, append its output to the stage log, and the last JSON
# object it printed to the stage's figures as {"name": NAME, "rc": ..., "seconds": ..., "result": ...}.
record() {
  local name=$1; shift
  local log=$out/$stage.log tmp limit=()
  if [ -n "$deadline" ]; then
    local left=$((deadline - SECONDS))
    if [ "$left" -lt 10 ]; then
      echo "{\"name\": \"$name\", \"skipped\": \"past DEADLINE=$deadline\"}" | tee -a "$out/$stage.json"
      return
    fi
    limit=(timeout -k 5 "$left")
  fi
  tmp=$(mktemp)
  echo "### $name: $*" | tee -a "$log"
  local start=$SECONDS
  "${limit[@]}" "$@" > "$tmp" 2>&1
  local rc=$?
  cat "$tmp" >> "$log"
  local last
  last=$("$py" -c "$LAST_JSON" "$tmp")
  echo "{\"name\": \"$name\", \"rc\": $rc, \"seconds\": $((SECONDS - start)), \"result\": $last}" \
    | tee -a "$out/$stage.json"
  rm -f "$tmp"
}

# count NAME PATTERN FILE: how many lines of FILE match PATTERN, as a figure.
count() {
  local n
  n=$(cat "$3" 2>/dev/null | grep -cE "$2")  # 0 when every command was skipped and there is no log
  echo "{\"name\": \"$1\", \"count\": $n}" | tee -a "$out/$stage.json"
}

stage_tests() {
  local sizes=()
  if [ "$smoke" = 1 ]; then
    record gpu_tests "$py" -m pytest -q -p no:cacheprovider -m gpu tests/gpu
    record history_overhead "$py" scripts/bench_history.py --device "$device" --repeats 1 --settings sort
    sizes=(--lengths 16 --block-sizes 4)
  else
    record gpu_tests "$py" -m pytest -q -p no:cacheprovider -m gpu
    record history_overhead "$py" scripts/bench_history.py --device "$device"
  fi
  for family in bd3lm udlm hybrid; do  # block-wise decoding on the KV cache, never run on a GPU before
    record "block_decoding_$family" "$py" scripts/bench_block_decoding.py --family "$family" --device "$device" \
      "${sizes[@]}"
  done
  if [ "$smoke" = 1 ]; then
    record sampling "$py" scripts/bench_sampling.py --device "$device" --vocab 46 --repeats 1
  else
    record sampling "$py" scripts/bench_sampling.py --device "$device"
  fi
  if [ "$smoke" = 1 ]; then
    record weight_average "$py" scripts/bench_weight_average.py --device "$device" --sizes demo --repeats 1
    record prefix_cache "$py" scripts/bench_prefix_cache.py --random-model --device "$device" --batch-size 2 \
      --batches 1 --prompt-len 16 --max-new-tokens 4 --repeats 1
  else
    record weight_average "$py" scripts/bench_weight_average.py --device "$device"
    record prefix_cache "$py" scripts/bench_prefix_cache.py --random-model --device "$device" --batch-size 64 \
      --batches 4 --prompt-len 256 --max-new-tokens 32 --block-sizes 0 8 --refresh 0 4
  fi
}

# stage_bench SIZE: bench_gpu_training.py at one configuration, eager and compiled (125m also
# with the plain loss); under SMOKE=1 the smoke configuration once.
stage_bench() {
  local size=$1
  if [ "$smoke" = 1 ]; then
    record bench_smoke "$py" scripts/bench_gpu_training.py --smoke --device "$device"
    return
  fi
  record "bench_$size" "$py" scripts/bench_gpu_training.py --configs "$size"
  record "bench_${size}_compiled" "$py" scripts/bench_gpu_training.py --configs "$size" --compile
  if [ "$size" = 125m ]; then
    record bench_125m_plain_loss "$py" scripts/bench_gpu_training.py --configs 125m --loss plain
  fi
}

stage_runs() {
  local run=$out/varlen_sort_packed trainer=trainer=gpu tiny=()
  if [ "$smoke" = 1 ]; then
    trainer=trainer=default
    tiny=(model.d_model=32 model.n_layers=1 trainer.max_steps=20 trainer.val_check_interval=10
          data.num_test_samples=16 history.num_samples=2)
  fi
  rm -rf "$run"
  record varlen_sort_packed_train "$py" -m xdllm.cli.main train experiment=varlen_sort_packed "$trainer" \
    run_dir="$run" "${tiny[@]}"
  count recompile_limit_warnings "recompile_limit|recompile limit" "$out/$stage.log"
  record generate_device_cuda "$py" -m xdllm.cli.main generate ckpt="$run" device="$device"
  record generate_device_cpu "$py" -m xdllm.cli.main generate ckpt="$run" device=cpu
  record eval_test_split "$py" -m xdllm.cli.main eval ckpt="$run" split=test device="$device"
  # the loop's host time between steps against a step's (sort_mlm, one loader worker)
  record loop_overhead "$py" scripts/bench_loop_overhead.py "$trainer" data.num_workers=1 "${tiny[@]}"

  # sudoku_mlm_gpu: optimizer steps per second once the loader processes are up (the log's
  # timestamped metric lines, every 10 steps), with the experiment's 12 workers and with 4.
  local workers
  for workers in 12 4; do
    local sudoku=$out/sudoku_$workers steps=400 extra=()
    [ "$smoke" = 1 ] && { steps=20; extra=(model.d_model=32 model.n_layers=1 trainer.accelerator=cpu
                                           trainer.precision=32-true data.num_val_samples=16
                                           data.num_test_samples=16); }
    rm -rf "$sudoku"
    record "sudoku_mlm_gpu_workers_$workers" "$py" -m xdllm.cli.main train experiment=sudoku_mlm_gpu \
      run_dir="$sudoku" data.num_workers="$workers" trainer.max_steps="$steps" \
      generate_after_train=false "${extra[@]}"
    "$py" scripts/step_rate.py "$sudoku" | sed "s/^/{\"name\": \"sudoku_step_rate_workers_$workers\", \"result\": /; s/\$/}/" \
      | tee -a "$out/$stage.json"
  done
}

# stage_open: the figures docs/training.md lists as not measured yet, the most wanted first.
stage_open() {
  local run=$out/varlen_sort_packed trainer=trainer=gpu tiny=() layouts_125m=(packed_flex nomask) bench=()
  if [ "$smoke" = 1 ]; then
    trainer=trainer=default
    tiny=(model.d_model=32 model.n_layers=1 trainer.max_steps=20 trainer.val_check_interval=10
          data.num_test_samples=16 history.num_samples=2)
    bench=(--smoke --device cpu)
  fi
  # the two GPU tests that failed on an H200 (2026-11-27), since changed, and flex training
  # against SDPA's gradients (the BlockMask is built another way since)
  record gpu_tests_changed "$py" -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_bench_gpu_training.py \
    tests/predict/test_prefix_cache.py tests/nn/test_flex_training_cuda.py tests/bd3lm/test_bd3lm_flex_cuda.py \
    tests/hybrid/test_hybrid_flex_cuda.py
  # the BlockMask of packed rows, built from the dense mask since (create_block_mask before)
  record block_mask "$py" scripts/bench_block_mask.py --device "$device"
  # where an eager packed step's time goes (kernels by kind), and its throughput with the new BlockMask
  if [ "$smoke" = 1 ]; then
    record step_profile "$py" scripts/bench_gpu_training.py "${bench[@]}" --layouts packed_flex --profile 2
  else
    record step_profile_125m "$py" scripts/bench_gpu_training.py --configs 125m --layouts packed_flex nomask \
      --steps 10 --profile 3
  fi
  # the whole run with the validation views drawn in another process: step_rate.py lists each
  # validation's seconds
  rm -rf "$run"
  record varlen_sort_packed_train "$py" -m xdllm.cli.main train experiment=varlen_sort_packed "$trainer" \
    run_dir="$run" "${tiny[@]}"
  count recompile_limit_warnings "recompile_limit|recompile limit" "$out/$stage.log"
  [ -d "$run/tensorboard" ] && "$py" scripts/step_rate.py "$run" | sed "s/^/{\"name\": \"varlen_sort_packed_step_rate\", \"result\": /; s/\$/}/" \
    | tee -a "$out/$stage.json"
  if [ "$smoke" = 1 ]; then
    record bench_compiled "$py" scripts/bench_gpu_training.py "${bench[@]}" --compile --layouts "${layouts_125m[@]}"
    record history_overhead "$py" scripts/bench_history.py --device "$device" --repeats 1 --settings sort
    return
  fi
  record bench_125m_compiled "$py" scripts/bench_gpu_training.py --configs 125m --compile --layouts "${layouts_125m[@]}"
  record history_overhead_wide "$py" scripts/bench_history.py --device "$device" --settings wide --no-memory
  record bench_550m_compiled "$py" scripts/bench_gpu_training.py --configs 550m --compile --layouts packed_flex
  record loop_overhead "$py" scripts/bench_loop_overhead.py "$trainer" data.num_workers=1
  record block_decoding_bd3lm "$py" scripts/bench_block_decoding.py --family bd3lm --device "$device"
  record prefix_cache "$py" scripts/bench_prefix_cache.py --random-model --device "$device" --batch-size 64 \
    --batches 4 --prompt-len 256 --max-new-tokens 32 --block-sizes 0 8 --refresh 0 4
  record prefix_cache_paces "$py" scripts/bench_prefix_cache.py --random-model --weight-std 0.3 --threshold 0.5 \
    --device "$device" --batch-size 64 --batches 2 --prompt-len 112 --max-new-tokens 64 --block-sizes 0 16 --dual
  record bench_125m_plain_loss "$py" scripts/bench_gpu_training.py --configs 125m --loss plain
}

run_stage() {
  case $1 in
    bench-*) stage_bench "${1#bench-}" ;;
    *) "stage_$1" ;;
  esac
}

case $stage in
  tests | bench-125m | bench-550m | runs | open) run_stage "$stage" ;;
  all) for stage in tests bench-125m bench-550m runs; do run_stage "$stage"; done ;;
  *) echo "error: unknown stage '$stage' (tests, bench-125m, bench-550m, runs, open or all)" >&2; exit 2 ;;
esac

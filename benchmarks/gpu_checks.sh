#!/usr/bin/env bash
# Every GPU check of the toolkit in three device calls, each under 10 minutes (its steps' time
# limits add up to 550 s or less), logs and JSON under $OUT (at most 6 files per stage):
#   OUT=gpu_out bash benchmarks/gpu_checks.sh a  # GPU tests; 124M toolkit vs plain, megatron's RoPE as the
#                                                 # before of the copy fix, patched/unpatched over 10 rounds
#   OUT=gpu_out bash benchmarks/gpu_checks.sh b  # 350M and 1B toolkit vs plain; the trainer's 124M step time
#   OUT=gpu_out bash benchmarks/gpu_checks.sh c  # 124M levers: micro-batch 16/32, torch.compile, CUDA graphs,
#                                                 # batches already on the device; where the copies come from
# docs/gpu_runs.md ("Issue 26: what the next GPU session runs") says how to read the results.
set -u
stage=${1:?usage: bash benchmarks/gpu_checks.sh a|b|c}
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'mcore', m.__version__)"
  git log --oneline -1 2>/dev/null
} 2>&1 | tee "$OUT/env_$stage.txt"
quiet() { grep -v -i -E "warn|^\s*$"; }
vs_plain() {  # vs_plain LIMIT NAME ARGS...: benchmarks/gpu_vs_plain.py, log and JSON under $OUT
  local limit=$1 name=$2
  shift 2
  timeout "$limit" python3 benchmarks/gpu_vs_plain.py --json "$OUT/$name.json" "$@" 2>&1 | quiet | tee "$OUT/$name.log"
}
case $stage in
  a)
    echo "=== pytest -m gpu (kernel choices, run and resume, throughput switches, plain GPT parity)"
    workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
    timeout 270 python3 -m pytest -m gpu $workers -q -p no:cacheprovider -rA > "$OUT/pytest_gpu.log" 2>&1
    grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest_gpu.log" | tail -14
    echo "=== 124M: toolkit vs plain, megatron's RoPE alongside; patched/unpatched"
    vs_plain 280 vs_plain_124m --sizes 124m --rounds 10 --steps 2 --patch-rounds 10 \
      --variant rope_megatron:model.rope_impl=megatron
    ;;
  b)
    # 8 micro-batches of 8 per step at every size (the 124M config's 64 sequences): the configs'
    # 128-sequence steps would double each round's time
    echo "=== 350M: toolkit vs plain"
    vs_plain 200 vs_plain_350m --sizes 350m --rounds 8 --steps 1 --warmup 2 --patch-rounds 0 \
      --override training.global_batch_size=64
    echo "=== 1B: toolkit vs plain"
    vs_plain 260 vs_plain_1b --sizes 1b --rounds 8 --steps 1 --warmup 2 --patch-rounds 0 \
      --override training.global_batch_size=64
    echo "=== 124M through train_gpt.py, 30 steps (what the trainer logs)"
    timeout 90 python3 train_gpt.py --config configs/gpt_100m_gpu.yaml data.mock=true model.vocab_size=50304 \
      scheduler.warmup_steps=5 logging.interval=10 logging.progress_bar=false training.steps=30 eval.at=[1.0] \
      eval.batches=2 checkpoint.final=false run.dir=/tmp/run_124m --force > /tmp/train_124m.log 2>&1
    python3 -c "
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r['kind'] == 'train': print('step', r['step'], 'step_time_s', round(r['step_time_s'], 3), 'tokens/s', round(r.get('tokens_per_s') or 0), 'MFU', r['mfu'])
" /tmp/run_124m/metrics.jsonl 2>&1 | tee "$OUT/train_124m.txt"
    tail -3 /tmp/train_124m.log
    ;;
  c)
    echo "=== 124M levers, each against the toolkit's default in the same rounds"
    vs_plain 300 levers_124m --sizes 124m --rounds 6 --steps 2 --patch-rounds 0 \
      --variant mb16:training.micro_batch_size=16 --variant mb32:training.micro_batch_size=32 \
      --variant compile:model.compile=true --variant cuda_graphs:model.cuda_graphs=true \
      --variant device_batches:bench.device_batches=true
    for rope in toolkit megatron; do
      echo "=== where a 124M step's time goes, copies by source (model.rope_impl=$rope)"
      timeout 95 python3 benchmarks/step_profile.py --config configs/gpt_100m_gpu.yaml --steps 2 --warmup 2 \
        --top 20 --copies 25 data.mock=true model.vocab_size=50304 model.rope_impl=$rope 2>&1 | quiet \
        > "$OUT/copies_$rope.txt"
      head -14 "$OUT/copies_$rope.txt"
    done
    ;;
  *)
    echo "unknown stage $stage (a, b or c)" >&2
    exit 2
    ;;
esac

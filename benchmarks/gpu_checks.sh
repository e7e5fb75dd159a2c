#!/usr/bin/env bash
# Every GPU check of the toolkit in three device calls, logs and JSON under $OUT (at most 6 files
# per stage):
#   OUT=gpu_out bash benchmarks/gpu_checks.sh a  # GPU tests; 124M toolkit vs plain, megatron's RoPE as the
#                                                 # before of the copy fix, patched/unpatched over 10 rounds
#   OUT=gpu_out bash benchmarks/gpu_checks.sh b  # 350M and 1B toolkit vs plain; the trainer's 124M step time
#   OUT=gpu_out bash benchmarks/gpu_checks.sh c  # 124M levers: micro-batch 16/32, torch.compile, CUDA graphs,
#                                                 # batches already on the device; where the copies come from
#   bash benchmarks/gpu_checks.sh rehearse       # here, on CPU: a, b and c at a tiny shape, with the packages
#                                                 # the node's image lacks unimportable; fails on any traceback
# BUDGET=SECONDS (default 550) is a stage's whole time: its steps share it in fixed parts, and the
# benchmarks stop between rounds 10% and 10 s before their part ends (--time-limit), so a short
# budget gives fewer rounds rather than a step killed with its numbers. A step still running at
# the end of its part gets SIGTERM (gpu_vs_plain.py then writes the rounds that ended), and
# SIGKILL KILL_AFTER seconds later (default 10): a stage takes at most 98% of BUDGET plus
# KILL_AFTER per step that overruns, plus its set-up (wheels, env_*.txt). docs/gpu_runs.md
# ("Issue 26: what the next GPU session runs") says how to read the results.
set -u
stage=${1:?usage: bash benchmarks/gpu_checks.sh a|b|c|rehearse}
export PYTHONUNBUFFERED=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-gpu_out}
BUDGET=${BUDGET:-550}
KILL_AFTER=${KILL_AFTER:-10}  # seconds from a part's SIGTERM to SIGKILL: a step that ignores SIGTERM ends too
DEVICE=${DEVICE:-cuda}  # cpu: the rehearsal's tiny shapes
TINY=()
CPU_BATCH=training.global_batch_size=32  # on CPU: 16 tiny micro-batches, so the micro-batch 16 and 32 levers run
. benchmarks/node_env.sh
if [ "$DEVICE" = cuda ] && [ "$stage" != rehearse ]; then  # one carry serves both scripts: the study's, or .whl
  use_carried_wheels demo_out/gpu_carry/wheels .whl || exit 2
fi
if [ "$DEVICE" = cpu ]; then  # gpu_vs_plain.TINY owns the tiny shape; fp32 on CPU
  read -r -a TINY <<< "$(python3 -c "from benchmarks.gpu_vs_plain import TINY; print(' '.join(TINY))")"
  TINY+=(training.precision=fp32 parallel.device=cpu "$CPU_BATCH")
fi

part() { echo $((BUDGET * $1 / 100)); }  # part PERCENT: seconds of the budget
quiet() { grep -v -i -E "warn|^\s*$"; }
vs_plain() {  # vs_plain SECONDS NAME ARGS...: benchmarks/gpu_vs_plain.py, log and JSON under $OUT
  local seconds=$1 name=$2 cpu=()
  shift 2
  [ "$DEVICE" = cpu ] && cpu=(--device cpu --tiny --override "$CPU_BATCH" --warmup 1)
  timeout -k "$KILL_AFTER" "$seconds" python3 benchmarks/gpu_vs_plain.py --json "$OUT/$name.json" --time-limit "$(inner_limit "$seconds")" \
    "$@" "${cpu[@]}" 2>&1 | quiet | tee "$OUT/$name.log"
}

rehearse() {  # a, b and c on CPU in the node's image; exit 1 if a step failed or a file is missing
  local tmp bad=0 s f
  tmp=$(mktemp -d)
  for s in a b c; do
    echo "=== rehearse $s"
    DEVICE=cpu BUDGET=${REHEARSE_BUDGET:-300} OUT=$tmp/$s PYTHONPATH=$ROOT/benchmarks/node_image${PYTHONPATH:+:$PYTHONPATH} \
      bash "$0" "$s" > "$tmp/$s.console" 2>&1
    echo "exit $?" >> "$tmp/$s.console"
    for f in $(expected "$s"); do
      [ -s "$tmp/$s/$f" ] || { echo "stage $s: $f missing or empty"; bad=1; }
    done
    # a lever that cannot run on CPU (CUDA graphs) is "left out" as on a GPU without it; anything else fails
    if cat "$tmp/$s.console" "$tmp/$s"/*.log "$tmp/$s"/*.txt 2>/dev/null | grep -v "left out" \
        | grep -E "Traceback|Error:|error:|exit [^0]"; then
      echo "stage $s: a step failed (the lines above; see $tmp)"
      bad=1
    fi
    for f in $(compgen -G "$tmp/$s/*.json"); do
      python3 -c "import json, sys; bad = [s for s in json.load(open(sys.argv[1]))['sizes'] if 'error' in s or not s['rounds']]
print(f'{sys.argv[1]}: {bad}') if bad else None
sys.exit(1 if bad else 0)" "$f" || bad=1
    done
  done
  python3 benchmarks/gpu_goals.py "$tmp/a" "$tmp/b" "$tmp/c" > "$tmp/goals.md" || { echo "gpu_goals.py failed"; bad=1; }
  for f in copies_toolkit copies_megatron; do  # the RoPE fix's before and after, as the tables read them
    grep -q "^| $f | [0-9]" "$tmp/goals.md" || { echo "gpu_goals.py read no step profile from c/$f.txt"; bad=1; }
  done
  echo "rehearsal: $([ $bad = 0 ] && echo "every step ran" || echo "FAILED"); files under $tmp"
  return $bad
}

expected() {  # the files a stage writes under $OUT
  case $1 in
    a) echo env_a.txt pytest_gpu.log vs_plain_124m.log vs_plain_124m.json ;;
    b) echo env_b.txt vs_plain_350m.log vs_plain_350m.json vs_plain_1b.log vs_plain_1b.json train_124m.txt ;;
    c) echo env_c.txt levers_124m.log levers_124m.json copies_toolkit.txt copies_megatron.txt ;;
  esac
}

if [ "$stage" = rehearse ]; then
  rehearse
  exit $?
fi
mkdir -p "$OUT"
{
  if [ "$DEVICE" = cuda ]; then nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; fi
  python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'mcore', m.__version__)"
  git log --oneline -1 2>/dev/null
  echo "stage $stage, budget $BUDGET s, device $DEVICE"
} 2>&1 | tee "$OUT/env_$stage.txt"
case $stage in
  a)
    echo "=== pytest -m gpu (kernel choices, run and resume, throughput switches, plain GPT parity)"
    workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
    # -v: one line per test as it ends, so a time limit that stops pytest still leaves each finished result
    # shellcheck disable=SC2086
    timeout -k "$KILL_AFTER" "$(part 45)" python3 -m pytest -m gpu $workers -v -p no:cacheprovider -rfE > "$OUT/pytest_gpu.log" 2>&1
    echo "pytest exit $? (124, 137: the time limit)"
    grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|skipped" "$OUT/pytest_gpu.log" | tail -14
    echo "=== 124M: toolkit vs plain, megatron's RoPE alongside; patched/unpatched"
    vs_plain "$(part 53)" vs_plain_124m --sizes 124m --rounds 10 --steps 2 --patch-rounds 10 \
      --variant rope_megatron:model.rope_impl=megatron
    ;;
  b)
    # 8 micro-batches of 8 per step at every size (the 124M config's 64 sequences): the configs'
    # 128-sequence steps would double each round's time
    echo "=== 350M: toolkit vs plain"
    vs_plain "$(part 36)" vs_plain_350m --sizes 350m --rounds 8 --steps 1 --warmup 2 --patch-rounds 0 \
      --override training.global_batch_size=64
    echo "=== 1B: toolkit vs plain"
    vs_plain "$(part 46)" vs_plain_1b --sizes 1b --rounds 8 --steps 1 --warmup 2 --patch-rounds 0 \
      --override training.global_batch_size=64
    echo "=== 124M through train_gpt.py, 30 steps (what the trainer logs)"
    timeout -k "$KILL_AFTER" "$(part 16)" python3 train_gpt.py --config configs/gpt_100m_gpu.yaml data.mock=true model.vocab_size=50304 \
      scheduler.warmup_steps=5 logging.interval=10 logging.progress_bar=false training.steps=30 eval.at=[1.0] \
      eval.batches=2 checkpoint.final=false run.dir=/tmp/run_124m "${TINY[@]}" --force > /tmp/train_124m.log 2>&1
    python3 -c "
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r['kind'] == 'train': print('step', r['step'], 'step_time_s', round(r['step_time_s'], 3), 'tokens/s', round(r.get('tokens_per_s') or 0), 'MFU', r['mfu'])
" /tmp/run_124m/metrics.jsonl 2>&1 | tee "$OUT/train_124m.txt"
    tail -3 /tmp/train_124m.log
    ;;
  c)
    echo "=== 124M levers, each against the toolkit's default in the same rounds"
    # the variants are set up in this order, each only while the time limit allows (its set-up is cut at
    # the limit): the quick ones first, the first torch.compile of the layers last
    vs_plain "$(part 70)" levers_124m --sizes 124m --rounds 6 --steps 2 --patch-rounds 0 \
      --variant mb16:training.micro_batch_size=16 --variant mb32:training.micro_batch_size=32 \
      --variant device_batches:bench.device_batches=true --variant cuda_graphs:model.cuda_graphs=true \
      --variant compile:model.compile=true
    for rope in toolkit megatron; do
      echo "=== where a 124M step's time goes, copies by source (model.rope_impl=$rope)"
      timeout -k "$KILL_AFTER" "$(part 14)" python3 benchmarks/step_profile.py --config configs/gpt_100m_gpu.yaml --device "$DEVICE" \
        --steps 2 --warmup 2 --top 20 --copies 25 data.mock=true model.vocab_size=50304 model.rope_impl=$rope \
        "${TINY[@]}" 2>&1 | quiet > "$OUT/copies_$rope.txt"
      head -14 "$OUT/copies_$rope.txt"
    done
    ;;
  *)
    echo "unknown stage $stage (a, b, c or rehearse)" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# Every GPU check of the toolkit in one go (5-10 minutes on one H100; each step has a time limit, 570 s in all), logs under $OUT:
#   OUT=gpu_out bash benchmarks/gpu_checks.sh
# GPU tests, the 124M config's step time and MFU, where a step's time goes, patch overhead.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, torch.version.cuda, 'mcore', m.__version__)"
echo "=== pytest -m gpu"
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 6")
timeout 300 python3 -m pytest -m gpu $workers -q -p no:cacheprovider -rA > "$OUT/pytest_gpu.log" 2>&1
grep -E "PASSED|FAILED|ERROR|passed|failed" "$OUT/pytest_gpu.log" | tail -12
echo "=== 124M, 40 steps"
timeout 100 python3 train_gpt.py --config configs/gpt_100m_gpu.yaml data.mock=true model.vocab_size=50304 \
  scheduler.warmup_steps=10 logging.interval=10 logging.progress_bar=false training.steps=40 eval.at=[1.0] \
  eval.batches=2 checkpoint.interval=1000 run.dir="$OUT/run_124m" --force > "$OUT/train_124m.log" 2>&1
python3 -c "
import json, sys
for r in map(json.loads, open(sys.argv[1])):
    if r['kind'] == 'train': print('step', r['step'], 'step_time_s', round(r['step_time_s'], 3), 'TFLOP/s', round(r['tflops_per_gpu'] or 0, 1), 'MFU', r['mfu'])
" "$OUT/run_124m/metrics.jsonl"
echo "=== step profile"
timeout 80 python3 benchmarks/step_profile.py --config configs/gpt_100m_gpu.yaml --steps 2 --warmup 2 --top 25 --ops 30 \
  data.mock=true model.vocab_size=50304 2>&1 | grep -v -i warn > "$OUT/step_profile.txt"
head -12 "$OUT/step_profile.txt"
echo "=== patch overhead"
timeout 90 python3 benchmarks/patch_overhead.py --device cuda --rounds 20 --steps 3 2>&1 | grep -v -i warn | tail -2

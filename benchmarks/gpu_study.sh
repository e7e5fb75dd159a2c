#!/usr/bin/env bash
# The GPU depth-transfer study on a node that gives a command at most 10 minutes, cannot
# download anything, and receives at most 64 MiB (docs/gpu_runs.md, "The GPU study").
#
#   bash benchmarks/gpu_study.sh prepare        # here, with the network: data and wheels into demo_out/gpu_carry
#   bash benchmarks/gpu_study.sh travel         # here: what a call sends (working tree + carry) against 64 MiB
#   bash benchmarks/gpu_study.sh bench          # on the GPU node: start-up phases, packing throughput
#                                               # (BUDGET seconds, default 530: fewer rounds if short)
#   bash benchmarks/gpu_study.sh part [SECONDS] # on the GPU node: the study for at most SECONDS (default 530),
#                                               # then its state and results into $OUT; repeat until it exits 0
#   bash benchmarks/gpu_study.sh rehearse       # here, on CPU: prepare + parts of 180 s on a CPU-sized copy,
#                                               # the study directory wiped after every other part (a fresh node),
#                                               # then bench with its sizes cut
#
# Everything the node needs travels in one carried folder, demo_out/gpu_carry (sizes printed by
# `prepare`): data/ (the tokenized corpus: manifest, tokenizer, .bin/.idx, no work files),
# wheels/ (what the node's image lacks) and, after a part on a machine since given back,
# state.tar.gz (the study directory without checkpoints or index caches: a run that was cut
# restarts from its first step there; on a machine still warm it resumes from its checkpoint).
# A session that ends before the study does commits its last state.tar.gz as
# docs/studies/<study>/state.tar.gz; a later session's parts restore it when nothing is carried.
# The study directory may land under another path there: the study rewrites its base config
# to the new place (study.sweep.AdaptiveSweep._moved), and its runs take the trainer of the
# checkout there (sweep.yaml records none: docs/launch.md, "Moving a sweep directory").
# A part ends by the time limit with exit 75 (SIGTERM: the trainers checkpoint and exit 75, the
# study stops planning) or 124/143 (the limit hit outside a run); every finished run is kept.
set -u
STUDY=${STUDY:-gpu_h100}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
. benchmarks/node_env.sh
WORK=demo_out/$STUDY
CARRY=demo_out/gpu_carry
OUT=${OUT:-gpu_out}
WHEELS=(megatron-core==0.16.1 omegaconf==2.4.0 antlr4-python3-runtime==4.13.2)
export PYTHONUNBUFFERED=1
NODE_IMAGE=$ROOT/benchmarks/node_image  # the node's image lacks data_prep's readers and filters (rehearse)

size_mib() { du -sb "$@" 2>/dev/null | awk '{s += $1} END {printf "%.1f", s / 1048576}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }

prepare() {  # data (as the study builds it) and wheels, into $CARRY
  local workers=${WORKERS:-$(nproc)}
  python3 -c "
import sys
from pathlib import Path
from study.data import prepare_data
from study.spec import load_study
prepare_data(Path('$WORK'), load_study('${STUDY_FILE:-$STUDY}'), $workers)
" || return 2
  mkdir -p "$CARRY/data"
  cp "$WORK"/data/{manifest.json,tokenizer.model,train.bin,train.idx,valid.bin,valid.idx} "$CARRY/data/" || return 2
  if [ -z "${SKIP_WHEELS:-}" ]; then
    mkdir -p "$CARRY/wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$CARRY/wheels" "${WHEELS[@]}" || return 2
  fi
  travel
}

travel() {  # what a device call sends, against its 64 MiB: the working tree as the device tool counts it
  # (tracked and untracked-not-ignored files, shared/ if there is one) and the carry
  local tree carry
  tree=$({ git ls-files -z -c -o --exclude-standard; [ -d shared ] && find shared -type f -print0; } \
    | sort -zu | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  carry=$(du -sb "$CARRY" 2>/dev/null | cut -f1)
  echo "carry $CARRY: data $(size_mib "$CARRY/data") MiB, wheels $(size_mib "$CARRY/wheels") MiB," \
       "state $(size_mib "$CARRY/state.tar.gz") MiB; working tree $(mib "$tree") MiB (tracked and untracked," \
       "not ignored); together $(mib $((tree + ${carry:-0}))) MiB of 64"
  [ $((tree + ${carry:-0})) -le $((64 * 1048576)) ] || { echo "over 64 MiB: a device call would refuse it" >&2; return 2; }
}

install() {  # the carried wheels, once per machine
  if [ -z "${SKIP_WHEELS:-}" ]; then
    use_carried_wheels "$CARRY/wheels" || return 2
  else
    export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
  fi
}

restore() {  # the carried data and, on a fresh machine, the study state of the last part
  mkdir -p "$WORK/data"
  for f in "$CARRY"/data/*; do [ -e "$WORK/data/$(basename "$f")" ] || cp "$f" "$WORK/data/"; done
  # the last part's state: carried (this session), else committed (an earlier session's, see the header)
  local state
  for state in "$CARRY/state.tar.gz" "docs/studies/$STUDY/state.tar.gz"; do
    if [ ! -f "$WORK/sweep/sweep.yaml" ] && [ -f "$state" ]; then
      tar -xzf "$state" -C demo_out && echo "restored $WORK from $state"
    fi
  done
}

pack() {  # the study state (no checkpoints, index caches or data) and its results, into $OUT
  mkdir -p "$OUT"
  tar --exclude="$STUDY/data" --exclude="$STUDY/corpus" --exclude=checkpoints --exclude=.index_cache \
      -czf "$OUT/state.tar.gz" -C demo_out "$STUDY" || return 2
  if [ -f "$WORK/demo_summary.md" ]; then
    tar -czf "$OUT/results.tar.gz" -C "$WORK" demo_summary.md demo_summary.json report sweep/results.csv || return 2
  fi
  echo "packed: $OUT/state.tar.gz $(size_mib "$OUT/state.tar.gz") MiB (at most 16)" \
       "$( [ -f "$OUT/results.tar.gz" ] && echo "; $OUT/results.tar.gz $(size_mib "$OUT/results.tar.gz") MiB")"
}

part() {  # the study for at most $1 seconds; exit 0 once it is complete, 75 while runs are left
  local limit=${1:-530}
  install || return 2
  restore
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>/dev/null
  python3 -c "import torch, megatron.core as m; print('torch', torch.__version__, torch.version.cuda, 'mcore', m.__version__)" 2>/dev/null
  mkdir -p "$OUT"
  local log="$OUT/part_$(date +%H%M%S).log" rc
  timeout --signal=TERM --kill-after=45 "$limit" \
    python3 -m launch demo --study "${STUDY_FILE:-$STUDY}" --out "$WORK" ${DEMO_ARGS:-} > "$log" 2>&1
  rc=$?
  grep -E "^\[demo\]|CUDA MPS|GPU runs start|waiting for GPU memory|ran out of GPU memory|^\| " "$log" | tail -40
  python3 -m launch status "$WORK/sweep" 2>/dev/null | head -8
  pack
  case $rc in
    0) echo "study complete: $OUT/results.tar.gz";;
    75|124|137|143) echo "cut by the time limit (exit $rc): run the next part"; rc=75;;
    *) echo "study failed (exit $rc): see $log";;
  esac
  return $rc
}

bench() {  # where a run's start-up goes, and what packing gains, on this GPU (~8 min)
  install || return 2
  restore
  mkdir -p "$OUT"
  python3 -c "
import yaml
from pathlib import Path
from study.data import base_config
from study.spec import load_study
cfg = base_config(load_study('${STUDY_FILE:-$STUDY}'), Path('$WORK/data').resolve())
cfg['model']['num_layers'] = 8
cfg['parametrization']['base_num_layers'] = 2
cfg['optimizer']['lr'] = 2.0 ** -9
Path('$WORK/bench_run.yaml').write_text(yaml.safe_dump(cfg, sort_keys=False))
" || return 2
  # BUDGET seconds in all (default 530), 38% and 62%; each script stops between its rounds before its
  # share ends (inner_limit), so a short budget gives fewer rounds, not a cut one
  # a packing round of 8 runs takes about 150 s on an H100 (the study's L=8 loop, forked starts):
  # under 400 s of budget the rounds have 4 runs, one packed wave against four one at a time
  local rcs=() budget=${BUDGET:-530} t1 t2 runs
  t1=$((budget * 38 / 100))
  t2=$((budget - t1))
  runs=${BENCH_RUNS:-$([ "$budget" -ge 400 ] && echo 8 || echo 4)}
  timeout -k 10 $t1 python3 benchmarks/run_startup.py --config "$WORK/bench_run.yaml" --rounds "${BENCH_ROUNDS:-3}" --steps 5 \
    --time-limit "$(inner_limit $t1)" 2>&1 | grep -v -i warn | tee "$OUT/run_startup.txt" | tail -12
  rcs+=("${PIPESTATUS[0]}")
  timeout -k 10 $t2 python3 benchmarks/gpu_packing.py --config "$WORK/bench_run.yaml" --runs "$runs" --per-gpu 4 \
    --rounds "${BENCH_ROUNDS:-2}" --steps "${BENCH_STEPS:-200}" --time-limit "$(inner_limit $t2)" --compare-mps \
    checkpoint.interval=1000 logging.diagnostics_interval=0 \
    2>&1 | grep -v -i warn | tee "$OUT/gpu_packing.txt" | grep -E "^(round|  |packed|\{)|MPS"
  rcs+=("${PIPESTATUS[0]}")
  echo "bench: run_startup exit ${rcs[0]}, gpu_packing exit ${rcs[1]}"
  [ "${rcs[0]}" = 0 ] && [ "${rcs[1]}" = 0 ]
}

rehearse() {  # the whole sequence on CPU: a CPU-sized copy of the study, short parts, fresh and warm machines
  local tmp
  tmp=$(mktemp -d)
  python3 - "$tmp/rehearsal.yaml" <<EOF || return 2
import sys, yaml
from study.spec import STUDIES_DIR
raw = yaml.safe_load((STUDIES_DIR / "$STUDY.yaml").read_text())
raw.update(name="${STUDY}_rehearsal", device="cpu", precision="auto", depths=[2, 4], hidden_size=64, heads=4,
           seq_length=64, batch=8, micro_batch=4, steps=60, warmup=6, seeds=2, base_seeds=2, eval_batches=2,
           base_lrs_log2=[-9.0, -8.0, -7.0], runs_per_gpu=2, checkpoint_interval=20, diagnostics_interval=20)
yaml.safe_dump(raw, open(sys.argv[1], "w"), sort_keys=False)
EOF
  export STUDY_FILE=$tmp/rehearsal.yaml SKIP_WHEELS=1 WORK=demo_out/${STUDY}_rehearsal CARRY=demo_out/gpu_carry_rehearsal
  STUDY=${STUDY}_rehearsal
  export DEMO_ARGS="--workers 1"
  rm -rf "$WORK" "$CARRY"
  if [ -f "demo_out/${STUDY%_rehearsal}/data/manifest.json" ]; then  # the same corpus and vocabulary, built already
    mkdir -p "$WORK" && cp -r "demo_out/${STUDY%_rehearsal}/data" "$WORK/"
  fi
  prepare || return 2
  rm -rf "$WORK"  # the node's first part has only what is carried
  local rc=75 n=0
  while [ $rc = 75 ] && [ $n -lt ${PARTS:-12} ]; do
    n=$((n + 1))
    echo "=== part $n"
    PYTHONPATH=$NODE_IMAGE OUT=$tmp/out$n part "${PART_SECONDS:-180}"
    rc=$?
    cp "$tmp/out$n/state.tar.gz" "$CARRY/state.tar.gz"
    if [ $((n % 2)) = 1 ]; then  # after odd parts a fresh machine (cut runs restart), after even ones a warm one (they resume)
      rm -rf "$WORK"
    fi
  done
  echo "rehearsal: $n parts, last exit $rc; results in $tmp/out$n"
  [ $rc = 0 ] || return $rc
  echo "=== bench (sizes cut for CPU)"  # its scripts' start and their children's environment, as on the node
  BENCH_ROUNDS=1 BENCH_RUNS=4 BENCH_STEPS=10 PYTHONPATH=$NODE_IMAGE OUT=$tmp/bench bench || return 1
  return 0
}

case ${1:-} in
  prepare) prepare ;;
  travel) travel ;;
  part) part "${2:-530}" ;;
  bench) bench ;;
  rehearse) rehearse ;;
  *) sed -n '2,25p' "$0"; exit 2 ;;
esac

# Sourced by benchmarks/gpu_study.sh and gpu_checks.sh.

# The GPU node's image lacks megatron-core and omegaconf, so their carried wheels are installed once
# per machine into /tmp/site, which goes on PYTHONPATH ahead of the repo (children inherit both:
# launch.processes.with_repo_on_path keeps them).
use_carried_wheels() {  # use_carried_wheels DIR...: the wheels of the first DIR that has any
  local dir wheels
  for dir in "$@"; do
    wheels=("$dir"/*.whl)
    if [ -e "${wheels[0]}" ]; then
      if [ ! -d /tmp/site/megatron ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
          "$dir"/*.whl || return 2
      fi
      export PYTHONPATH=/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
      echo "carried wheels from $dir on PYTHONPATH"
      return 0
    fi
  done
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
}

inner_limit() {  # inner_limit SECONDS: a benchmark's --time-limit inside a step given SECONDS (at least 1):
  local s=$(($1 * 9 / 10 - 10))  # it stops between rounds, 10% and 10 s early, so `timeout` never cuts one
  echo $((s > 1 ? s : 1))
}

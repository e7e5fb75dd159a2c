"""Where a short run's start-up goes (imports, model build, first step), and what the warm
fork server saves, on CPU or GPU.

    python benchmarks/run_startup.py [--rounds 3] [--steps 3] [--config FILE] [--time-limit S] [key=value ...]
    python benchmarks/run_startup.py --config configs/studies/gpu_h100_run.yaml parallel.device=cuda  # on a GPU

1. Phases, in a fresh interpreter per round (what ``executor.start: exec`` pays per run): the
   interpreter's start, importing what the trainer imports (launch.warm_start.PRELOAD_MODULES:
   torch, megatron-core, the trainer), building the session (distributed init, CUDA context,
   data, model, optimizer: ``training.session.build_session``), the first training step and
   the mean of the next ones (the first step's excess over them is its one-off cost: kernel
   selection, allocator growth, lazy inits).
2. The real trainer end to end, exec'd and forked from the warm server
   (``launch.warm_start``, started and warmed once before the rounds, as an executor does),
   alternating which goes first each round: start-up = wall time of
   the process minus the training loop's own time (``summary.json`` ``wall_time_s``). GPU runs
   are forked only where the server's guard allows (it prints why not).

Prints each round and the medians; the ratio fork/exec of the start-up is the claim.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.deadline import Deadline, Rounds, add_time_limit  # noqa: E402
from launch.processes import with_repo_on_path  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402

T0_ENV = "RUN_STARTUP_T0"


def phases_child(config: str, overrides: list[str], steps: int) -> None:
    """Runs in a fresh interpreter: time each phase of a run's start, print one JSON line."""
    t_start = time.time()
    t0 = float(os.environ.get(T0_ENV, t_start))
    from launch.warm_start import preload

    preload()
    t_import = time.time()
    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.data import micro_batches
    from training.session import build_session

    cfg = load_config(RunConfig, config, overrides)
    session = build_session(cfg, force=True, is_main=True)
    t_build = time.time()

    def step(i: int) -> float:
        t = time.time()
        session.backend.train_step(micro_batches(session.data.datasets.train, session.data.plan, i))
        if session.device == "cuda":
            import torch

            torch.cuda.synchronize()
        return time.time() - t

    first = step(0)
    later = [step(i) for i in range(1, steps)]
    row = {
        "interpreter_s": t_start - t0,
        "imports_s": t_import - t_start,
        "build_s": t_build - t_import,
        "first_step_s": first,
        "later_step_s": statistics.mean(later) if later else None,
        "device": session.device,
    }
    print(json.dumps(row), flush=True)
    os._exit(0)  # skip interpreter teardown: not part of a run's start


def run_phases(config: str, overrides: list[str], steps: int, run_dir: Path) -> dict:
    argv = [sys.executable, __file__, "--phases-child", "--config", config, "--steps", str(steps),
            *overrides, f"run.dir={run_dir}"]  # fmt: skip
    env = {**with_repo_on_path(REPO, os.environ), T0_ENV: repr(time.time())}
    out = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"phase child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_trainer(mode: str, config: str, overrides: list[str], steps: int, run_dir: Path, gpu: bool) -> dict:
    """One real trainer run, exec'd or forked; start-up = process wall - the loop's wall_time_s."""
    from launch.warm_start import ForkRefused, fork_trainer

    argv = [sys.executable, str(REPO / "train_gpt.py"), "--config", config, *overrides, f"run.dir={run_dir}",
            f"training.steps={steps}", "checkpoint.final=false", "eval.at=[1.0]", "eval.batches=1",
            "logging.progress_bar=false", "--force"]  # fmt: skip
    env = with_repo_on_path(REPO, os.environ)
    log = run_dir.parent / f"{run_dir.name}.log"
    t0 = time.time()
    if mode == "exec":
        with open(log, "w") as fh:
            code = subprocess.run(argv, env=env, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT).returncode
    else:
        try:
            child = fork_trainer(argv, env=env, log=log, cwd=REPO, gpu=gpu)
        except ForkRefused as exc:
            return {"refused": str(exc)}
        code = child.wait()
    wall = time.time() - t0
    if code != 0:
        raise SystemExit(f"{mode} run failed ({code}): {log.read_text()[-3000:]}")
    loop = json.loads((run_dir / "summary.json").read_text())["wall_time_s"]
    return {"wall_s": wall, "loop_s": loop, "startup_s": wall - loop}


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "tiny_cpu.yaml"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3, help="training steps per run (>= 2)")
    add_time_limit(parser)
    parser.add_argument("--phases-child", action="store_true", help=argparse.SUPPRESS)
    args, overrides = parser.parse_known_args()
    deadline = Deadline(args.time_limit)  # from the start: the fork server's start counts against it
    if args.phases_child:
        phases_child(args.config, overrides, args.steps)
        return ExitCode.OK
    from launch.warm_start import _SERVER
    from runconfig import load_config
    from runconfig.schema import RunConfig

    cfg = load_config(RunConfig, args.config, [*overrides, "run.dir=unused"])
    gpu = cfg.parallel.device == "cuda"
    overrides = [*overrides, f"scheduler.warmup_steps={min(cfg.scheduler.warmup_steps, args.steps - 1)}"]
    phases: list[dict] = []
    ends: dict[str, list[dict]] = {"exec": [], "fork": []}
    t = time.time()
    _SERVER.status()  # the warm server's own start (its imports) is paid once per sweep, not per run
    print(f"fork server ready in {time.time() - t:.2f} s (once per executor)", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        plan = Rounds(args.rounds, deadline)
        for r in plan:
            row = run_phases(args.config, overrides, max(2, args.steps), tmp / f"phases{r}")
            phases.append(row)
            print("phases " + " ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))
            for mode in ("exec", "fork") if r % 2 == 0 else ("fork", "exec"):
                end = run_trainer(mode, args.config, overrides, args.steps, tmp / f"{mode}{r}", gpu)
                ends[mode].append(end)
                print(f"round {r} {mode}: " + " ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                                       for k, v in end.items()), flush=True)  # fmt: skip
        _SERVER.close()
    if plan.note():
        print(plan.note())

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows if r.get(key) is not None)

    print(f"\nmedians over {plan.done} rounds ({phases[0]['device']}):")
    print("  fresh process: " + ", ".join(f"{k} {med(phases, k):.2f} s" for k in phases[0] if k != "device"))
    if any("refused" in e for e in ends["fork"]):
        print(f"  fork refused: {ends['fork'][0].get('refused')}")
        print(f"  exec start-up {med(ends['exec'], 'startup_s'):.2f} s")
        return ExitCode.OK
    e, f = med(ends["exec"], "startup_s"), med(ends["fork"], "startup_s")
    print(f"  start-up (process wall - training loop): exec {e:.2f} s, fork {f:.2f} s, fork/exec {f / e:.3f} "
          f"({e - f:.2f} s saved per run)")  # fmt: skip
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

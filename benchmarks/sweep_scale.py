"""Wall time of a sweep's bookkeeping commands at 200, 2000 and 10000 runs (no training).

    python benchmarks/sweep_scale.py [--sizes 200 2000 10000] [--profile 15] [--keep DIR]

For each size a sweep spec over configs/tiny_cpu.yaml (5 depths x 20 LRs half an octave apart
x size/100 seeds) is timed through:

- ``plan``: ``python -m launch sweep SPEC --sweep-dir DIR --dry-run`` before any run exists
  (expansion and validation of every grid point, then each run's state);
- the run directories are then written through the toolkit's writers as the trainer leaves
  them (``runconfig.dump_yaml`` of the run's config, ``rundir.files.metrics_line`` rows,
  ``write_summary``, ``launch.attempts``; a quarter of the runs preempted half-way), with a
  planted loss ``3 + 0.05 (log2 lr - opt(depth))^2`` so that ``eval transfer`` has optima;
- ``status``: ``python -m launch status DIR`` (every run's state, results.csv written), then
  ``status_again`` (the same files: what a later status or array task pays);
- ``results.csv``: ``launch.status.write_results`` alone, from states already read;
- ``transfer``: ``python -m eval transfer DIR --no-figures --bootstrap 200``.

Each command runs in a fresh process (imports included, as a user runs it) and its wall time
is printed; ``--profile N`` also prints the N functions with most cumulative time (cProfile).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launch import attempts  # noqa: E402
from launch.sweep_dir import read_plan, run_dir  # noqa: E402
from launch.sweep_plan import PlannedRun  # noqa: E402
from runconfig import dump_yaml, load_config  # noqa: E402
from runconfig.schema import RunConfig, run_identity  # noqa: E402
from rundir.contract import Status  # noqa: E402
from rundir.files import EvalRecord, RunSummary, metrics_line, write_summary  # noqa: E402

DEPTHS = [2, 4, 8, 16, 32]
LRS = [2.0 ** (-14 + 0.5 * i) for i in range(20)]


def write_spec(tmp: Path, runs: int, steps: int) -> Path:
    seeds = max(1, runs // (len(DEPTHS) * len(LRS)))
    spec = {
        "name": f"scale{runs}",
        "base_config": str(REPO / "configs" / "tiny_cpu.yaml"),
        "overrides": {"training.steps": steps, "parametrization.base_num_layers": 2, "eval.at": [0.25, 0.5, 1.0]},
        "grid": {"model.num_layers": DEPTHS, "optimizer.lr": LRS, "run.seed": list(range(seeds))},
        "executor": {"kind": "local", "max_parallel": 1, "max_retries": 2, "gpus_per_run": 0},
    }
    path = tmp / f"spec{runs}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def planted_loss(run: PlannedRun) -> float:
    """A quadratic in log2 LR whose optimum moves with depth, plus a seed offset."""
    depth, lr, seed = run.point["model.num_layers"], run.point["optimizer.lr"], run.point.get("run.seed", 0)
    return 3.0 + 0.05 * (math.log2(lr) - (-9.0 + 0.1 * math.log2(depth))) ** 2 + 1e-3 * (seed % 7)


def write_runs(
    sweep_dir: Path, steps: int, log_interval: int, loss: Callable[[PlannedRun], float] = planted_loss
) -> None:
    """Every run of the sweep's plan as the trainer leaves it: three in four completed, the rest
    preempted at half the steps (metrics and attempts, no final summary)."""
    plan = read_plan(sweep_dir)
    first = plan.runs[0]
    cfg = load_config(RunConfig, sweep_dir / "base_config.yaml", plan.train_invocation(sweep_dir, first).overrides)
    for i, run in enumerate(plan.runs):
        rd = run_dir(sweep_dir, run.run_id)
        rd.mkdir(parents=True, exist_ok=True)
        # the first run's loaded config with this run's grid values (loading each would take minutes)
        for key, value in run.point.items():
            section, name = key.split(".")
            setattr(getattr(cfg, section), name, value)
        cfg.run.dir = str(rd)
        (rd / "config.yaml").write_text(dump_yaml(cfg))
        done = i % 4 != 3
        reached = steps if done else steps // 2
        evals = [EvalRecord(round(f * steps), f, loss(run)) for f in cfg.eval.at if round(f * steps) <= reached]
        lines = [metrics_line({"kind": "train", "step": s, "loss": 3.5, "lr": 1e-3, "grad_norm": 1.0})
                 for s in range(log_interval, reached + 1, log_interval)]  # fmt: skip
        lines += [metrics_line({"kind": "eval", "step": e.step, "fraction": e.fraction, "val_loss": e.val_loss})
                  for e in evals]  # fmt: skip
        (rd / "metrics.jsonl").write_text("".join(lines))
        attempt = attempts.begin(rd, os.getpid())
        status = Status.COMPLETED if done else Status.PREEMPTED
        attempts.finish(rd, attempt, 0 if done else 75, status.value, held_lock=True)
        write_summary(
            rd,
            RunSummary(status=status, steps=reached, target_steps=steps, evals=tuple(evals), **run_identity(cfg)),
        )


def timed(args: list[str], profile: int, cwd: Path = REPO) -> tuple[float, int, str]:
    """``python -m ARGS`` in a fresh process: wall seconds, exit code, output (and a profile)."""
    prof = cwd / f"profile-{os.getpid()}.out"
    pre = ["-m", "cProfile", "-o", str(prof)] if profile else []
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, *pre, "-m", *args], cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    out = proc.stdout + proc.stderr
    if profile and prof.is_file():
        buf = io.StringIO()
        pstats.Stats(str(prof), stream=buf).sort_stats("cumulative").print_stats(profile)
        out += "\n" + buf.getvalue().split("\n\n", 1)[-1]
        prof.unlink()
    return wall, proc.returncode, out


def time_results_csv(sweep_dir: Path, profile: int) -> tuple[float, int, str]:
    """``write_results`` alone (states read beforehand), in this process."""
    from launch.status import collect_states, write_results

    plan = read_plan(sweep_dir)
    states = collect_states(sweep_dir, plan)
    prof = cProfile.Profile() if profile else None
    t = time.perf_counter()
    if prof:
        prof.enable()
    _, rows = write_results(sweep_dir, plan, states)
    if prof:
        prof.disable()
    wall = time.perf_counter() - t
    out = f"{rows} rows"
    if prof:
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(profile)
        out += "\n" + buf.getvalue()
    return wall, 0, out


def bench(tmp: Path, runs: int, steps: int, log_interval: int, profile: int) -> dict[str, float]:
    spec = write_spec(tmp, runs, steps)
    sweep_dir = tmp / f"sweep{runs}"
    result: dict[str, float] = {"runs": runs}

    def record(name: str, outcome: tuple[float, int, str], ok: tuple[int, ...] = (0,)) -> None:
        wall, rc, out = outcome
        result[name] = round(wall, 2)
        if rc not in ok or profile:
            print(f"--- {name} at {runs} runs: exit {rc}\n{out[-6000:]}", flush=True)

    record("plan_s", timed(["launch", "sweep", str(spec), "--sweep-dir", str(sweep_dir), "--dry-run"], profile))
    # write sweep.yaml and the base snapshot as `launch sweep` does, without running anything
    code = ("import sys; from pathlib import Path; from launch.sweep_spec import expand, load_spec; "
            "from launch.sweep_dir import write_plan; p = Path(sys.argv[1]); "
            "write_plan(Path(sys.argv[2]), expand(p, load_spec(p)))")  # fmt: skip
    sweep_dir.mkdir()
    subprocess.run([sys.executable, "-c", code, str(spec), str(sweep_dir)], cwd=REPO, check=True)
    t = time.perf_counter()
    write_runs(sweep_dir, steps, log_interval)
    print(f"[{runs}] wrote the run directories in {time.perf_counter() - t:.1f} s", flush=True)
    record("status_s", timed(["launch", "status", str(sweep_dir)], profile), ok=(75,))
    record("status_again_s", timed(["launch", "status", str(sweep_dir)], profile), ok=(75,))
    record("results_csv_s", time_results_csv(sweep_dir, profile))
    args = ["eval", "transfer", str(sweep_dir), "--out", str(tmp / f"transfer{runs}"), "--no-figures"]
    record("transfer_s", timed([*args, "--bootstrap", "200"], profile))
    print(json.dumps(result), flush=True)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 2000, 10000])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print each command's top N by cumtime")
    parser.add_argument("--keep", help="build the sweeps in this new folder and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(args.keep or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        results = [bench(tmp, n, args.steps, args.log_interval, args.profile) for n in args.sizes]
    names = ["plan_s", "status_s", "status_again_s", "results_csv_s", "transfer_s"]
    print("\nruns   " + "".join(f"{n:>16}" for n in names))
    for r in results:
        print(f"{r['runs']:<7}" + "".join(f"{r[n]:>16}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())

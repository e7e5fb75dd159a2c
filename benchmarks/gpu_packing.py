"""Throughput of the same runs packed several to a GPU against one at a time, on one GPU, in one call.

    python benchmarks/gpu_packing.py [--runs 8] [--per-gpu 4] [--rounds 2] [--steps 100]
        [--config FILE] [--compare-mps] [--start fork|exec] [--time-limit S] [key=value ...]

Each round runs the same ``--runs`` runs (seeds 0..runs-1 of ``--config`` with the overrides)
as a local sweep twice: ``executor.runs_per_gpu: 1`` (one at a time) and ``runs_per_gpu:
--per-gpu`` (packed), on the first visible GPU (``CUDA_VISIBLE_DEVICES`` pinned to it), or on
CPU where there is none (one slot: one run with all the cores' threads against ``--per-gpu``
runs splitting them). The order alternates each round, so drift in the machine hits both.
``--compare-mps`` adds packed runs with ``executor.mps: off`` (time-slicing only); packed runs
otherwise use CUDA MPS where the node allows it (the executor prints whether it did).

Prints, per mode and round: wall time, runs/hour, tokens/s summed over the runs (all tokens
trained / wall), and each run's own training speed (tokens / its training loop's time, mean
over runs: how much packing slows one run down); then the medians and the ratio packed / one
at a time of runs/hour (the same runs, so also of tokens/s summed).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.deadline import Deadline, Rounds, add_time_limit  # noqa: E402
from launch import attempts  # noqa: E402
from launch.__main__ import main as launch_main  # noqa: E402
from launch.resources import visible_gpus  # noqa: E402
from launch.sweep_dir import read_plan  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402
from rundir.files import read_summary  # noqa: E402


def spec_file(tmp: Path, name: str, args: argparse.Namespace, overrides: dict, executor: dict) -> Path:
    spec = {
        "name": f"packing_{name}",
        "base_config": str(Path(args.config).resolve()),
        "overrides": {
            "training.steps": args.steps,
            "checkpoint.final": False,
            "logging.progress_bar": False,
            **overrides,
        },  # fmt: skip
        "grid": {"run.seed": list(range(args.runs))},
        "executor": {"kind": "local", "max_parallel": 1, "max_retries": 0, "start": args.start, **executor},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def measure(spec: Path, sweep_dir: Path) -> dict:
    t0 = time.perf_counter()
    code = launch_main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"])
    wall = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"sweep {spec.stem} exited {code}: see {sweep_dir}/runs/*/launch/output.log")
    run_dirs = [sweep_dir / "runs" / r.run_id for r in read_plan(sweep_dir).runs]
    summaries = [read_summary(rd) for rd in run_dirs]
    tokens = sum(s.tokens for s in summaries)
    own = [s.tokens / s.wall_time_s for s in summaries if s.wall_time_s]
    return {
        "wall_s": wall,
        "runs_per_hour": len(summaries) * 3600 / wall,
        "tokens_per_s": tokens / wall,
        "run_tokens_per_s": statistics.mean(own) if own else float("nan"),
        "most_at_once": most_at_once(run_dirs),
    }


def most_at_once(run_dirs: list[Path]) -> int:
    """The most attempts that ran at the same moment (from each run's attempts.json): proof of packing."""
    edges = []
    for rd in run_dirs:
        for a in attempts.read(rd).attempts:
            if a.ended:
                edges += [(dt.datetime.fromisoformat(a.started), 1), (dt.datetime.fromisoformat(a.ended), -1)]
    now = most = 0
    for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):
        now += delta
        most = max(most, now)
    return most


def parse_overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"override {item!r}: expected key=value")
        out[key] = yaml.safe_load(value)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "tiny_cpu.yaml"))
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--per-gpu", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--start", choices=("fork", "exec"), default="fork")
    parser.add_argument("--compare-mps", action="store_true", help="also packed with executor.mps: off")
    add_time_limit(parser)
    args, rest = parser.parse_known_args()
    deadline = Deadline(args.time_limit)
    overrides = parse_overrides(rest)
    gpus = visible_gpus()
    if gpus:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]  # both modes on the same, single GPU
    device = f"GPU {gpus[0]}" if gpus else f"CPU ({os.cpu_count()} cores)"
    per_run = {"gpus_per_run": 1 if gpus else 0}
    modes = {"one_at_a_time": {**per_run, "runs_per_gpu": 1}, "packed": {**per_run, "runs_per_gpu": args.per_gpu}}
    if args.compare_mps and gpus:
        modes["packed_no_mps"] = {**per_run, "runs_per_gpu": args.per_gpu, "mps": "off"}
    print(f"{args.runs} runs of {args.steps} steps ({Path(args.config).name} {' '.join(rest)}) on {device}; "
          f"packed: {args.per_gpu} at a time; start: {args.start}", flush=True)  # fmt: skip
    if args.start == "fork":  # the warm server is this process's, shared by every sweep below: started
        # here, or the first mode of round 0 would pay its start (imports) alone
        from launch.warm_start import _SERVER

        t = time.perf_counter()
        _SERVER.status()
        print(f"fork server ready in {time.perf_counter() - t:.2f} s (before the rounds)", flush=True)
    found: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        plan = Rounds(args.rounds, deadline)
        for r in plan:
            order = list(modes) if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                spec = spec_file(tmp, f"{mode}{r}", args, overrides, modes[mode])
                row = measure(spec, tmp / f"{mode}{r}")
                found[mode].append(row)
                print(f"round {r} {mode}: " + ", ".join(f"{k} {v:,.1f}" for k, v in row.items()), flush=True)
    if plan.note():
        print(plan.note())
    print(f"\nmedians over {plan.done} round(s):")
    med = {m: {k: statistics.median(row[k] for row in rows) for k in rows[0]} for m, rows in found.items()}
    for mode, row in med.items():
        print(f"  {mode}: " + ", ".join(f"{k} {v:,.1f}" for k, v in row.items()))
    base = med["one_at_a_time"]
    for mode in (m for m in med if m != "one_at_a_time"):
        ratio = med[mode]["runs_per_hour"] / base["runs_per_hour"]
        print(f"{mode} / one_at_a_time: runs/hour x{ratio:.2f}, tokens/s summed x"
              f"{med[mode]['tokens_per_s'] / base['tokens_per_s']:.2f}, one run's own speed x"
              f"{med[mode]['run_tokens_per_s'] / base['run_tokens_per_s']:.2f}")  # fmt: skip
    print(json.dumps({"device": device, "per_gpu": args.per_gpu, "rounds": plan.done, "medians": med}))
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

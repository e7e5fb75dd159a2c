"""Wall time of a sweep of short CPU runs started by exec against fork (``executor.start``).

    python benchmarks/sweep_start.py [--runs 8] [--steps 20] [--rounds 2]

The same sweep (the demo's run shape at depth 2: width 64, sequence 64, batch 16, mock
data) is run with ``start: exec`` (a fresh python per run) and ``start: fork`` (children
forked from an executor that imported the trainer once, launch/warm_start.py), two runs at
a time, alternating the order each round so load drift hits both. Prints each wall time,
the ratio of medians fork/exec and the seconds saved per run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launch.__main__ import main as launch_main  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402


def sweep_spec(tmp: Path, start: str, runs: int, steps: int) -> Path:
    spec = {
        "name": f"bench_{start}",
        "base_config": str(REPO / "configs" / "tiny_cpu.yaml"),
        "overrides": {
            "training.steps": steps,
            "training.micro_batch_size": 16,
            "training.global_batch_size": 16,
            "parametrization.base_num_layers": 2,
            "model.num_layers": 2,
            "checkpoint.final": False,
            "logging.progress_bar": False,
        },
        "grid": {"optimizer.lr": [2.0 ** (-10 + 0.25 * i) for i in range(runs)]},
        "executor": {"kind": "local", "max_parallel": 2, "max_retries": 0, "gpus_per_run": 0, "start": start},
    }
    path = tmp / f"{start}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    walls: dict[str, list[float]] = {"exec": [], "fork": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for r in range(args.rounds):
            for start in ("exec", "fork") if r % 2 == 0 else ("fork", "exec"):
                spec = sweep_spec(tmp, start, args.runs, args.steps)
                t0 = time.perf_counter()
                code = launch_main(["sweep", str(spec), "--sweep-dir", str(tmp / f"{start}{r}"), "--no-progress"])
                walls[start].append(time.perf_counter() - t0)
                if code != 0:
                    print(f"sweep with start={start} exited {code}", file=sys.stderr)
                    return ExitCode.FAILED
                print(f"round {r} {start}: {walls[start][-1]:.1f} s for {args.runs} runs", flush=True)
    e, f = statistics.median(walls["exec"]), statistics.median(walls["fork"])
    print(
        f"fork/exec wall ratio {f / e:.3f}; {(e - f) / args.runs:.2f} s saved per run ({args.runs} runs, 2 at a time)"
    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

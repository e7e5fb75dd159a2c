"""Time of ``python -m launch status`` over a large synthetic sweep (no training).

    python benchmarks/status_scale.py [--runs 2000] [--steps 1000] [--log-interval 10] [--reads 3]

A sweep spec with ``--runs`` grid points over configs/tiny_cpu.yaml is expanded with launch's own
``expand`` and ``write_plan``; each run directory is then filled through the toolkit's writers as
the trainer leaves it: ``config.yaml`` (``runconfig.dump_yaml`` of the run's loaded config),
``metrics.jsonl`` (``rundir.files.metrics_line``, a train row every ``--log-interval`` steps and
the evals at ``eval.at``), ``summary.json`` (``write_summary``) and an attempt log
(``launch.attempts.begin``/``finish``). Three quarters of the runs are completed, the rest are
mid-way (preempted at half the steps: metrics and no final summary). Prints the wall time and
peak memory of ``launch status`` (best of ``--reads``), in a fresh process each read.
``--compare-python-yaml`` also times it with PyYAML's pure-Python parser forced (what ``status``
used before ``runconfig.load_yaml``), alternating, and prints the ratio. ``--keep DIR`` keeps the sweep (e.g. to time ``status`` at two revisions on the same files).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sweep_scale import write_runs  # noqa: E402  (benchmarks/, this script's folder)

from launch.sweep_dir import write_plan  # noqa: E402
from launch.sweep_spec import expand, load_spec  # noqa: E402


def make_sweep(tmp: Path, runs: int, steps: int, log_interval: int) -> Path:
    spec = {
        "name": "status_scale",
        "base_config": str(REPO / "configs" / "tiny_cpu.yaml"),
        "overrides": {"training.steps": steps, "parametrization.base_num_layers": 2, "eval.at": [0.25, 0.5, 1.0]},
        "grid": {
            "model.num_layers": [2, 4, 8, 16, 32],
            "optimizer.lr": {"values": [2.0 ** (-12 + 0.01 * i) for i in range(-(-runs // 5))]},
        },
        "executor": {"kind": "local", "max_parallel": 1, "max_retries": 2, "gpus_per_run": 0},
    }
    spec_path = tmp / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    plan = expand(spec_path, load_spec(spec_path))
    plan.runs = plan.runs[:runs]
    sweep_dir = tmp / "sweep"
    sweep_dir.mkdir()
    write_plan(sweep_dir, plan)
    write_runs(sweep_dir, steps, log_interval)
    return sweep_dir


def time_status(sweep_dir: Path, python_yaml: bool = False) -> tuple[float, float, str]:
    """``launch status`` in a fresh process: wall seconds, peak RSS (MiB), its output.
    ``python_yaml``: with PyYAML's pure-Python parser (what status used before runconfig.load_yaml)."""
    force = "import yaml, runconfig.loader as l; l._SAFE_LOADER = yaml.SafeLoader; " if python_yaml else ""
    code = (
        force + "import resource, sys, time; from launch.__main__ import main; t = time.perf_counter(); "
        "rc = main(['status', sys.argv[1]]); "
        "print(f'@@ {time.perf_counter() - t} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}', file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(sweep_dir)], cwd=REPO, capture_output=True, text=True)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("@@ "))
    wall, rss_kib = line.split()[1:]
    return float(wall), int(rss_kib) / 1024, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--reads", type=int, default=3)
    parser.add_argument("--compare-python-yaml", action="store_true",
                        help="also time status with PyYAML's pure-Python parser (alternating) and print the ratio")  # fmt: skip
    parser.add_argument("--keep", help="build the sweep in this new folder and keep it (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(args.keep or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        sweep_dir = make_sweep(tmp, args.runs, args.steps, args.log_interval)
        print(f"built {args.runs} run dirs in {time.perf_counter() - t0:.1f} s")
        walls: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.reads):  # alternating, so load drift on a shared machine hits both
            for python_yaml in (False, True) if args.compare_python_yaml else (False,):
                wall, rss_read, out_read = time_status(sweep_dir, python_yaml)
                walls[python_yaml].append(wall)
                if not python_yaml:
                    rss, out = rss_read, out_read
                print(
                    f"status{' (pure-Python YAML)' if python_yaml else ''}: {wall:.2f} s, peak RSS {rss_read:.0f} MiB"
                )
        print(out.strip().splitlines()[-1])
        result = {"runs": args.runs, "status_wall_s": round(min(walls[False]), 3), "peak_rss_mib": round(rss, 1)}
        if args.compare_python_yaml:
            result["pure_python_yaml_wall_s"] = round(min(walls[True]), 3)
            result["ratio_python_over_libyaml"] = round(min(walls[True]) / min(walls[False]), 2)
        print(json.dumps(result))
    print(f"(this process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

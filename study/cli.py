"""The command line of ``python -m launch demo``: flags -> a study, its output directory and executor."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import yaml

from launch.errors import LaunchError
from rundir.contract import ExitCode
from study.corpus import CORPORA, DEFAULT_CORPUS, corpus_label
from study.demo import run_demo
from study.log import log as _log
from study.spec import available, load_study


def _slurm_options(path: Path) -> dict[str, Any]:
    """The ``slurm:`` section for the demo's sweep spec, checked against :class:`SlurmOptions`."""
    from dataclasses import fields

    from jobscripts.scripts import SlurmOptions

    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LaunchError(f"--slurm-config {path}: {exc}") from None
    known = [f.name for f in fields(SlurmOptions)]
    if not isinstance(raw, dict) or set(raw) - set(known):
        extra = sorted(set(raw) - set(known)) if isinstance(raw, dict) else raw
        raise LaunchError(f"--slurm-config {path}: unknown key(s) {extra}; the keys are {known}")
    return raw


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--study", default=None, help=f"study name in configs/studies ({', '.join(available())}) or a YAML path"
    )
    parser.add_argument("--quick", action="store_true", help="the 'quick' study: a ~3 minute smoke test, no claims")
    parser.add_argument("--depths", type=int, nargs="+", default=None, help="override the study's depths (first = L0)")
    parser.add_argument("--seeds", type=int, default=None, help="override the study's seeds per LR near each optimum")
    parser.add_argument(
        "--base-seeds", type=int, default=None, help="override the study's seeds per LR near the base depth's optimum"
    )
    parser.add_argument(
        "--variants", nargs="+", default=None, metavar="NAME",
        help="run only these of the study's variants (e.g. fig10's linear1_abs); the run budget is per variant",
    )  # fmt: skip
    parser.add_argument(
        "--corpus", default=None,
        help=f"the text the runs train on: a registry corpus ({', '.join(sorted(CORPORA))}), or a path to your own: "
        "a JSONL file of {\"text\": ...} records (data_prep prepares it) or a folder data_prep wrote "
        f"(default: the study file's corpus key, {DEFAULT_CORPUS} where it has none)",
    )  # fmt: skip
    parser.add_argument(
        "--out",
        help="output directory (default: demo_out/<the study's name>, plus _<corpus> off kjv: demo_out/demo, demo_out/demo_quick, demo_out/fig10_sotu, ...)",
    )
    parser.add_argument(
        "--plan", action="store_true",
        help="check the study file and every run config it makes, print the runs it plans (its fixed design on a "
        "planted answer) and their cost, then exit: nothing is trained or written",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=None, help="runs in parallel (default: CPU cores)")
    parser.add_argument(
        "--executor", choices=("local", "slurm"), default="local",
        help="slurm: each round of points is one job array (`launch run --only`); this process plans and submits",
    )  # fmt: skip
    parser.add_argument(
        "--slurm-config", default=None,
        help="YAML of the sweep spec's slurm: keys (partition, account, time, setup, ...) for --executor slurm",
    )  # fmt: skip
    parser.add_argument("--wait", action="store_true", help="--executor slurm: poll until the study is complete")
    parser.add_argument("--poll", type=float, default=60.0, help="--executor slurm --wait: seconds between rounds")


def main(args: argparse.Namespace) -> ExitCode:
    if args.quick and args.study:
        raise LaunchError("--quick is the study 'quick': give --quick or --study, not both")
    s = load_study(
        "quick" if args.quick else (args.study or "default"),
        depths=tuple(args.depths) if args.depths else None,
        seeds=args.seeds,
        base_seeds=args.base_seeds,
        corpus=args.corpus,
        variants=args.variants,
    )
    if args.plan:
        from study.preview import check_run_configs, plan_lines

        check = check_run_configs(s, Path(args.out or "demo_out").resolve() / "data")
        for line in plan_lines(s) + check.memory:
            print(line)
        print(f"{check.checked} run configs (variant x preset x depth) checked")
        return ExitCode.OK
    if args.workers is not None and args.workers < 1:
        raise LaunchError(f"--workers: must be >= 1, got {args.workers}")
    workers = args.workers or os.cpu_count() or 1
    suffix = "" if s.corpus == DEFAULT_CORPUS else f"_{corpus_label(s.corpus)}"
    out = Path(args.out or Path("demo_out") / f"{s.name}{suffix}")
    slurm = None
    if args.slurm_config:
        if args.executor != "slurm":
            raise LaunchError("--slurm-config goes with --executor slurm")
        slurm = _slurm_options(Path(args.slurm_config))
    try:
        return run_demo(out, s, workers, executor=args.executor, slurm=slurm, wait=args.wait, poll_s=args.poll)
    except KeyboardInterrupt:
        _log("interrupted: rerun the same command to resume (finished runs are kept)")
        return ExitCode.RESUMABLE

"""Command line: ``python -m data_prep --config FILE [key=value ...]`` or the flag form.

``--executor slurm [--dry-run]`` submits the stages as SLURM jobs (data_prep/slurm.py);
``--submission DIR --stage NAME`` is what those jobs run (one array task).
Exit codes: 0 done; 1 the run failed (error budget exceeded, nothing readable, a crash),
work so far is kept and a rerun resumes; 2 invalid config or command line (nothing done);
75 an array task was preempted (its finished units are kept).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import sys
from pathlib import Path

from jobscripts.cli import state_defaults
from jobscripts.quiet import quiet_libraries
from rundir.contract import ExitCode

EXAMPLES = """examples:
  python -m data_prep --config configs/data_prep/jsonl_dump.yaml runtime.workers=8
  python -m data_prep --input 'shards/*.jsonl.gz' --output out/ --vocab-size 2048
  python -m data_prep --input crawl/ --format wet --output out/ --tokenizer tokenizer.model
  python -m data_prep --config configs/data_prep/cc_wet.yaml --executor slurm --dry-run runtime.slurm.array_tasks=64
"""


def _parser() -> argparse.ArgumentParser:
    from data_prep.config import DataPrepConfig
    from runconfig import OverridesParser

    p = OverridesParser(
        prog="python -m data_prep",
        description="Common Crawl shards (WET, WARC, JSONL, parquet) -> Megatron .bin/.idx datasets",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        override_schema=DataPrepConfig,
    )
    p.add_argument("--config", help="YAML config (schema: data_prep/config.py, docs/data_prep.md)")
    p.add_argument("--input", action="append", help="input file, directory or glob (repeatable) -> input.paths")
    p.add_argument("--output", help="output directory -> output.dir")
    p.add_argument("--format", help="jsonl | parquet | arrow | wet | warc | auto -> input.format")
    p.add_argument("--text-key", help="JSONL field / parquet or Hugging Face dataset column -> input.text_key")
    p.add_argument("--vocab-size", type=int, help="train a SentencePiece model of this size -> tokenizer.vocab_size")
    p.add_argument("--tokenizer", help="existing SentencePiece .model or HF tokenizer.json -> tokenizer.path")
    p.add_argument("--workers", type=int, help="worker processes (0: in this process) -> runtime.workers")
    p.add_argument("--no-progress", action="store_true", help="no progress bars -> runtime.progress=false")
    p.add_argument("--restart", action="store_true", help="delete the output directory's work files first")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a completed build of another config in the output directory (else refused, exit 2)"
        " -> output.overwrite=true",
    )
    p.add_argument(
        "--executor", choices=("local", "slurm"), help="local cores, or SLURM job arrays -> runtime.executor"
    )
    p.add_argument("--dry-run", action="store_true", help="slurm: write the scripts, print the sbatch commands")
    p.add_argument("--submission", metavar="DIR", help="run one task of this SLURM submission (see --stage)")
    p.add_argument("--stage", help="with --submission: the stage whose task to run")
    p.add_argument("--task", type=int, help="with --submission: the task's rank (default: $SLURM_ARRAY_TASK_ID)")
    p.add_argument("--tasks", type=int, help="with --submission: the stage's task count (checked)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, applied last")
    return state_defaults(p)


def _flag_layer(args: argparse.Namespace) -> dict:
    layer: dict = {}

    def put(section: str, key: str, value) -> None:
        if value is not None:
            layer.setdefault(section, {})[key] = value

    put("input", "paths", args.input)
    put("input", "format", args.format)
    put("input", "text_key", args.text_key)
    put("output", "dir", args.output)
    put("tokenizer", "vocab_size", args.vocab_size)
    put("tokenizer", "path", args.tokenizer)
    put("runtime", "workers", args.workers)
    put("runtime", "executor", args.executor)
    if args.no_progress:
        put("runtime", "progress", False)
    if args.overwrite:
        put("output", "overwrite", True)
    return layer


def main(argv: list[str] | None = None) -> ExitCode:
    quiet_libraries()
    args = _parser().parse_intermixed_args(argv)  # overrides may come before or after flags
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr
    )
    logging.getLogger("data_prep").setLevel(logging.INFO)
    from data_prep.api import load_data_prep_config
    from data_prep.pipeline import DataPrepError, Preempted, raise_preempted, run
    from data_prep.readers import InputError
    from data_prep.tokenizer import TokenizerError
    from runconfig import ConfigError

    if args.submission:
        return _array_task(args)
    try:
        cfg = load_data_prep_config(args.config, args.overrides, [_flag_layer(args)])
    except ConfigError as exc:
        print(f"data_prep: config error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.dry_run and cfg.runtime.executor != "slurm":
        print("data_prep: --dry-run goes with --executor slurm", file=sys.stderr)
        return ExitCode.USAGE
    if args.restart:
        shutil.rmtree(Path(cfg.output.dir) / ".work", ignore_errors=True)
    try:
        if cfg.runtime.executor == "slurm":
            from data_prep.slurm import submit

            return submit(cfg, args.dry_run)
        previous = signal.signal(signal.SIGTERM, raise_preempted)
        try:
            manifest = run(cfg)
        finally:
            signal.signal(signal.SIGTERM, previous)
    except (Preempted, KeyboardInterrupt) as exc:
        why = "SIGTERM" if isinstance(exc, Preempted) else "Ctrl-C"
        print(
            f"data_prep: stopped by {why}; finished units are kept: rerun the same command to resume", file=sys.stderr
        )
        return ExitCode.RESUMABLE
    except (InputError, TokenizerError, ValueError) as exc:  # ValueError: a #SBATCH value (ScriptError)
        print(f"data_prep: config error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except DataPrepError as exc:
        print(f"data_prep: failed: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    summary = {
        "output": str(Path(cfg.output.dir).resolve() / "manifest.json"),
        "train": manifest["train"],
        "valid": manifest["valid"],
        "dtype": manifest["dtype"],
        "tokenizer": manifest["tokenizer"]["path"],
        "documents": manifest["documents"],
        "filters": {k: v for k, v in manifest["filters"].items() if v},
        "skipped": manifest["skipped_total"],
        "elapsed_s": manifest["run"]["elapsed_s"],
    }
    print(json.dumps(summary, indent=1))
    return ExitCode.OK


def _array_task(args: argparse.Namespace) -> ExitCode:
    """One task of a SLURM submission; the rank comes from --task or SLURM_ARRAY_TASK_ID."""
    from data_prep.pipeline import DataPrepError
    from data_prep.slurm import load_frozen, run_array_task

    if not args.stage:
        print("data_prep: --submission needs --stage", file=sys.stderr)
        return ExitCode.USAGE
    folder = Path(args.submission)
    rank = args.task
    if rank is None and os.environ.get("SLURM_ARRAY_TASK_ID"):
        rank = int(os.environ["SLURM_ARRAY_TASK_ID"])
    try:
        frozen_tasks = load_frozen(folder)[2]
        if args.tasks is not None and frozen_tasks.get(args.stage) != args.tasks:
            print(f"data_prep: --tasks {args.tasks}: {folder} has {frozen_tasks.get(args.stage)}", file=sys.stderr)
            return ExitCode.USAGE
        return run_array_task(folder, args.stage, rank)
    except DataPrepError as exc:
        print(f"data_prep: failed: {exc}", file=sys.stderr)
        return ExitCode.FAILED


if __name__ == "__main__":
    from jobscripts.cli import exit_with

    exit_with(main)

"""Launch training jobs and resumable LR x depth sweeps: ``python -m launch {job,sweep,run,status,demo}``.

Exit codes (launch.errors): 0 done; 1 a run (or submission) failed; 2 bad input (the message
names the file, key, grid entry or flag); 4 some runs are running elsewhere; 75 interrupted, or
runs left pending (rerun to resume). ``sweep``, ``run`` and ``status`` say the same of the same
run states; ``job`` under local/torchrun/deepspeed exits with the launcher's code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from jobscripts.cli import state_defaults
from jobscripts.quiet import quiet_libraries
from jobscripts.scripts import ScriptError
from launch.errors import LaunchError
from launch.launchers import DEEPSPEED_BACKENDS, DEFAULT_MASTER_PORT
from rundir.contract import ExitCode, Status


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m launch", description=__doc__.splitlines()[0] + " See docs/launch.md."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    job = sub.add_parser("job", help="one training run (local, torchrun, slurm, deepspeed)")
    job.add_argument("--config", required=True, help="run config YAML; key=value overrides may follow")
    job.add_argument("--launcher", choices=["local", "torchrun", "slurm", "deepspeed"], default="local")
    job.add_argument("--nodes", type=int, default=1)
    job.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node (0: CPU)")
    job.add_argument("--nproc-per-node", type=int, help="processes per node (default: --gpus-per-node, or 1)")
    job.add_argument("--master-addr", help="host of the first node (multi-node torchrun/deepspeed)")
    job.add_argument("--master-port", type=int, default=DEFAULT_MASTER_PORT)
    job.add_argument("--rdzv-id", help="torchrun rendezvous id (default: the job name)")
    job.add_argument("--slurm-mode", choices=["torchrun", "srun"], default="torchrun",
                     help="torchrun: srun one torchrun per node; srun: one task per GPU, SLURM vars -> RANK etc.")  # fmt: skip
    job.add_argument("--partition")
    job.add_argument("--account")
    job.add_argument("--time", help="SLURM time limit, e.g. 04:00:00")
    job.add_argument("--job-name")
    job.add_argument("--cpus-per-task", type=int)
    job.add_argument("--mem")
    job.add_argument(
        "--sbatch-line", action="append", default=[], help="extra sbatch option; write it as --sbatch-line=--qos=high"
    )
    job.add_argument("--signal-grace", type=int, default=120, help="SIGTERM this many s before the time limit")
    job.add_argument("--max-requeues", type=int, default=20,
                     help="a job whose trainers exit 75 (preempted) while SLURM runs it requeues itself this often")  # fmt: skip
    job.add_argument("--setup", action="append", default=[], help="shell line run before the command")
    job.add_argument("--hostfile", help="DeepSpeed hostfile ('host slots=N' lines)")
    job.add_argument("--deepspeed-launcher", choices=list(DEEPSPEED_BACKENDS), default="pdsh")
    job.add_argument("--force", action="store_true", help="pass --force: rerun a completed/diverged run dir")
    job.add_argument("--train-cmd", help="trainer command (default: $DEPTHMUP_TRAIN_CMD or python train_gpt.py)")
    job.add_argument("--dry-run", action="store_true", help="print the script, run nothing")

    sweep = sub.add_parser("sweep", help="expand a sweep spec and run (or submit) its pending runs")
    sweep.add_argument("spec", help="sweep spec YAML; key=value overrides of the spec may follow")
    sweep.add_argument("--sweep-dir", help="default: sweeps/<name>")
    sweep.add_argument("--executor", choices=["local", "slurm"], help="default: the spec's executor.kind")
    sweep.add_argument(
        "--train-cmd", help="trainer command (default: spec train_cmd, $DEPTHMUP_TRAIN_CMD, train_gpt.py)"
    )
    sweep.add_argument("--allow-base-change", action="store_true", help="re-expand although the base config changed")
    _executor_flags(sweep)
    sweep.add_argument("--dry-run", action="store_true", help="print the plan (or the array script), run nothing")

    run = sub.add_parser("run", help="run the pending runs of an expanded sweep directory (no spec needed)")
    run.add_argument("sweep_dir")
    run.add_argument("--only", nargs="+", metavar="RUN_ID", help="just these runs")
    run.add_argument("--echo-output", action="store_true",
                     help="also copy each trainer's output to stdout as it is written (a SLURM array task's log)")  # fmt: skip
    _executor_flags(run)

    status = sub.add_parser("status", help="counts by status; writes SWEEP_DIR/results.csv")
    status.add_argument("sweep_dir")

    from study import cli as study_cli  # the command line is the top layer: it may start a study

    study_cli.add_arguments(sub.add_parser("demo", help="a depth-transfer study end to end (--quick: smoke test)"))
    return state_defaults(parser)


def _executor_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-parallel", type=int, help="runs at a time (default: the spec's executor.max_parallel)")
    parser.add_argument("--max-retries", type=int, help="failed attempts allowed after the first")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _split_overrides(parser: argparse.ArgumentParser, argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """Options may come before or after the ``key=value`` overrides."""
    args, rest = parser.parse_known_args(argv)
    bad = [r for r in rest if r.startswith("-") or "=" not in r]
    if bad:
        _unrecognized(parser, args.command, bad)
    return args, rest


def _unrecognized(parser: argparse.ArgumentParser, command: str, extra: list[str]) -> None:
    """argparse's exit 2 for arguments no option takes; where one names a config key (torchtitan's
    ``--optimizer.lr=3e-4``, Megatron-LM's ``--num-layers 8``), the override to write instead."""
    from runconfig import unrecognized_message
    from runconfig.loader import UNRECOGNIZED

    if command == "job":
        from runconfig.schema import RunConfig as schema
    elif command == "sweep":
        from launch.sweep_spec import SweepSpec as schema
    else:  # no overrides taken: no hint
        parser.error(UNRECOGNIZED + " ".join(extra))
    parser.error(unrecognized_message(extra, schema))


def _cmd_job(args: argparse.Namespace, overrides: list[str]) -> ExitCode:
    from jobscripts.scripts import SlurmOptions
    from launch.job import JobRequest, run_job

    slurm = SlurmOptions(
        partition=args.partition,
        account=args.account,
        time=args.time,
        job_name=args.job_name,
        cpus_per_task=args.cpus_per_task,
        mem=args.mem,
        sbatch_lines=args.sbatch_line,
        setup=args.setup,
        signal_grace_s=args.signal_grace,
        max_requeues=args.max_requeues,
    )
    req = JobRequest(
        config=args.config,
        overrides=overrides,
        launcher=args.launcher,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        nproc_per_node=args.nproc_per_node,
        master_addr=args.master_addr,
        master_port=args.master_port,
        rdzv_id=args.rdzv_id,
        slurm_mode=args.slurm_mode,
        slurm=slurm,
        hostfile=args.hostfile,
        deepspeed_launcher=args.deepspeed_launcher,
        force=args.force,
        train_cmd=args.train_cmd,
    )
    return run_job(req, dry_run=args.dry_run)


def _check_positive(name: str, value: Optional[int], low: int) -> None:
    if value is not None and value < low:
        raise LaunchError(f"{name}: must be >= {low}, got {value}")


def _execute_and_report(sweep_dir: Path, plan, args: argparse.Namespace, only: Optional[list[str]] = None) -> ExitCode:
    from launch.executor_local import execute, select_runs
    from launch.status import collect_states, count_states, exit_code, print_report, snapshot
    from rundir.contract import RESULTS_FILE

    execution = execute(
        sweep_dir,
        plan,
        only=only,
        max_parallel=args.max_parallel,
        max_retries=args.max_retries,
        progress=not args.no_progress,
        echo=sys.stdout.buffer if getattr(args, "echo_output", False) else None,
    )
    written = snapshot(sweep_dir, plan, wait=not only)  # --only (an array task): never queue for the file
    states = collect_states(sweep_dir, plan) if written is None else written[0]
    print_report(sweep_dir, plan, states, sys.stdout)
    if written is None:
        print(f"{sweep_dir / RESULTS_FILE}: left to the process writing it now (results.stale tells it to "
              "write it again with this run's state); `launch status` writes it fresh")  # fmt: skip
    else:
        print(f"wrote {written[1]} ({written[2]} rows)")
    selected = {run.run_id for run in select_runs(plan, only)}
    if execution.disk_full:
        print(f"stopped: disk full ({execution.disk_full}); free space and rerun the same command")
    counts = count_states({rid: s for rid, s in states.items() if rid in selected})
    if execution.interrupted and (counts[Status.PENDING] or counts[Status.RUNNING]):
        return ExitCode.RESUMABLE
    # interrupted after every selected run ended (a run finishing as the signal came): nothing to
    # resume, so no 75 that would requeue an array task only to find its runs done
    return exit_code(counts)


def _cmd_sweep(args: argparse.Namespace, spec_overrides: list[str]) -> ExitCode:
    from launch.executor_slurm import submit_array
    from launch.run_state import run_state
    from launch.sweep_dir import SWEEP_FILE, check_base, keep_run_ids, run_dir, write_plan
    from launch.sweep_spec import default_sweep_dir, expand, load_spec

    _check_positive("--max-parallel", args.max_parallel, 1)
    _check_positive("--max-retries", args.max_retries, 0)
    spec = load_spec(args.spec, spec_overrides)
    if spec.study is not None:
        # expanding it would replace the study's sweep.yaml with the spec's one grid-less run
        where = Path(args.sweep_dir) if args.sweep_dir else Path(args.spec).parent / "sweep"
        raise LaunchError(
            f"{args.spec}: the runs of this sweep are planned by study {spec.study!r} (`python -m launch demo`), "
            f"not by a grid: rerun that command with its --out to go on; `python -m launch status {where}` "
            f"shows its runs and `python -m launch run {where}` runs the ones left"
        )
    sweep_dir = Path(args.sweep_dir or default_sweep_dir(spec)).resolve()
    plan = expand(args.spec, spec, args.train_cmd, sweep_dir)
    if kept := keep_run_ids(sweep_dir, plan):
        print(f"[launch] {kept} run(s) keep their ID of {sweep_dir / SWEEP_FILE}: their checkpoint.init_from "
              "is the same source checkpoint, moved", file=sys.stderr)  # fmt: skip
    if args.max_retries is not None:
        plan.executor.max_retries = args.max_retries
    executor = args.executor or plan.executor.kind
    max_parallel = args.max_parallel or plan.executor.max_parallel
    check_base(sweep_dir, plan, allow_base_change=args.allow_base_change)  # a dry run refuses what the run would
    if executor == "slurm":
        if not args.dry_run:
            write_plan(sweep_dir, plan, allow_base_change=args.allow_base_change)
        return submit_array(sweep_dir, plan, max_parallel=max_parallel, dry_run=args.dry_run, cwd=Path.cwd())
    if args.dry_run:
        print(f"sweep {plan.name}: {len(plan.runs)} runs -> {sweep_dir}")
        for run in plan.runs:
            state = run_state(run_dir(sweep_dir, run.run_id), plan.executor.max_retries)
            action = "run" if state.needs_work else "skip"
            print(f"  {action:<4} {state.status:<9} {run.run_id}  {run.point}")
        return ExitCode.OK
    write_plan(sweep_dir, plan, allow_base_change=args.allow_base_change)
    return _execute_and_report(sweep_dir, plan, args)


def _cmd_run(args: argparse.Namespace) -> ExitCode:
    from launch.sweep_dir import read_plan

    _check_positive("--max-parallel", args.max_parallel, 1)
    _check_positive("--max-retries", args.max_retries, 0)
    sweep_dir = Path(args.sweep_dir).resolve()
    return _execute_and_report(sweep_dir, read_plan(sweep_dir), args, only=args.only)


def _cmd_status(args: argparse.Namespace) -> ExitCode:
    from launch.status import QueueView, count_states, exit_code, print_report, queue_view, snapshot
    from launch.sweep_dir import read_plan

    sweep_dir = Path(args.sweep_dir).resolve()
    plan = read_plan(sweep_dir)
    queues: list[QueueView] = []

    def ended_jobs(jobs: set[str]) -> frozenset[str]:
        """squeue, about the jobs of the attempts the states are read from: their SLURM job ended, not running."""
        queues.append(queue_view(sweep_dir, jobs))
        return queues[-1].ended_jobs

    states, path, rows = snapshot(sweep_dir, plan, ended_jobs)  # type: ignore[misc] # waits: never None
    print_report(sweep_dir, plan, states, sys.stdout, queues[-1])
    print(f"wrote {path} ({rows} rows)")
    return exit_code(count_states(states))


def main(argv: Optional[Sequence[str]] = None) -> ExitCode:
    quiet_libraries()
    parser = _parser()
    args, extra = _split_overrides(parser, sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "job":
            return _cmd_job(args, extra)
        if args.command == "sweep":
            return _cmd_sweep(args, extra)
        if extra:
            _unrecognized(parser, args.command, extra)
        if args.command == "demo":
            from study import cli as study_cli

            return study_cli.main(args)
        return _cmd_run(args) if args.command == "run" else _cmd_status(args)
    except (LaunchError, ScriptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:
        from launch.outcomes import DISK_FULL_ERRNOS

        if exc.errno not in DISK_FULL_ERRNOS:
            raise
        print(f"error: disk full: {exc}. Completed runs are kept (their summary.json); free space "
              "(docs/launch.md, \"Disk use\") and rerun the same command to go on", file=sys.stderr)  # fmt: skip
        return ExitCode.RESUMABLE


if __name__ == "__main__":
    from jobscripts.cli import exit_with

    exit_with(main)

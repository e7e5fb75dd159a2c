"""The stages as SLURM jobs: one job array per sharded stage, one job per single-unit stage,
each job waiting on the previous one (``--dependency=afterok``).

``submit(cfg)`` freezes the run under ``<output>/.work/slurm/<key>/`` (the resolved
``config.yaml`` and ``shards.json``; ``key`` is their fingerprint with the array sizes, so
tasks of a queued submission never see another list), finds the first stage with unfinished
units, and submits that stage's unfinished array tasks (only those) and every later stage.
Each submission writes its scripts, ``submit.sh`` (the sbatch commands) and ``jobs.json``
under ``submissions/<UTC time>/``; ``--dry-run`` writes the same files and prints the commands
instead of running them. So a preempted or failed task is resubmitted alone by running the
same command again.

Array task ``i`` of ``N`` runs ``python -m data_prep --submission DIR --stage S --tasks N``
with ``SLURM_ARRAY_TASK_ID=i``: the stage's units ``i, i+N, ...`` (data_prep.pipeline.run_task).
Each task records its attempts in ``attempts/<stage>-<rank>.json`` (rundir.attempts); a
task whose failed attempts exceed ``runtime.slurm.max_retries`` is not resubmitted.
Preemption (SIGTERM, also sent ``signal_grace_s`` before the time limit) is no failure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

import yaml

from data_prep import stages
from data_prep.config import DataPrepConfig, fingerprint
from data_prep.pipeline import Preempted, check_inputs, raise_preempted, run_task
from data_prep.shards import Shard, shards_from_json, shards_to_json
from data_prep.stages import DataPrepError, Job, Stage
from jobscripts import sbatch, squeue
from jobscripts.atomic import atomic_write_text
from jobscripts.requeue import requeue_command
from jobscripts.scripts import render_script, sbatch_directives
from jobscripts.shell import Raw, Word, join
from rundir import attempts
from rundir.contract import STATUS_OF_EXIT, ExitCode, Status

REPO_ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILE, SHARDS_FILE, TASKS_FILE = "config.yaml", "shards.json", "tasks.json"
# The retry policy: outcome -> counts against runtime.slurm.max_retries.
OUTCOMES = {Status.COMPLETED: False, Status.FAILED: True, Status.PREEMPTED: False, Status.INTERRUPTED: False}


# ----------------------------------------------------------------------------- freezing a run


def freeze(cfg: DataPrepConfig, shards: list[Shard], tasks: dict[str, int]) -> Path:
    """``<output>/.work/slurm/<key>/`` with the config, shard list and array sizes every task reads."""
    config_text = yaml.safe_dump(asdict(cfg), sort_keys=False)
    shard_list = shards_to_json(shards)
    key = fingerprint({k: v for k, v in asdict(cfg).items() if k != "runtime"}, shard_list, tasks)
    folder = Path(cfg.output.dir).resolve() / ".work" / "slurm" / key
    for name, text in (
        (CONFIG_FILE, config_text),
        (SHARDS_FILE, json.dumps(shard_list, indent=1) + "\n"),
        (TASKS_FILE, json.dumps(tasks) + "\n"),
    ):
        if not (folder / name).exists():  # the runtime section may differ; the frozen one stays
            atomic_write_text(folder / name, text)
    return folder


def load_frozen(folder: Path) -> tuple[DataPrepConfig, list[Shard], dict[str, int]]:
    from data_prep.api import load_data_prep_config

    cfg = load_data_prep_config(folder / CONFIG_FILE)
    shards = shards_from_json(json.loads((folder / SHARDS_FILE).read_text()))
    return cfg, shards, json.loads((folder / TASKS_FILE).read_text())


def _attempts_file(folder: Path, stage: str, rank: int) -> Path:
    return folder / "attempts" / f"{stage}-{rank}.json"


def failures(folder: Path, stage: str, rank: int) -> int:
    return attempts.read(_attempts_file(folder, stage, rank)).count(lambda outcome: OUTCOMES.get(outcome, True))


# ----------------------------------------------------------------------------- one array task


def run_array_task(folder: Path, stage_name: str, rank: int | None) -> int:
    """One task of a submission, with its attempt recorded; returns the exit code."""
    cfg, shards, tasks = load_frozen(folder)
    cfg.runtime.progress = False  # job logs, not terminals
    stage = next((s for s in stages.active_stages(cfg) if s.name == stage_name), None)
    if stage is None:
        names = [s.name for s in stages.active_stages(cfg)]
        raise DataPrepError(f"--stage {stage_name!r}: this submission's stages are {names}")
    count = tasks[stage_name]
    if rank is None:
        if count != 1:
            raise DataPrepError(f"--stage {stage_name}: {count} tasks; give --task or set SLURM_ARRAY_TASK_ID")
        rank = 0
    if not 0 <= rank < count:
        raise DataPrepError(f"--task {rank}: the {stage_name} stage has tasks 0-{count - 1}")
    log_file = _attempts_file(folder, stage_name, rank)
    attempt = attempts.begin(log_file, os.getpid())
    previous = signal.signal(signal.SIGTERM, raise_preempted)
    code = ExitCode.FAILED
    started = time.time()
    try:
        manifest = run_task(cfg, shards, stage, rank, count)
        code = ExitCode.OK
        done = f"data_prep: {stage_name} task {rank} of {count} completed in {time.time() - started:.1f} s"
        if manifest is not None:  # the merge: the last line of the whole run
            tokens = ", ".join(f"{split} {manifest[split]['tokens']} tokens" for split in ("train", "valid"))
            done += f": wrote {Path(cfg.output.dir).resolve() / 'manifest.json'} ({tokens})"
        print(done, flush=True)
    except Preempted:
        code = ExitCode.RESUMABLE
        print(f"data_prep: {stage_name} task {rank}: preempted; finished units are kept", file=sys.stderr)
    except DataPrepError as exc:
        print(f"data_prep: {stage_name} task {rank} failed: {exc}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        attempts.finish(log_file, attempt, code, STATUS_OF_EXIT[code].value, close_earlier=False)
    return code


# ----------------------------------------------------------------------------- submission


def _array_spec(ranks: list[int], count: int, max_parallel: int | None) -> str:
    spec = f"0-{count - 1}" if ranks == list(range(count)) else ",".join(map(str, ranks))
    return spec + (f"%{max_parallel}" if max_parallel else "")


def stage_script(cfg: DataPrepConfig, folder: Path, stage: Stage, ranks: list[int], count: int) -> str:
    opts = cfg.runtime.slurm
    resources: dict[str, object] = {"nodes": 1, "ntasks": 1}
    if stage.sharded:
        resources = {"array": _array_spec(ranks, count, opts.max_parallel), **resources}
    command = [sys.executable, "-m", "data_prep", "--submission", str(folder), "--stage", stage.name]
    command += ["--tasks", str(count)]
    what = f"{count} array tasks; task i runs units i, i+{count}, ..." if stage.sharded else "one task"
    if opts.max_requeues:  # exit 75 (preempted) while SLURM runs the task: it requeues itself
        command = requeue_command(command, opts.max_requeues, ExitCode.RESUMABLE)
    name = f"{opts.job_name or 'dp'}-{stage.short}"  # dp-clean, dp-tok, ...: each stage its own name in squeue
    return render_script(
        title=f"data_prep stage {stage.name} ({stage.about}): {what}",
        notes=[f"generated by `python -m data_prep --executor slurm` at {_now()}", f"output: {cfg.output.dir}"],
        directives=sbatch_directives(
            dataclasses.replace(opts, job_name=None),
            name=name,
            resources=resources,
            signal_batch_shell=True,
            requeue=bool(opts.max_requeues),
        ),
        cwd=os.getcwd(),
        env={"PYTHONUNBUFFERED": "1", "PYTHONPATH": Word((str(REPO_ROOT), Raw("${PYTHONPATH:+:$PYTHONPATH}")))},
        setup=opts.setup,
        command=command,
    )


def plan_submission(cfg: DataPrepConfig) -> tuple[Path, list[tuple[Stage, list[int]]], dict[str, int]]:
    """The frozen folder and, from the first stage with work left, each stage with the ranks to submit."""
    shards = check_inputs(cfg)
    job = Job(cfg, Path(cfg.output.dir).resolve(), shards)
    active = stages.active_stages(cfg)
    tasks = {
        s.name: max(1, min(cfg.runtime.slurm.array_tasks, len(stages.units(job, s)))) if s.sharded else 1
        for s in active
    }
    folder = freeze(cfg, shards, tasks)
    chain: list[tuple[Stage, list[int]]] = []
    for stage in active:
        count = tasks[stage.name]
        if chain:
            chain.append((stage, list(range(count))))
            continue
        left = stages.unfinished_units(job, stage)
        if left:  # unit k (shard index, band number, or the one unit) belongs to task k % count
            positions = [u.index if isinstance(u, Shard) else (u or 0) for u in left]
            chain.append((stage, sorted({k % count for k in positions})))
    gave_up = [
        f"{stage.name} task {rank} ({failures(folder, stage.name, rank)} failed attempts)"
        for stage, ranks in chain[:1]
        for rank in ranks
        if failures(folder, stage.name, rank) > cfg.runtime.slurm.max_retries
    ]
    if gave_up:
        raise DataPrepError(
            f"not resubmitted, runtime.slurm.max_retries={cfg.runtime.slurm.max_retries} used up: "
            f"{', '.join(gave_up)}; see their logs and {folder / 'attempts'}"
        )
    return folder, chain, tasks


def submit(cfg: DataPrepConfig, dry_run: bool) -> ExitCode:
    """Submit (or with ``dry_run`` print) the jobs for the work that is left; returns an exit code."""
    folder, chain, tasks = plan_submission(cfg)
    if not chain:
        print(f"data_prep: nothing to submit: {Path(cfg.output.dir).resolve() / 'manifest.json'} is up to date")
        return ExitCode.OK
    if not dry_run:
        live = queued_jobs(folder)
        if live:
            raise DataPrepError(
                f"jobs {', '.join(live)} of an earlier submission are still queued or running; "
                "wait for them or scancel them, then run this again"
            )
    sub = folder / "submissions" / dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    lines = ["#!/usr/bin/env bash", "set -euo pipefail"]
    job_ids: dict[str, str] = {}
    previous_id: str | None = None  # the job the next stage waits for
    previous_var: str | None = None  # the same, as submit.sh's shell variable
    for stage, ranks in chain:
        script = sub / f"{stage.name}.sbatch"
        atomic_write_text(script, stage_script(cfg, folder, stage, ranks, tasks[stage.name]))
        pattern = f"/{stage.name}-%A_%a.out" if stage.sharded else f"/{stage.name}-%j.out"
        output = str(sub).replace("%", "%%") + pattern
        waits = [] if previous_var is None else ["--kill-on-invalid-dep=yes"]
        shell_dependency = [] if previous_var is None else [Word(("--dependency=afterok:", Raw(f'"${previous_var}"')))]
        argv = ["sbatch", "--parsable", f"--output={output}", *shell_dependency, *waits, "--requeue", str(script)]
        lines.append(f"{stage.name}=$({join(argv)})")
        lines.append(f'{stage.name}="${{{stage.name}%%;*}}"')  # "123;cluster" -> "123"
        previous_var = stage.name
        if dry_run:
            continue
        dependency = [] if previous_id is None else [f"--dependency=afterok:{previous_id}"]
        try:
            previous_id = sbatch.submit(script, output, [*dependency, *waits, "--requeue"])
        except sbatch.SubmitError as exc:
            atomic_write_text(sub / "jobs.json", json.dumps(job_ids, indent=1) + "\n")
            raise DataPrepError(f"{exc}; jobs submitted so far: {job_ids or 'none'}") from exc
        job_ids[stage.name] = previous_id
    lines.append('echo "submitted: ' + " ".join(f"{s.name}=${s.name}" for s, _ in chain) + '"')
    atomic_write_text(sub / "submit.sh", "\n".join(lines) + "\n")
    summary = ", ".join(f"{s.name} ({len(r)} of {tasks[s.name]} tasks)" for s, r in chain)
    if dry_run:
        print("\n".join(lines[2:]))
        print(f"data_prep: dry run: scripts in {sub} ({summary}); run {sub / 'submit.sh'} to submit", file=sys.stderr)
        return ExitCode.OK
    atomic_write_text(sub / "jobs.json", json.dumps(job_ids, indent=1) + "\n")
    print(f"data_prep: submitted {summary}: jobs {job_ids} ({sub})")
    return ExitCode.OK


def queued_jobs(folder: Path) -> list[str]:
    """Job ids of earlier submissions that ``squeue`` still lists; raises :class:`DataPrepError`
    when squeue cannot answer (read as "none queued", a second chain would be submitted)."""
    ids = []
    for record in sorted((folder / "submissions").glob("*/jobs.json")):
        try:
            ids += [str(v) for v in json.loads(record.read_text()).values()]
        except (OSError, ValueError, AttributeError):
            continue
    try:
        listed = squeue.listed_array_jobs(ids)
    except squeue.QueueError as exc:
        raise DataPrepError(
            f"{exc}: cannot tell whether earlier jobs are still queued, so nothing was submitted; "
            "run this again once squeue answers"
        ) from None
    return [i for i in ids if i in listed]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


__all__ = ["freeze", "load_frozen", "plan_submission", "run_array_task", "submit"]

"""``python -m launch status``: counts by status and ``results.csv`` (docs/contracts.md).

One row per run and eval point: every fraction in the run's ``eval.at`` (empty ``step`` and
``val_loss`` where the run has not got there), plus a row for each other recorded eval
(``eval.interval``). Key columns come from the run's ``config.yaml`` once it has started,
else from the values resolved when the sweep was expanded. The file is written atomically.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import math
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, TextIO

import yaml

from jobscripts import squeue
from jobscripts.atomic import atomic_write_text
from launch.run_state import STATUSES, RunState, read_run_files, state_of
from launch.sweep_dir import file_stamp, orphan_run_dirs, run_dir
from launch.sweep_plan import SweepPlan
from runconfig import flatten, load_yaml
from rundir.contract import (
    BRANCH_COLUMNS,
    CANONICAL_KEYS,
    CONFIG_FILE,
    CONTINUE,
    EVAL_AT_KEY,
    INIT_FROM_KEY,
    INIT_MODE_KEY,
    RESULT_STATUSES,
    RESULTS_FILE,
    STEPS_KEY,
    TAIL_COLUMNS,
    ExitCode,
    Status,
    canonical_values,
)
from rundir.files import RunSummary, branch_source, read_metrics

FRACTION_ATOL = 1e-6
FAILED_LISTED = 20  # failed runs status names one by one; the others are counted by their detail
RESULTS_LOCK = "results.lock"  # beside results.csv: writers read the run states while holding it
# A run's state as results.csv records it (a running run is not finished: pending).
RESULT_STATUS = {s: s for s in RESULT_STATUSES} | {Status.RUNNING: Status.PENDING}


def collect_states(
    sweep_dir: Path, plan: SweepPlan, ended_jobs: Collection[str] | Callable[[set[str]], Collection[str]] = ()
) -> dict[str, RunState]:
    """Every run's state, each run's files read once. ``ended_jobs``: SLURM jobs that no longer
    run, or a function that says which of the jobs of the attempts left open (read here, with the
    states) no longer run (``status``: :func:`queue_view`, asked once per call)."""
    files = {run.run_id: read_run_files(run_dir(sweep_dir, run.run_id)) for run in plan.runs}
    if callable(ended_jobs):
        ended_jobs = ended_jobs(set().union(*(f.open_jobs() for f in files.values())))
    retries = plan.executor.max_retries
    return {rid: state_of(run_dir(sweep_dir, rid), f, retries, ended_jobs) for rid, f in files.items()}


@dataclass(frozen=True)
class QueueView:
    """What ``squeue`` says about a sweep, for ``status`` on a login node.

    ``ended_jobs``: SLURM jobs of attempts left open that no longer run (their node died, or
    they were killed at once): from another host their pids cannot be checked, so without this
    such runs would show as running forever. ``live``: run ID -> the array job that holds it."""

    ended_jobs: frozenset[str] = frozenset()
    live: Mapping[str, str] = field(default_factory=dict)
    folders: Mapping[str, Path] = field(default_factory=dict)  # array job id -> submission folder
    note: str = ""


def queue_view(sweep_dir: Path, jobs: Collection[str]) -> QueueView:
    """Ask squeue (once per question) about ``jobs`` (those of the sweep's open attempts:
    :meth:`launch.run_state.RunFiles.open_jobs`) and the sweep's array submissions; with no
    squeue answer the note says so and nothing changes."""
    from launch.executor_slurm import live_arrays, submission_folders

    folders = submission_folders(sweep_dir)
    if not jobs and not folders:
        return QueueView()
    try:
        ended = frozenset(set(jobs) - squeue.active_jobs(jobs))
        live = live_arrays(sweep_dir, folders) if folders else {}
    except squeue.QueueError as exc:
        return QueueView(note=f"{exc}: runs with an attempt open in a SLURM job are counted as running")
    return QueueView(ended, live, folders)


def count_states(states: Mapping[str, RunState]) -> dict[str, int]:
    counts = dict.fromkeys(STATUSES, 0)
    for state in states.values():
        counts[state.status] += 1
    return counts


def exit_code(counts: Mapping[str, int]) -> ExitCode:
    """What ``sweep``/``run``/``status`` exit with for these run states: FAILED if any failed,
    else BUSY if any runs elsewhere, else RESUMABLE if any is pending, else OK (all final)."""
    if counts[Status.FAILED]:
        return ExitCode.FAILED
    if counts[Status.RUNNING]:
        return ExitCode.BUSY
    return ExitCode.RESUMABLE if counts[Status.PENDING] else ExitCode.OK


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


CONFIG_CACHE = "results.configs.json"  # beside results.csv: what it took from each run's config.yaml


class WrittenConfigs:
    """The values of ``keys`` in each run's ``config.yaml``, each version of the file parsed once.

    Parsing every run's ``config.yaml`` was most of a ``results.csv`` build (12 of 16 s over 10000
    runs), and every writer does it again: ``status``, the end of ``sweep``/``run``, each array
    task. The values are kept in ``SWEEP_DIR/results.configs.json`` under the file's
    ``launch.sweep_dir.file_stamp``; a file whose stat differs (rewritten, replaced) is parsed
    again. The cache is only a shortcut: unreadable, or written for other keys, it is ignored
    and rebuilt."""

    def __init__(self, sweep_dir: Path, keys: Iterable[str]) -> None:
        self.path = sweep_dir / CONFIG_CACHE
        self.keys = sorted(set(keys))
        self.parsed = 0  # config.yaml files parsed (not found in the cache)
        self._old: dict[str, Any] = {}
        self._new: dict[str, Any] = {}
        try:
            data = json.loads(self.path.read_text())
            if data["keys"] == self.keys and isinstance(data["runs"], dict):
                self._old = data["runs"]
        except (OSError, ValueError, KeyError, TypeError):
            pass

    def values(self, rd: Path, run_id: str) -> dict[str, Any]:
        """``keys`` as the run's ``config.yaml`` gives them; {} where it has none (not started)."""
        path = rd / CONFIG_FILE
        try:
            stamp = file_stamp(path)
        except OSError:
            return {}
        entry = self._old.get(run_id)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == stamp and isinstance(entry[1], dict):
            values = entry[1]
        else:
            try:
                written = load_yaml(path.read_text())
            except (OSError, yaml.YAMLError):
                return {}
            self.parsed += 1
            flat = flatten(written) if isinstance(written, dict) else {}
            values = {key: flat[key] for key in self.keys if key in flat}
        self._new[run_id] = [stamp, values]
        return values

    def save(self) -> None:
        if self._new != self._old:
            atomic_write_text(self.path, json.dumps({"keys": self.keys, "runs": self._new}, separators=(",", ":")))


def _metrics_evals(rd: Path) -> list[dict[str, Any]]:
    return [row for row in read_metrics(rd) if row.get("kind") == "eval"]


def recorded_evals(rd: Path, summary: Optional[RunSummary]) -> list[dict[str, Any]]:
    """Evals of a finished run from its ``summary`` (``summary.json`` as its state was read from);
    of any other run from ``metrics.jsonl``."""
    if summary is not None and summary.final:
        return [asdict(e) for e in summary.evals]
    return _metrics_evals(rd)


def eval_points(
    fractions: Iterable[float], steps: int, recorded: Iterable[Mapping[str, Any]]
) -> list[tuple[float, Optional[int], Optional[float]]]:
    """(fraction, step, val_loss) for each planned fraction, then each unplanned recorded eval.

    A recorded eval belongs to a planned fraction when its fraction matches, or failing
    that when its step is that fraction of ``steps`` rounded down, up or to nearest.
    """
    planned: list[float] = []
    for f in fractions:
        if not any(abs(f - p) <= FRACTION_ATOL for p in planned):
            planned.append(float(f))
    found: dict[float, Mapping[str, Any]] = {}
    extra: dict[float, Mapping[str, Any]] = {}
    for rec in recorded:
        frac, step = rec.get("fraction"), rec.get("step")
        target = next((p for p in planned if frac is not None and abs(p - frac) <= FRACTION_ATOL), None)
        if target is None and step is not None:
            target = next(
                (p for p in planned if step in {math.floor(p * steps), math.ceil(p * steps), round(p * steps)}), None
            )
        if target is not None:
            found[target] = rec
        elif frac is not None or (step is not None and steps):
            extra[round(float(frac if frac is not None else step / steps), 12)] = rec
    rows = [(p, found.get(p, {})) for p in planned] + sorted(extra.items())
    return [(fraction, rec.get("step"), rec.get("val_loss")) for fraction, rec in rows]


def results_table(sweep_dir: Path, plan: SweepPlan, states: Mapping[str, RunState]) -> list[list[str]]:
    # key values: the expansion's, overlaid with the run's own resolved config.yaml where it has one
    written = WrittenConfigs(
        sweep_dir, [*CANONICAL_KEYS, *plan.grid, EVAL_AT_KEY, STEPS_KEY, INIT_MODE_KEY, INIT_FROM_KEY]
    )
    configs = {
        run.run_id: {
            **plan.fixed,
            **run.resolved,
            **{k: v for k, v in plan.point(sweep_dir, run).items() if k in plan.sweep_relative},
            **written.values(run_dir(sweep_dir, run.run_id), run.run_id),
        }
        for run in plan.runs
    }
    written.save()
    branches = any(cfg.get(INIT_MODE_KEY) == CONTINUE for cfg in configs.values())
    extra_keys = sorted(k for k in plan.grid if k not in CANONICAL_KEYS and not (branches and k == INIT_FROM_KEY))
    table = [["run_id", *CANONICAL_KEYS, *extra_keys, *(BRANCH_COLUMNS if branches else ()), *TAIL_COLUMNS]]
    for run in plan.runs:
        rd = run_dir(sweep_dir, run.run_id)
        cfg = configs[run.run_id]
        keys = [*canonical_values(cfg).values(), *(cfg.get(k) for k in extra_keys)]
        state = states[run.run_id]
        if branches:
            keys += _branch_cells(sweep_dir, rd, cfg, state.summary)
        status = RESULT_STATUS.get(state.status, Status.PENDING)
        for fraction, step, val_loss in eval_points(
            cfg[EVAL_AT_KEY], cfg[STEPS_KEY], recorded_evals(rd, state.summary)
        ):
            table.append([run.run_id, *map(_cell, keys), status, _cell(step), _cell(fraction), _cell(val_loss)])
    return table


def _branch_cells(sweep_dir: Path, rd: Path, cfg: Mapping[str, Any], summary: Optional[RunSummary]) -> list[Any]:
    """The :data:`BRANCH_COLUMNS` of a run: its source's step, run directory name and path
    relative to ``sweep_dir`` (the folder of results.csv: the same bytes after the sweeps move
    together), empty for a run that continues nothing. ``summary``: the run's, as its state was read."""
    continues = cfg.get(INIT_MODE_KEY) == CONTINUE
    source = branch_source(rd, cfg.get(INIT_FROM_KEY), summary=summary) if continues else None
    if source is None:
        return [None, None, None]
    where = source["run_dir"]
    return [source["step"], Path(where).name if where else None,
            os.path.relpath(where, sweep_dir.resolve()) if where else None]  # fmt: skip


RESULTS_STALE = "results.stale"  # touched by a writer that found results.lock held: rewrite the file
SNAPSHOT_ROUNDS = 3  # writes one waiting-free writer makes at most for others that found the lock held


def snapshot(
    sweep_dir: Path,
    plan: SweepPlan,
    ended_jobs: Collection[str] | Callable[[set[str]], Collection[str]] = (),
    *,
    wait: bool = True,
) -> Optional[tuple[dict[str, RunState], Path, int]]:
    """Every run's state, and ``results.csv`` written from it, read while holding ``results.lock``.

    The array tasks of a sweep write the file at the same time; with the states read inside
    the lock each write is at least as new as the one before it (a state only moves on to
    final), so a slower task can never write a finished run back as running or pending.

    ``wait=False`` (an array task, whose run just ended): where another process holds the lock,
    touch ``results.stale`` and return None at once instead of queueing behind it. Building the
    file reads every run's files (seconds for 2000 runs), so array tasks that each waited their
    turn held their allocation in a queue that grew with the sweep. A writer removes the marker
    before it reads the states and, when it finds it again after writing (someone was turned
    away meanwhile, with a state it may have missed), writes once more, at most
    ``SNAPSHOT_ROUNDS`` times in all; ``status`` always writes a fresh file.

    ``ended_jobs`` as :func:`collect_states` takes it; a function is asked inside the lock, with
    the attempts the states are read from (``status`` asks squeue there: it reads each run's
    ``attempts.json`` once, not once for squeue and again for the states).
    """
    result = None
    for _ in range(SNAPSHOT_ROUNDS):
        with open(sweep_dir / RESULTS_LOCK, "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX if wait and result is None else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if result is None:
                    (sweep_dir / RESULTS_STALE).touch()
                return result  # the holder removed the marker before reading: it sees what we saw
            (sweep_dir / RESULTS_STALE).unlink(missing_ok=True)
            states = collect_states(sweep_dir, plan, ended_jobs)
            path, rows = write_results(sweep_dir, plan, states)
            result = states, path, rows
        if not (sweep_dir / RESULTS_STALE).exists():
            break
    return result


def write_results(sweep_dir: Path, plan: SweepPlan, states: Mapping[str, RunState]) -> tuple[Path, int]:
    buf = io.StringIO()
    table = results_table(sweep_dir, plan, states)
    csv.writer(buf, lineterminator="\n").writerows(table)
    path = sweep_dir / RESULTS_FILE
    atomic_write_text(path, buf.getvalue())
    return path, len(table) - 1


def print_report(
    sweep_dir: Path, plan: SweepPlan, states: Mapping[str, RunState], out: TextIO, queue: Optional[QueueView] = None
) -> None:
    counts = count_states(states)
    print(f"sweep {plan.name}: {len(plan.runs)} runs in {sweep_dir}", file=out)
    for status, n in counts.items():
        print(f"  {status:<10} {n}", file=out)
    failed = [(rid, s) for rid, s in states.items() if s.status == Status.FAILED]
    if failed:
        print("failed runs (their trainer output: runs/<ID>/launch/output.log):", file=out)
        for rid, state in failed[:FAILED_LISTED]:
            print(f"  {rid}: {state.detail}", file=out)
        rest = Counter(state.detail for _, state in failed[FAILED_LISTED:])
        if rest:  # a sweep of thousands of runs: the others counted by what their last attempt did
            print(f"  ... {sum(rest.values())} more (column status of results.csv names them all):", file=out)
            common = rest.most_common(FAILED_LISTED // 2)
            for detail, n in common:
                print(f"  {n:>5} x {detail}", file=out)
            if len(rest) > len(common):
                others = sum(rest.values()) - sum(n for _, n in common)
                print(f"  {others:>5} x {len(rest) - len(common)} other details", file=out)
    if queue is not None:
        _print_queue(states, queue, out)
    orphans = orphan_run_dirs(sweep_dir, plan)
    if orphans:
        print(f"note: {len(orphans)} run dir(s) under runs/ are not in sweep.yaml (an earlier expansion): "
              f"{', '.join(orphans[:5])}{' ...' if len(orphans) > 5 else ''}", file=out)  # fmt: skip


def _print_queue(states: Mapping[str, RunState], queue: QueueView, out: TextIO) -> None:
    """Which array holds the runs still to do, where its task logs are, and what no array holds."""
    if queue.note:
        print(f"slurm: {queue.note}", file=out)
        return
    todo = [rid for rid, state in states.items() if state.needs_work]
    held: dict[str, int] = {}
    for rid in todo:
        if rid in queue.live:
            held[queue.live[rid]] = held.get(queue.live[rid], 0) + 1
    for job, n in sorted(held.items(), key=lambda item: int(item[0])):
        print(f"slurm: array job {job} (queued or running) holds {n} of these runs; its task logs: "
              f"{queue.folders[job]}/{job}_<task>.out", file=out)  # fmt: skip
    loose = [rid for rid in todo if rid not in queue.live and states[rid].status != Status.RUNNING]
    if loose and queue.folders:
        print(f"slurm: {len(loose)} run(s) that need work are in no queued array: run the command that "
              "submitted the sweep again (`launch sweep ... --executor slurm`, `launch demo ... --executor "
              "slurm`) to submit them", file=out)  # fmt: skip

"""The status of one run directory, from files alone (any process, any time).

``completed``/``diverged`` come from ``summary.json``; ``running`` from the trainer's
``flock`` (read non-invasively from ``/proc/locks``: probing it with ``flock`` could make a
starting trainer exit 4) or an attempt still open on a live process or another host;
``failed`` when the last attempt failed (``gave_up`` once the retry limit is used up);
``pending`` otherwise (never started, preempted, or interrupted: it resumes on rerun).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from launch import attempts
from launch.outcomes import counts_as_failure
from rundir.contract import FINAL_STATUSES, Status
from rundir.files import RunSummary, read_summary
from rundir.lock import lock_held, run_locked

__all__ = ["STATUSES", "RunFiles", "RunState", "lock_held", "read_run_files", "run_state", "state_of"]

STATUSES: tuple[Status, ...] = (Status.COMPLETED, Status.DIVERGED, Status.FAILED, Status.RUNNING, Status.PENDING)


@dataclass(frozen=True)
class RunState:
    status: Status
    detail: str = ""
    failures: int = 0
    gave_up: bool = False
    # the summary.json it was decided from (None: none yet, or unreadable): results.csv takes a
    # finished run's evals and a branch's source from it rather than reading the file again
    summary: Optional[RunSummary] = field(default=None, compare=False, repr=False)

    @property
    def needs_work(self) -> bool:
        """The executor should (try to) run it."""
        return self.status not in FINAL_STATUSES and not self.gave_up


@dataclass(frozen=True)
class RunFiles:
    """What a run's state is decided from, each file read once: ``summary.json`` and, where that
    is not final, ``launch/attempts.json`` (a final run's state needs no attempts: empty log)."""

    summary: Optional[RunSummary]
    log: attempts.AttemptLog

    def open_jobs(self) -> set[str]:
        """The SLURM jobs of attempts left open that may still run (what ``squeue`` is asked about)."""
        return {a.job for a in self.log.live_open() if a.job}


def read_run_files(run_dir: Path) -> RunFiles:
    summary = read_summary(run_dir)
    final = summary is not None and summary.final
    return RunFiles(summary, attempts.AttemptLog() if final else attempts.read(run_dir))


def run_state(run_dir: Path, max_retries: int, ended_jobs: Collection[str] = ()) -> RunState:
    """``ended_jobs``: SLURM jobs known to run no more (``squeue``); an attempt left open in one
    of them (its node died, or it was killed at once) does not make the run ``running``."""
    return state_of(run_dir, read_run_files(run_dir), max_retries, ended_jobs)


def state_of(run_dir: Path, files: RunFiles, max_retries: int, ended_jobs: Collection[str] = ()) -> RunState:
    """:func:`run_state` from the files already read (the run lock is checked now)."""
    summary, log = files.summary, files.log
    if summary is not None and summary.final:
        return RunState(summary.status, summary.reason or "", summary=summary)
    if run_locked(run_dir) or log.live_open(ended_jobs):
        return RunState(Status.RUNNING, "", summary=summary)
    failures = log.failures
    gave_up = failures > max_retries
    tried = [a for a in log.attempts if a.outcome not in (None, Status.BUSY)]
    if tried:
        last = tried[-1]
        failed = counts_as_failure(last.outcome or "")
        detail = f"last attempt: {last.outcome} (exit {last.exit_code})" + (
            f": {_first_line(last.reason)}" if last.reason else ""
        )
    else:
        failed = summary is not None and summary.status == Status.FAILED
        detail = (summary.reason if summary else None) or ""
    if failed or gave_up:
        limit = f"{failures} failed attempt(s), limit {max_retries + 1}"
        detail = f"{detail}; {limit}{': gave up' if gave_up else ''}"
        return RunState(Status.FAILED, detail, failures, gave_up, summary=summary)
    return RunState(Status.PENDING, detail, failures, summary=summary)


def _first_line(reason: str, limit: int = 300) -> str:
    """A reason for one line of ``status``: its first line (a refusal lists keys below it), cut."""
    lines = reason.strip().splitlines() or [""]
    line = lines[0] + (f" (+{len(lines) - 1} line(s))" if len(lines) > 1 else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."

"""The status of one run directory, from files alone (any process, any time).

``completed``/``diverged`` come from ``summary.json``; ``running`` from the trainer's
``flock`` (read non-invasively from ``/proc/locks``: probing it with ``flock`` could make a
starting trainer exit 4) or an attempt still open on a live process or another host;
``failed`` when the last attempt failed (``gave_up`` once the retry limit is used up);
``pending`` otherwise (never started, preempted, or interrupted: it resumes on rerun).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from launch import attempts
from launch.outcomes import counts_as_failure
from rundir.contract import FINAL_STATUSES, Status
from rundir.files import read_summary
from rundir.lock import lock_held, run_locked

__all__ = ["STATUSES", "RunState", "lock_held", "run_state"]

STATUSES: tuple[Status, ...] = (Status.COMPLETED, Status.DIVERGED, Status.FAILED, Status.RUNNING, Status.PENDING)


@dataclass(frozen=True)
class RunState:
    status: Status
    detail: str = ""
    failures: int = 0
    gave_up: bool = False

    @property
    def needs_work(self) -> bool:
        """The executor should (try to) run it."""
        return self.status not in FINAL_STATUSES and not self.gave_up


def run_state(run_dir: Path, max_retries: int, ended_jobs: Collection[str] = ()) -> RunState:
    """``ended_jobs``: SLURM jobs known to run no more (``squeue``); an attempt left open in one
    of them (its node died, or it was killed at once) does not make the run ``running``."""
    summary = read_summary(run_dir)
    if summary is not None and summary.final:
        return RunState(summary.status, summary.reason or "")
    log = attempts.read(run_dir)
    if run_locked(run_dir) or log.live_open(ended_jobs):
        return RunState(Status.RUNNING, "")
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
        return RunState(Status.FAILED, f"{detail}; {limit}{': gave up' if gave_up else ''}", failures, gave_up)
    return RunState(Status.PENDING, detail, failures)


def _first_line(reason: str, limit: int = 300) -> str:
    """A reason for one line of ``status``: its first line (a refusal lists keys below it), cut."""
    lines = reason.strip().splitlines() or [""]
    line = lines[0] + (f" (+{len(lines) - 1} line(s))" if len(lines) > 1 else "")
    return line if len(line) <= limit else line[: limit - 3] + "..."

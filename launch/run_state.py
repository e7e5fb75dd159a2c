"""The status of one run directory, from files alone (any process, any time).

``completed``/``diverged`` come from ``summary.json``; ``running`` from the trainer's
``flock`` (read non-invasively from ``/proc/locks``: probing it with ``flock`` could make a
starting trainer exit 4) or an attempt still open on a live process or another host;
``failed`` when the last attempt failed (``gave_up`` once the retry limit is used up);
``pending`` otherwise (never started, preempted, or interrupted: it resumes on rerun).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from launch import attempts
from launch.contract import FINAL_STATUSES, LOCK_FILE
from launch.outcomes import counts_as_failure
from rundir.files import read_summary

STATUSES: tuple[str, ...] = ("completed", "diverged", "failed", "running", "pending")
PROC_LOCKS = Path("/proc/locks")


@dataclass(frozen=True)
class RunState:
    status: str
    detail: str = ""
    failures: int = 0
    gave_up: bool = False

    @property
    def needs_work(self) -> bool:
        """The executor should (try to) run it."""
        return self.status not in FINAL_STATUSES and not self.gave_up


def lock_held(lock_path: Path) -> bool:
    """Whether a process on this host holds a ``flock`` on ``lock_path`` (Linux ``/proc/locks``)."""
    try:
        st = os.stat(lock_path)
        table = PROC_LOCKS.read_text()
    except OSError:
        return False
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == key:  # "-> " waiter lines differ
            return True
    return False


def run_state(run_dir: Path, max_retries: int) -> RunState:
    summary = read_summary(run_dir)
    if summary is not None and summary.final:
        return RunState(summary.status, summary.reason or "")
    log = attempts.read(run_dir)
    if lock_held(run_dir / LOCK_FILE) or log.live_open():
        return RunState("running", "")
    failures = log.failures
    gave_up = failures > max_retries
    tried = [a for a in log.attempts if a.outcome not in (None, "busy")]
    if tried:
        last = tried[-1]
        failed = counts_as_failure(last.outcome or "")
        detail = f"last attempt: {last.outcome} (exit {last.exit_code})"
    else:
        reason = (summary.reason if summary else None) or ""
        failed = summary is not None and summary.status == "failed" and not reason.startswith("preempted")
        detail = reason
    if failed or gave_up:
        limit = f"{failures} failed attempt(s), limit {max_retries + 1}"
        return RunState("failed", f"{detail}; {limit}{': gave up' if gave_up else ''}", failures, gave_up)
    return RunState("pending", detail, failures)

"""What a trainer exit code means for a sweep: the retry policy as a table.

Exit codes are those of docs/contracts.md. ``counts_as_failure`` attempts use up the
run's ``max_retries``; ``retry`` says whether the executor starts the run again in the
same invocation (a preemption is requeued unless launch itself is shutting down);
``had_lock`` says the code proves the trainer held the run lock.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from rundir import attempts as attempt_log
from rundir.contract import (
    EXIT_COMPLETED,
    EXIT_CONFIG,
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_PREEMPTED,
)


@dataclass(frozen=True)
class Outcome:
    name: str
    final: bool  # the run is done for good (summary.json says completed/diverged)
    counts_as_failure: bool
    retry: bool
    had_lock: bool
    meaning: str


OUTCOMES: dict[int, Outcome] = {
    EXIT_COMPLETED: Outcome("completed", True, False, False, True, "completed"),
    EXIT_FAILED: Outcome("failed", False, True, True, False, "crashed (exception)"),
    EXIT_CONFIG: Outcome("invalid", False, True, False, False, "invalid config or command line: retrying cannot help"),
    EXIT_DIVERGED: Outcome("diverged", True, False, False, True, "diverged"),
    EXIT_LOCKED: Outcome("busy", False, False, False, False, "run directory locked: running elsewhere"),
    EXIT_PREEMPTED: Outcome("preempted", False, False, True, True, "preempted: checkpoint saved, resumes on rerun"),
}
KILLED = Outcome("failed", False, True, True, False, "killed or crashed without a contract exit code")
# An attempt ended by launch's own shutdown before the trainer could handle the signal (e.g.
# while importing), or left open by a launcher that died: not the run's fault.
INTERRUPTED = Outcome(attempt_log.INTERRUPTED, False, False, True, False, "stopped by launch, or launch died during it")

# Return codes of a trainer killed by the signals launch forwards when it is stopped.
STOP_RETURN_CODES = frozenset(-int(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))

# A preempted run is requeued at most this often within one invocation (guards against a
# trainer that exits 75 at once, forever).
MAX_PREEMPT_REQUEUES = 3


def outcome_of(exit_code: int, *, stopping: bool = False) -> Outcome:
    """The outcome of an attempt; ``stopping``: launch had forwarded a stop signal to it."""
    if stopping and exit_code in STOP_RETURN_CODES:
        return INTERRUPTED
    return OUTCOMES.get(exit_code, KILLED)


def counts_as_failure(outcome_name: str) -> bool:
    return any(o.name == outcome_name and o.counts_as_failure for o in (*OUTCOMES.values(), KILLED))

"""What a trainer exit code means for a sweep: the retry policy as a table.

The exit code reads as a :class:`~rundir.contract.Status` through the run contract
(``STATUS_OF_EXIT``); this table is launch's policy per status: ``counts_as_failure`` attempts
use up the run's ``max_retries``; ``retry`` says whether the executor starts the run again in
the same invocation (a preemption is requeued unless launch itself is shutting down);
``had_lock`` says the code proves the trainer held the run lock.
"""

from __future__ import annotations

import errno
import signal
from dataclasses import dataclass
from typing import Optional

from rundir.contract import FINAL_STATUSES, STATUS_OF_EXIT, Status


@dataclass(frozen=True)
class Outcome:
    status: Status  # what the attempt's exit code says (recorded in attempts.json)
    counts_as_failure: bool
    retry: bool
    had_lock: bool
    meaning: str

    @property
    def name(self) -> str:
        return self.status.value

    @property
    def final(self) -> bool:
        """The run is done for good (summary.json says completed/diverged)."""
        return self.status in FINAL_STATUSES


POLICY: dict[Status, Outcome] = {
    o.status: o
    for o in (
        Outcome(Status.COMPLETED, False, False, True, "completed"),
        Outcome(Status.FAILED, True, True, False, "crashed (exception)"),
        Outcome(Status.INVALID, True, False, False, "invalid config or command line: retrying cannot help"),
        Outcome(Status.DIVERGED, False, False, True, "diverged"),
        Outcome(Status.BUSY, False, False, False, "run directory locked: running elsewhere"),
        Outcome(Status.PREEMPTED, False, True, True, "preempted: checkpoint saved, resumes on rerun"),
        # ended by launch's own shutdown before the trainer could handle the signal (e.g. while
        # importing), or left open by a launcher that died: not the run's fault
        Outcome(Status.INTERRUPTED, False, True, False, "stopped by launch, or launch died during it"),
        # failed for lack of GPU memory while other runs shared its GPU (the executor's packing,
        # executor.runs_per_gpu): not the run's fault; it starts again when its GPU has room
        Outcome(Status.NO_MEMORY, False, True, True, "out of GPU memory beside packed runs: starts again later"),
    )
}
KILLED = Outcome(Status.FAILED, True, True, False, "killed or crashed without a contract exit code")
INTERRUPTED = POLICY[Status.INTERRUPTED]
NO_MEMORY = POLICY[Status.NO_MEMORY]

# What a failed run's summary.json reason says when the GPU had no memory left for it.
OUT_OF_MEMORY_MARKERS = ("OutOfMemoryError", "out of memory", "CUBLAS_STATUS_ALLOC_FAILED")

# What an OSError says when the file system (or the user's quota) is full: errno ENOSPC, EDQUOT.
DISK_FULL_MARKERS = ("No space left on device", "Disk quota exceeded")
DISK_FULL_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT))

# Return codes of a trainer killed by the signals launch forwards when it is stopped.
STOP_RETURN_CODES = frozenset(-int(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP))

# A preempted run is requeued at most this often within one invocation (guards against a
# trainer that exits 75 at once, forever).
MAX_PREEMPT_REQUEUES = 3


def outcome_of(exit_code: int, *, stopping: bool = False) -> Outcome:
    """The outcome of an attempt; ``stopping``: launch had forwarded a stop signal to it."""
    if stopping and exit_code in STOP_RETURN_CODES:
        return INTERRUPTED
    status = STATUS_OF_EXIT.get(exit_code)
    return POLICY[status] if status is not None else KILLED


def counts_as_failure(outcome_name: str) -> bool:
    """Whether an attempt recorded with this outcome uses up a retry."""
    try:
        return POLICY[Status(outcome_name)].counts_as_failure
    except ValueError:
        return False


def out_of_memory(reason: Optional[str]) -> bool:
    """A failed run's ``summary.json`` reason says it ran out of GPU memory."""
    return bool(reason) and any(marker in reason for marker in OUT_OF_MEMORY_MARKERS)  # type: ignore[operator]


def disk_full(text: Optional[str]) -> bool:
    """A failed run's reason (or the end of its output) says the disk or quota was full: the
    run is not at fault and every retry would fail the same way until space is freed."""
    return bool(text) and any(marker in text for marker in DISK_FULL_MARKERS)  # type: ignore[operator]

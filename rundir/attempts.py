"""An attempt log: one JSON file recording every try at a unit of work, for retry accounting.

Each entry says where and when a try ran (host, pid) and how it ended (exit code and an
outcome name chosen by the caller's policy). Read-modify-write happens under a short
``flock`` on a sibling ``.lock`` file, never on a lock the work itself holds, and every
write is atomic. Which outcomes count against a retry limit is the caller's policy
(``launch.outcomes`` for training runs, ``data_prep.slurm`` for data_prep array tasks).
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
import uuid
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from jobscripts.atomic import atomic_write_text
from jobscripts.squeue import slurm_job
from rundir.contract import Status

# An attempt left open by a process that is gone, or closed by its owner's own shutdown:
# not the work's fault, so no policy counts it as a failure.
INTERRUPTED = Status.INTERRUPTED.value


@dataclass
class Attempt:
    id: str
    host: str
    pid: int  # the process doing the work (or its launcher)
    started: str
    ended: Optional[str] = None
    exit_code: Optional[int] = None
    outcome: Optional[str] = None
    # the SLURM job it ran in (jobscripts.squeue.slurm_job: 12 or 12_3): from another host its pid
    # cannot be checked, but squeue can say whether that job still runs (a node that died)
    job: Optional[str] = None
    # why it ended, as the work wrote it (a trainer's summary.json or exit.json reason)
    reason: Optional[str] = None

    @property
    def open(self) -> bool:
        return self.ended is None


@dataclass
class AttemptLog:
    attempts: list[Attempt] = field(default_factory=list)

    def count(self, is_failure: Callable[[str], bool]) -> int:
        """Closed attempts whose outcome ``is_failure`` says counts against the retry limit."""
        return sum(1 for a in self.attempts if a.outcome is not None and is_failure(a.outcome))

    def last_closed(self) -> Optional[Attempt]:
        closed = [a for a in self.attempts if not a.open]
        return closed[-1] if closed else None

    def live_open(self, ended_jobs: Collection[str] = ()) -> list[Attempt]:
        """Open attempts that may still be running (another host, or a live pid here); an attempt
        in one of ``ended_jobs`` (SLURM jobs that no longer run) is not."""
        return [a for a in self.attempts if a.open and not _known_dead(a) and a.job not in ended_jobs]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _known_dead(attempt: Attempt) -> bool:
    return attempt.host == socket.gethostname() and not _pid_alive(attempt.pid)


def read(path: Path) -> AttemptLog:
    """The log in ``path`` (empty when the file does not exist yet)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return AttemptLog()
    return AttemptLog([Attempt(**a) for a in data.get("attempts", [])])


def _write(path: Path, log: AttemptLog) -> None:
    atomic_write_text(path, json.dumps({"attempts": [asdict(a) for a in log.attempts]}, indent=1) + "\n")


@contextmanager
def _locked(path: Path) -> Iterator[AttemptLog]:
    path = Path(path)
    lock_path = path.with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        log = read(path)
        yield log
        _write(path, log)


def _close(attempt: Attempt, outcome: str, exit_code: Optional[int] = None, reason: Optional[str] = None) -> None:
    attempt.ended, attempt.outcome, attempt.exit_code, attempt.reason = _now(), outcome, exit_code, reason


def begin(path: Path, pid: int) -> str:
    """Record a started attempt; close open ones whose process is gone (its launcher was killed)."""
    attempt = Attempt(uuid.uuid4().hex[:12], socket.gethostname(), pid, _now(), job=slurm_job())
    with _locked(path) as log:
        for old in log.attempts:
            if old.open and _known_dead(old):
                _close(old, INTERRUPTED)
        log.attempts.append(attempt)
    return attempt.id


def finish(
    path: Path, attempt_id: str, exit_code: int, outcome: str, *, close_earlier: bool, reason: Optional[str] = None
) -> AttemptLog:
    """Complete attempt ``attempt_id``. ``close_earlier``: this attempt proves that attempts begun
    before it cannot be running (it held the work's lock), so those still open get closed."""
    with _locked(path) as log:
        mine = next(i for i, a in enumerate(log.attempts) if a.id == attempt_id)
        _close(log.attempts[mine], outcome, exit_code, reason)
        if close_earlier:
            for earlier in log.attempts[:mine]:
                if earlier.open:
                    _close(earlier, INTERRUPTED)
    return log

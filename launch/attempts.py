"""Each run's record of attempts: ``RUN_DIR/launch/attempts.json``.

The executor writes one entry when it starts the trainer and completes it when the trainer
exits; the retry limit counts entries whose outcome counts as a failure. Read-modify-write
happens under a short ``flock`` on ``attempts.lock`` (never the trainer's own ``.lock``,
which would make a starting trainer exit 4), and every write is atomic.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

from launch.outcomes import INTERRUPTED, counts_as_failure
from runconfig import atomic_write_text

ATTEMPTS_FILE = Path("launch") / "attempts.json"
ATTEMPTS_LOCK = Path("launch") / "attempts.lock"


@dataclass
class Attempt:
    id: str
    host: str
    pid: int  # the trainer (or its launcher) process
    started: str
    ended: Optional[str] = None
    exit_code: Optional[int] = None
    outcome: Optional[str] = None  # launch.outcomes names, or "interrupted"

    @property
    def open(self) -> bool:
        return self.ended is None


@dataclass
class AttemptLog:
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return sum(1 for a in self.attempts if a.outcome is not None and counts_as_failure(a.outcome))

    def last_closed(self) -> Optional[Attempt]:
        closed = [a for a in self.attempts if not a.open]
        return closed[-1] if closed else None

    def live_open(self) -> list[Attempt]:
        """Open attempts that may still be running (another host, or a live pid here)."""
        return [a for a in self.attempts if a.open and not _known_dead(a)]


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


def read(run_dir: Path) -> AttemptLog:
    path = run_dir / ATTEMPTS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return AttemptLog()
    return AttemptLog([Attempt(**a) for a in data.get("attempts", [])])


def _write(run_dir: Path, log: AttemptLog) -> None:
    text = json.dumps({"attempts": [asdict(a) for a in log.attempts]}, indent=1) + "\n"
    atomic_write_text(run_dir / ATTEMPTS_FILE, text)


@contextmanager
def _locked(run_dir: Path) -> Iterator[AttemptLog]:
    lock_path = run_dir / ATTEMPTS_LOCK
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        log = read(run_dir)
        yield log
        _write(run_dir, log)


def _close(attempt: Attempt, outcome: str, exit_code: Optional[int] = None) -> None:
    attempt.ended, attempt.outcome, attempt.exit_code = _now(), outcome, exit_code


def begin(run_dir: Path, pid: int) -> str:
    """Record a started attempt; close open ones whose process is gone (launcher was killed)."""
    attempt = Attempt(uuid.uuid4().hex[:12], socket.gethostname(), pid, _now())
    with _locked(run_dir) as log:
        for old in log.attempts:
            if old.open and _known_dead(old):
                _close(old, INTERRUPTED.name)
        log.attempts.append(attempt)
    return attempt.id


def finish(run_dir: Path, attempt_id: str, exit_code: int, outcome: str, *, held_lock: bool) -> AttemptLog:
    """Complete attempt ``attempt_id``. ``held_lock``: the trainer got the run lock, so attempts
    begun earlier that are still open are stale (their launcher died) and get closed."""
    with _locked(run_dir) as log:
        mine = next(i for i, a in enumerate(log.attempts) if a.id == attempt_id)
        _close(log.attempts[mine], outcome, exit_code)
        if held_lock:  # attempts begun before ours cannot be running: our trainer held the lock
            for earlier in log.attempts[:mine]:
                if earlier.open:
                    _close(earlier, INTERRUPTED.name)
    return log

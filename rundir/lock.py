"""The run lock of docs/contracts.md: an exclusive ``flock`` on ``RUN_DIR/.lock`` held for a
whole run (one writer per run directory), and how another process sees it without touching it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from rundir.contract import LOCK_FILE

PROC_LOCKS = Path("/proc/locks")


class RunLock:
    """Held by the trainer (rank 0) from before set-up until after ``summary.json`` is written."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / LOCK_FILE
        self.fh = open(self.path, "a+")  # noqa: SIM115 - held until release()

    def acquire(self) -> bool:
        """Take the lock without waiting; False when another live process holds it."""
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"{os.getpid()}\n")
        self.fh.flush()
        return True

    def release(self) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


def lock_held(lock_path: Path) -> bool:
    """Whether a process on this host holds a ``flock`` on ``lock_path``, read from Linux's
    ``/proc/locks`` (probing with ``flock`` itself could make a starting trainer exit 4)."""
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


def run_locked(run_dir: Path) -> bool:
    """Whether a live trainer on this host holds ``run_dir``'s lock."""
    return lock_held(Path(run_dir) / LOCK_FILE)

"""Each run's record of attempts: ``RUN_DIR/launch/attempts.json`` (a :mod:`rundir.attempts` log).

The executor writes one entry when it starts the trainer and completes it when the trainer
exits; the retry limit counts entries whose outcome counts as a failure (``launch.outcomes``).
The log's lock is ``attempts.lock``, never the trainer's own ``.lock``, which would make a
starting trainer exit 4. Each attempt also gets a file of its own for the trainer's exit record
(:func:`exit_file`, ``rundir.contract.ATTEMPT_EXIT_ENV``): a rank locked out of the run
directory says its 4 there, where torchrun's 1 would lose it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Optional

from jobscripts.shell import Raw, Word
from launch.outcomes import counts_as_failure
from rundir import attempts as attempt_log

ATTEMPTS_FILE = Path("launch") / "attempts.json"


class AttemptLog(attempt_log.AttemptLog):
    @property
    def failures(self) -> int:
        return self.count(counts_as_failure)


def exit_file(run_dir: Path) -> Path:
    """A new file name, next to ``attempts.json``, for one attempt's own exit record: the
    launcher passes it to the trainer in ``$DEPTHMUP_ATTEMPT_EXIT``, reads it first
    (``rundir.files.attempt_exit``) and removes it; no other attempt writes or reads it."""
    return run_dir / ATTEMPTS_FILE.parent / f"exit-{uuid.uuid4().hex[:12]}.json"


def batch_exit_file(run_dir: Path) -> Word:
    """:func:`exit_file` for one run of a SLURM batch job, as a word of its script: named by the
    job's id and requeue count (a requeued job runs the same script again)."""
    folder = run_dir / ATTEMPTS_FILE.parent
    return Word((f"{folder}/exit-", Raw("${SLURM_JOB_ID:-$$}-${SLURM_RESTART_COUNT:-0}"), ".json"))


def read(run_dir: Path) -> AttemptLog:
    return AttemptLog(attempt_log.read(run_dir / ATTEMPTS_FILE).attempts)


def begin(run_dir: Path, pid: int) -> str:
    """Record a started attempt; close open ones whose process is gone (launcher was killed)."""
    return attempt_log.begin(run_dir / ATTEMPTS_FILE, pid)


def finish(
    run_dir: Path, attempt_id: str, exit_code: int, outcome: str, *, held_lock: bool, reason: Optional[str] = None
) -> AttemptLog:
    """Complete attempt ``attempt_id``. ``held_lock``: the trainer got the run lock, so attempts
    begun earlier that are still open are stale (their launcher died) and get closed.
    ``reason``: why it ended, as the trainer wrote it (``launch status`` shows it)."""
    path = run_dir / ATTEMPTS_FILE
    log = attempt_log.finish(path, attempt_id, exit_code, outcome, close_earlier=held_lock, reason=reason)
    return AttemptLog(log.attempts)

"""SLURM's client commands (``squeue``, ``scontrol``, ``sbatch``) against a busy controller.

A loaded or restarting slurmctld makes the commands fail for a while with errors that say
nothing about the request (``Socket timed out on send/recv operation``, ``Resource temporarily
unavailable``, ``Unable to contact slurm controller``): :func:`run` tries such a command again
after each of :data:`RETRY_DELAYS_S` before it gives the failure to its caller. ``sbatch`` is
not retried here (a timed-out submission may have been queued): ``jobscripts.sbatch`` checks
the queue before it submits again.

Submission limits (a QOS's or association's ``MaxSubmitJobs``: each array task counts as a
job) are not transient: :func:`submit_limit` names the one an error is about.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Optional

# What SLURM's clients print when the controller did not answer, whatever was asked.
TRANSIENT_ERRORS = (
    "Socket timed out on send/recv",
    "Resource temporarily unavailable",
    "Unable to contact slurm controller",
    "Slurm temporarily unable to accept job",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "Connection refused",
)
# Seconds to wait before each retry (SLURM's own MessageTimeout is 10 s): about a minute in all.
RETRY_DELAYS_S: tuple[float, ...] = (5.0, 15.0, 40.0)
# sbatch's reasons for refusing a job because the user (account, QOS) has too many queued:
# QOSMaxSubmitJobPerUserLimit, QOSMaxSubmitJobPerAccountLimit, AssocMaxSubmitJobLimit, ...
SUBMIT_LIMIT = re.compile(r"\b(\w*MaxSubmitJob\w*)")


def transient(message: str) -> bool:
    """Whether a client's error says the controller did not answer (a retry may work)."""
    return any(text in message for text in TRANSIENT_ERRORS)


def submit_limit(message: str) -> Optional[str]:
    """The submit limit (``QOSMaxSubmitJobPerUserLimit``, ...) an sbatch error names, if any."""
    match = SUBMIT_LIMIT.search(message)
    return match.group(1) if match else None


def error_text(proc: subprocess.CompletedProcess) -> str:
    return (proc.stderr or "").strip() or (proc.stdout or "").strip()


def retry_note(why: str, attempt: int) -> None:
    """Say on stderr that a command failed with ``why`` and is tried again after the
    ``attempt``-th delay of :data:`RETRY_DELAYS_S` (0-based), then wait it."""
    delay = RETRY_DELAYS_S[attempt]
    print(f"[slurm] {why}: trying again in {delay:g} s ({attempt + 1} of {len(RETRY_DELAYS_S)})", file=sys.stderr)
    time.sleep(delay)


def run(argv: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    """``argv`` (a read-only query: squeue, scontrol show) run until it exits 0, fails for a
    reason a retry cannot change, or :data:`RETRY_DELAYS_S` is used up; the last try's result.

    Raises ``FileNotFoundError`` (no such command) and ``subprocess.TimeoutExpired`` (the last
    try took longer than ``timeout``)."""
    for attempt in range(len(RETRY_DELAYS_S) + 1):
        last = attempt == len(RETRY_DELAYS_S)
        try:
            proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            if last:
                raise
            retry_note(f"{argv[0]}: no answer in {timeout:g} s", attempt)
            continue
        if proc.returncode == 0 or last or not transient(error_text(proc)):
            return proc
        retry_note(error_text(proc).splitlines()[-1], attempt)
    raise AssertionError("unreachable")

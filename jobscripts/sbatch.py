"""Submit a script with ``sbatch`` and read back the job id."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from jobscripts import slurm_cli, squeue

JOB_ID = re.compile(r"^\s*(?:Submitted batch job\s+)?(\d+)(?:;\S+)?\s*$", re.MULTILINE)
SUBMIT_TIMEOUT_S = 600.0  # sbatch waits out a full controller itself ("unable to accept job, retrying")


class SubmitError(RuntimeError):
    """``sbatch`` failed or printed no job id. ``limit``: the submit limit that refused the job
    (``QOSMaxSubmitJobPerUserLimit``, ...); ``unknown``: whether the job may have been queued
    after all (the controller did not answer, and squeue could not tell)."""

    def __init__(self, message: str, *, limit: Optional[str] = None, unknown: bool = False) -> None:
        super().__init__(message)
        self.limit = limit
        self.unknown = unknown


def parse_job_id(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``123`` or ``123;cluster``) or plain ``sbatch`` output."""
    match = JOB_ID.search(stdout)
    if not match:
        raise SubmitError(f"sbatch printed no job id: {stdout.strip()!r}")
    return match.group(1)


def submit(script: Path, output: str, extra_args: Sequence[str] = ()) -> str:
    """Run ``sbatch --parsable --output=OUTPUT [extra] SCRIPT``; return the job id.

    ``--output`` goes on the command line (an argv entry) rather than into an ``#SBATCH`` line,
    so run directories with spaces or quotes need no escaping.

    When the controller does not answer (:func:`jobscripts.slurm_cli.transient`, or no answer in
    :data:`SUBMIT_TIMEOUT_S`) the job may have been queued all the same: squeue is asked for a job
    of this user running ``script``, whose id is returned if there is one; else sbatch is tried
    again after each of ``slurm_cli.RETRY_DELAYS_S``. So ``script`` must be this submission's own
    file. Raises :class:`SubmitError` (``limit`` set for a submit limit, ``unknown`` when squeue
    could not tell whether the job was queued).
    """
    argv = ["sbatch", "--parsable", f"--output={output}", *extra_args, str(script)]
    for attempt in range(len(slurm_cli.RETRY_DELAYS_S) + 1):
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=SUBMIT_TIMEOUT_S)
        except FileNotFoundError as exc:
            raise SubmitError("sbatch not found on PATH (is this a SLURM login node?)") from exc
        except subprocess.TimeoutExpired:
            why = f"sbatch did not answer in {SUBMIT_TIMEOUT_S:g} s"
        else:
            if proc.returncode == 0:
                return parse_job_id(proc.stdout)
            message = slurm_cli.error_text(proc)
            why = f"sbatch exited {proc.returncode}: {message}"
            if not slurm_cli.transient(message):
                raise SubmitError(why, limit=slurm_cli.submit_limit(message))
        try:  # the controller may have queued the job and lost its answer
            queued = squeue.jobs_of_scripts([script]).get(script)
        except squeue.QueueError as exc:
            raise SubmitError(
                f"{why}; whether {script} was queued is unknown ({exc}): look for it in `squeue --me` before "
                "submitting it again",
                unknown=True,
            ) from None
        if queued:
            return queued
        if attempt == len(slurm_cli.RETRY_DELAYS_S):
            raise SubmitError(f"{why} ({attempt + 1} tries; nothing was queued)")
        slurm_cli.retry_note(why.splitlines()[-1], attempt)
    raise AssertionError("unreachable")

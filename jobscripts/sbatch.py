"""Submit a script with ``sbatch`` and read back the job id."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

JOB_ID = re.compile(r"^\s*(?:Submitted batch job\s+)?(\d+)(?:;\S+)?\s*$", re.MULTILINE)


class SubmitError(RuntimeError):
    """``sbatch`` failed or printed no job id."""


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
    """
    argv = ["sbatch", "--parsable", f"--output={output}", *extra_args, str(script)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise SubmitError("sbatch not found on PATH (is this a SLURM login node?)") from exc
    if proc.returncode != 0:
        raise SubmitError(f"sbatch exited {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return parse_job_id(proc.stdout)

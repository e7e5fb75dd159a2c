"""Ask ``squeue`` about jobs, telling "not in the queue" apart from "squeue could not answer".

``squeue -j ID`` exits 1 both for a job that left the queue (``Invalid job id specified``)
and when slurmctld cannot be reached or times out (a restart, a fail-over, a loaded
controller). Callers decide from the answer whether to submit runs again, so reading a
failure as "nothing queued" would put a second array in the queue for runs a live one
holds; :func:`rows` raises :class:`QueueError` instead.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Collection
from typing import Optional

GONE = "Invalid job id specified"  # squeue's stderr for a single job id it no longer knows
# States in which a job's processes may still run (anything else, PENDING after a requeue
# included, has none): squeue's long names (%T).
ACTIVE_STATES = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)


def slurm_job() -> Optional[str]:
    """This job as squeue and scontrol name it alone: ``ARRAY_TASK`` (``12_3``) for an array task.

    Not ``$SLURM_JOB_ID``: the array task that starts last keeps the array's own id, and that id
    names every task of the array, so squeue would list them all (never just RUNNING) and
    ``scontrol requeue`` would requeue the whole array."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


class QueueError(RuntimeError):
    """``squeue`` is missing or failed; the message says how."""


def rows(job_ids: Collection[str], fields: str, timeout: float = 120) -> list[list[str]]:
    """``squeue -h -j IDS -o FIELDS`` split into words, one list per line: the jobs of ``job_ids``
    that the queue still lists (none for ids it forgot). Raises :class:`QueueError` when squeue
    is missing, times out, or fails for any other reason."""
    ids = sorted({str(i) for i in job_ids})
    if not ids:
        return []
    argv = ["squeue", "-h", "-j", ",".join(ids), "-o", fields]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise QueueError("squeue not found on PATH (is this a SLURM login node?)") from None
    except subprocess.TimeoutExpired:
        raise QueueError(f"squeue did not answer in {timeout:.0f} s") from None
    if proc.returncode != 0:
        message = proc.stderr.strip() or proc.stdout.strip()
        if GONE in message:
            return []
        raise QueueError(f"squeue exited {proc.returncode}: {message}")
    return [line.split() for line in proc.stdout.splitlines() if line.strip()]


def listed_array_jobs(job_ids: Collection[str]) -> set[str]:
    """The (array) job ids among ``job_ids`` that squeue still lists, queued or running."""
    return {row[0] for row in rows(job_ids, "%F") if row}


def active_jobs(job_ids: Collection[str]) -> set[str]:
    """The jobs among ``job_ids`` (as :func:`slurm_job` names them: ``12_3`` for an array task)
    whose processes may still run: listed in one of :data:`ACTIVE_STATES`."""
    return {row[0] for row in rows(job_ids, "%i %T") if len(row) == 2 and row[1] in ACTIVE_STATES}

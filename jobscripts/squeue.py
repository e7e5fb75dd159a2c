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
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Optional

from jobscripts import slurm_cli

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
    that the queue still lists (none for ids it forgot). A busy controller's errors are retried
    (:mod:`jobscripts.slurm_cli`); raises :class:`QueueError` when squeue is missing, times out,
    or fails for any other reason."""
    ids = sorted({str(i) for i in job_ids})
    if not ids:
        return []
    return [line.split() for line in _query(["-j", ",".join(ids), "-o", fields], timeout).splitlines() if line.strip()]


def _query(args: Sequence[str], timeout: float) -> str:
    """``squeue -h ARGS``'s output ("" for a single job id it forgot); :class:`QueueError` else."""
    try:
        proc = slurm_cli.run(["squeue", "-h", *args], timeout)
    except FileNotFoundError:
        raise QueueError("squeue not found on PATH (is this a SLURM login node?)") from None
    except subprocess.TimeoutExpired:
        raise QueueError(f"squeue did not answer in {timeout:.0f} s") from None
    if proc.returncode != 0:
        message = slurm_cli.error_text(proc)
        if GONE in message:
            return ""
        raise QueueError(f"squeue exited {proc.returncode}: {message}")
    return proc.stdout


def jobs_of_scripts(scripts: Collection[Path], timeout: float = 120) -> dict[Path, str]:
    """``script -> job id`` of this user's queued or running jobs whose batch script is one of
    ``scripts`` (squeue's ``%o``: sbatch makes the path absolute). How a submission whose
    ``sbatch`` timed out, or whose job id was never written down, is found again.
    Raises :class:`QueueError` when squeue cannot answer."""
    wanted = {}
    for script in scripts:
        wanted[os.path.abspath(script)] = script
        wanted.setdefault(str(Path(script).resolve()), script)
    found: dict[Path, str] = {}
    for line in _query(["-u", str(os.getuid()), "-o", "%F|%o"], timeout).splitlines():
        job_id, _, command = line.strip().partition("|")
        if command in wanted and job_id.isdigit():
            found.setdefault(wanted[command], job_id)
    return found


def listed_array_jobs(job_ids: Collection[str]) -> set[str]:
    """The (array) job ids among ``job_ids`` that squeue still lists, queued or running."""
    return {row[0] for row in rows(job_ids, "%F") if row}


def active_jobs(job_ids: Collection[str]) -> set[str]:
    """The jobs among ``job_ids`` (as :func:`slurm_job` names them: ``12_3`` for an array task)
    whose processes may still run: listed in one of :data:`ACTIVE_STATES`."""
    return {row[0] for row in rows(job_ids, "%i %T") if len(row) == 2 and row[1] in ACTIVE_STATES}

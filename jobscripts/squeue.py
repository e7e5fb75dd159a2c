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
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from jobscripts import slurm_cli

GONE = "Invalid job id specified"  # squeue's stderr for a single job id it no longer knows
# States in which a job's processes may still run (anything else, PENDING after a requeue
# included, has none): squeue's long names (%T).
ACTIVE_STATES = frozenset(
    {"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT"}
)

UNREAD_TASKS = 1 << 30  # an array task field squeue printed in a form not read here: "many"


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


@dataclass(frozen=True)
class ArrayJob:
    """What squeue lists of one array job: its tasks still queued or running, and its ``%``
    throttle where squeue shows one (on the record of two or more pending tasks: ``2-9%4``)."""

    tasks: int
    throttle: Optional[int]

    def at_once(self) -> int:
        """How many of its tasks may run at the same time from now on: no more than it has left,
        nor than its throttle. Never fewer than may run: with one task pending squeue shows no
        throttle (``12_5``, not ``5%2``), and that task counts as if it could start (the one
        submitted with may since have been changed by ``scontrol update ArrayTaskThrottle``)."""
        return min(self.tasks, self.throttle) if self.throttle else self.tasks


def array_jobs(job_ids: Collection[str], timeout: float = 120) -> dict[str, ArrayJob]:
    """``array job id -> ArrayJob`` of the (array) jobs among ``job_ids`` that squeue still lists
    (one squeue call: ``%F %K``, each running task on its own line, the pending ones on one line
    as ``3-9%4``). Raises :class:`QueueError` when squeue cannot answer."""
    tasks: dict[str, int] = {}
    throttles: dict[str, int] = {}
    for row in rows(job_ids, "%F %K", timeout):
        job = row[0]
        count, throttle = _task_range(row[1] if len(row) > 1 else "")
        tasks[job] = tasks.get(job, 0) + count
        if throttle:
            throttles[job] = throttle
    return {job: ArrayJob(n, throttles.get(job)) for job, n in tasks.items()}


def _task_range(text: str) -> tuple[int, Optional[int]]:
    """``(tasks, throttle)`` of squeue's array task field: ``7`` -> (1, None), ``2-4,9%2`` -> (4, 2),
    ``0-10:5`` -> (3, None); ``N/A`` (not an array) or no field: one task; a field it cannot read:
    :data:`UNREAD_TASKS` (as many as the throttle lets run: never fewer than may run)."""
    if text in ("", "N/A"):
        return 1, None
    ids, _, limit = text.partition("%")
    throttle = int(limit) if limit.isdigit() and int(limit) > 0 else None
    count = 0
    for part in ids.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        try:
            count += (int(last or first) - int(first)) // int(step or 1) + 1
        except (ValueError, ZeroDivisionError):
            return UNREAD_TASKS, throttle
    return max(count, 1), throttle


def listed_array_jobs(job_ids: Collection[str]) -> set[str]:
    """The (array) job ids among ``job_ids`` that squeue still lists, queued or running."""
    return {row[0] for row in rows(job_ids, "%F") if row}


def active_jobs(job_ids: Collection[str]) -> set[str]:
    """The jobs among ``job_ids`` (as :func:`slurm_job` names them: ``12_3`` for an array task)
    whose processes may still run: listed in one of :data:`ACTIVE_STATES`."""
    return {row[0] for row in rows(job_ids, "%i %T") if len(row) == 2 and row[1] in ACTIVE_STATES}

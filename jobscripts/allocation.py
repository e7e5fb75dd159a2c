"""The CPUs this process was given (a SLURM allocation, a taskset, or the machine), in one place.

The local executor splits them among its slots (``OMP_NUM_THREADS``), data_prep sizes its
worker pool with them, and the trainer sets torch's threads from the same variables, so a run
trains with the same thread count, and so the same float sums, whether a local sweep or a
SLURM array task started it.
"""

from __future__ import annotations

import os
from typing import Optional


def _positive(value: Optional[str]) -> Optional[int]:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if number > 0 else None


def allocated_cpus() -> int:
    """``SLURM_CPUS_PER_TASK`` in a SLURM job that asked for it, else the CPUs this process may run on.

    SLURM does not always bind a task to its CPUs (``TaskPlugin=task/none``): the affinity
    can then be the whole node while the allocation is one CPU.
    """
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count() or 1
    slurm = _positive(os.environ.get("SLURM_CPUS_PER_TASK"))
    return min(usable, slurm) if slurm else usable


def cpu_threads(configured: Optional[int]) -> Optional[int]:
    """torch's CPU threads: ``parallel.cpu_threads``, else ``OMP_NUM_THREADS`` (launch's executor
    sets it for each slot from :func:`allocated_cpus`), else ``SLURM_CPUS_PER_TASK``; None:
    torch's own default."""
    return (
        configured or _positive(os.environ.get("OMP_NUM_THREADS")) or _positive(os.environ.get("SLURM_CPUS_PER_TASK"))
    )

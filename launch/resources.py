"""What one machine offers the local executor: GPU slots, or CPU threads per run.

A slot is one group of ``gpus_per_run`` GPUs (or, on CPU, a share of the cores) and holds up to
``runs_per_gpu`` runs at a time (``executor.runs_per_gpu``): small models leave most of a GPU
idle, so several runs packed on one keep it busy. On CPU the slot's threads are split between
its runs, so packing is exercised (and tested) where no GPU is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from jobscripts.allocation import allocated_cpus
from launch.errors import LaunchError

CPU_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Slot:
    """Where one run executes: its GPUs (empty on CPU) and the environment that pins it there."""

    index: int
    gpus: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    capacity: int = 1  # runs at a time in this slot (executor.runs_per_gpu)


def cpu_count() -> int:
    """The CPUs of this process's allocation (``jobscripts.allocation``)."""
    return allocated_cpus()


def visible_gpus() -> list[str]:
    """GPU ids from ``$CUDA_VISIBLE_DEVICES`` (SLURM sets it), else ``nvidia-smi -L``, else none."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip() and not g.strip().startswith("-")]
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False).stdout
        return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]
    return []


def make_slots(
    max_parallel: int,
    gpus_per_run: int,
    gpus: Optional[list[str]] = None,
    cpus: Optional[int] = None,
    runs_per_gpu: int = 1,
) -> list[Slot]:
    """``max_parallel`` slots of ``runs_per_gpu`` runs each: disjoint ``gpus_per_run`` GPUs per slot
    where GPUs exist (fewer slots if they run out), else (or with ``gpus_per_run`` 0)
    ``OMP_NUM_THREADS = max(1, cpus // (max_parallel * runs_per_gpu))`` per run."""
    if runs_per_gpu < 1:
        raise LaunchError(f"executor.runs_per_gpu: must be >= 1, got {runs_per_gpu}")
    gpus = (visible_gpus() if gpus is None else gpus) if gpus_per_run > 0 else []
    if gpus:
        count = min(max_parallel, len(gpus) // gpus_per_run)
        if count == 0:
            raise LaunchError(f"executor.gpus_per_run={gpus_per_run} but only {len(gpus)} GPU(s) visible: {gpus}")
        slots = []
        for i in range(count):
            mine = tuple(gpus[i * gpus_per_run : (i + 1) * gpus_per_run])
            slots.append(Slot(i, mine, {"CUDA_VISIBLE_DEVICES": ",".join(mine)}, runs_per_gpu))
        return slots
    threads = str(max(1, (cpus or cpu_count()) // (max_parallel * runs_per_gpu)))
    return [Slot(i, (), dict.fromkeys(CPU_THREAD_VARS, threads), runs_per_gpu) for i in range(max_parallel)]

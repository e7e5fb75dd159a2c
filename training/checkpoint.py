"""Checkpoints: periodic and final, atomic, with everything a bit-exact resume needs.

Layout of ``RUN_DIR/checkpoints/step_XXXXXXXX/``:

* ``common.json``: step, consumed samples, accumulated wall time, parallel layout, the
  resolved parametrization table and config (compared on resume);
* ``scheduler.pt``: megatron ``OptimizerParamScheduler`` state;
* ``rng_rank{R}.pt``: python / numpy / torch (and CUDA + megatron tracker) RNG per rank;
* model and optimizer state: on CPU ``model_tp{T}_pp{P}.pt`` from data-parallel rank 0;
  on GPU a ``dist/`` folder written by megatron ``dist_checkpointing`` (resharding-capable).

Every rank writes into ``step_XXXXXXXX.tmp/``; after a barrier rank 0 renames it and then
rewrites ``checkpoints/latest``. A kill at any point leaves either the previous checkpoint
or the new one, never a half-written one named as complete.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist

from runconfig import atomic_write_text

LATEST = "latest"


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def latest_checkpoint(ckpt_root: Path) -> Optional[Path]:
    """The checkpoint named by ``latest`` (None when there is none)."""
    pointer = ckpt_root / LATEST
    if not pointer.is_file():
        return None
    path = ckpt_root / pointer.read_text().strip()
    if not (path / "common.json").is_file():
        raise ValueError(f"{pointer} names {path}, which is not a complete checkpoint")
    return path


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002 - the global RNG other libraries draw from
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        from megatron.core import tensor_parallel

        state["cuda"] = torch.cuda.get_rng_state()
        state["tracker"] = tensor_parallel.get_cuda_rng_tracker().get_states()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # noqa: NPY002 - the global RNG other libraries draw from
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        from megatron.core import tensor_parallel

        torch.cuda.set_rng_state(state["cuda"])
        tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def save(
    ckpt_root: Path,
    step: int,
    common: dict[str, Any],
    backend: Any,
    scheduler: Any,
    rank: int,
    keep: int,
) -> Path:
    """Write checkpoint ``step`` with all ranks; returns its final path."""
    final = ckpt_root / step_dir_name(step)
    tmp = ckpt_root / (step_dir_name(step) + ".tmp")
    if rank == 0:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    _barrier()
    backend.save_state(tmp)
    torch.save(rng_state(), tmp / f"rng_rank{rank}.pt")
    if rank == 0:
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        atomic_write_text(tmp / "common.json", json.dumps(common, indent=1, sort_keys=True))
    _barrier()
    if rank == 0:
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        atomic_write_text(ckpt_root / LATEST, final.name + "\n")
        _prune(ckpt_root, keep)
    _barrier()
    return final


def _prune(ckpt_root: Path, keep: int) -> None:
    done = sorted(p for p in ckpt_root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in done[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    for stale in ckpt_root.glob("step_*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)


def load(path: Path, backend: Any, scheduler: Any, rank: int) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and this rank's RNG; returns ``common.json``."""
    common = json.loads((path / "common.json").read_text())
    backend.load_state(path, common)
    scheduler.load_state_dict(torch.load(path / "scheduler.pt", weights_only=False))
    rng_file = path / f"rng_rank{rank}.pt"
    if rng_file.is_file():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return common

"""Process-group and model-parallel set-up shared by the training paths and the tools.

Under ``torchrun`` / SLURM / the DeepSpeed launcher the usual ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` variables are read. A plain single
process (the CPU demo, ``training.show``, tests) gets an in-memory store: no port needed.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from megatron.core import parallel_state

from runconfig.validate import check_world


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: str  # cpu | cuda

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def init_process_group(device: str) -> tuple[int, int, int, str]:
    """torch.distributed's default group (NCCL on GPU, gloo on CPU), once: (rank, world size,
    local rank, backend)."""
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    local_rank = env_int("LOCAL_RANK", 0)
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        if world == 1 and "MASTER_ADDR" not in os.environ:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
        else:
            dist.init_process_group(backend, rank=rank, world_size=world)
    return rank, world, local_rank, backend


def all_agree(device: str, mine: bool) -> bool:
    """Whether every rank passed True (the default group is set up here if it is not yet).

    For a decision one rank takes before set-up that every rank must act on at once: a rank
    that left without the others would leave them waiting in the group's rendezvous until
    their launcher kills them (torchrun: 30 s after its SIGTERM, which they cannot act on
    while they wait)."""
    _rank, _world, _local, backend = init_process_group(device)
    flag = torch.tensor([1 if mine else 0], dtype=torch.int32, device="cuda" if backend == "nccl" else "cpu")
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def init_distributed(device: str, tp: int = 1, pp: int = 1) -> DistInfo:
    """Initialize torch.distributed (NCCL on GPU, gloo on CPU) and megatron's parallel state."""
    rank, world, local_rank, backend = init_process_group(device)
    check_world(world, tp, pp)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
    return DistInfo(rank, world, local_rank, backend, device)


def seed_everything(seed: int, device: str, cudagraphable_rng: bool = False) -> None:
    """Seed Python, numpy and torch; on CUDA also megatron's model-parallel RNG tracker, which
    megatron's GPU layers draw their init from (they refuse to build without it), in its
    graph-safe form when ``cudagraphable_rng`` (megatron's local CUDA graphs require it)."""
    seed = seed + 100 * parallel_state.get_pipeline_model_parallel_rank()  # megatron-LM's rule
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - seeds the global RNG megatron and numpy users draw from
    torch.manual_seed(seed)
    if device == "cuda":
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(
            seed, use_cudagraphable_rng=cudagraphable_rng, force_reset_rng=cudagraphable_rng
        )


def shutdown() -> None:
    if parallel_state.model_parallel_is_initialized():
        parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def single_process(tp: int = 1, pp: int = 1) -> Iterator[DistInfo]:
    """A one-process gloo group with megatron parallel state, torn down on exit."""
    owned = not dist.is_initialized()
    info = init_distributed("cpu", tp, pp)
    try:
        yield info
    finally:
        if owned:
            shutdown()

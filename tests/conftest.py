"""Shared fixtures: a one-process megatron parallel state and config helpers."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from launch.processes import with_repo_on_path
from tests.slurm_cluster import slurm, slurm_cluster  # noqa: F401 - the fixtures of the slurm tests

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny_cpu.yaml"


def free_port() -> int:
    """A TCP port free now, for a torchrun rendezvous: the suite runs on several workers (xdist),
    so a fixed port could be taken by another worker's torchrun at the same moment."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    """Environment for a trainer subprocess: the caller's, one OpenMP thread, the repo first on
    PYTHONPATH (kept: a GPU machine may add carried packages there)."""
    return {**with_repo_on_path(REPO, os.environ), "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="session")
def megatron():
    """torch.distributed (gloo, world size 1) + megatron parallel state, for the whole session."""
    from training.distributed import single_process

    with single_process() as info:
        yield info


ROPE_VOCAB = 256
# A 2-layer RoPE GPT without linear biases: the shape the RoPE, plain-GPT and throughput-switch
# tests compare the toolkit's model on.
ROPE_SHAPE = (
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.num_attention_heads=4",
    "model.seq_length=32",
    f"model.vocab_size={ROPE_VOCAB}",
    "model.position_embedding_type=rope",
    "model.add_bias_linear=false",
)


def tiny_config(*overrides: str, path: Path = TINY):
    from runconfig import load_config
    from runconfig.schema import RunConfig

    return load_config(RunConfig, path, list(overrides))

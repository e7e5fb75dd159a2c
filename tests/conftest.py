"""Shared fixtures: a one-process megatron parallel state and config helpers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny_cpu.yaml"


@pytest.fixture(scope="session")
def megatron():
    """torch.distributed (gloo, world size 1) + megatron parallel state, for the whole session."""
    from training.distributed import single_process

    with single_process() as info:
        yield info


def tiny_config(*overrides: str, path: Path = TINY):
    from runconfig import load_config
    from runconfig.schema import RunConfig

    return load_config(RunConfig, path, list(overrides))

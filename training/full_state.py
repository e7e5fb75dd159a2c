"""One checkpoint of any parallel layout -> the full (TP=1, PP=1) megatron model state dict.

Export and other tools that read weights outside a training job want one tensor per
parameter. Two checkpoint formats exist (training/checkpoint.py):

* CPU: ``model_tp{T}_pp0.pt`` per tensor-parallel rank. The shards are joined along the
  dimension megatron itself records on each parameter (``partition_dim``, read from a
  TP=1 model built on the meta device, so the rule is megatron's, not a table of names
  kept here). The one layout megatron does not express that way, the gated MLP's
  ``linear_fc1`` (each rank holds ``[gate_r; up_r]``), is joined as megatron's own
  ``apply_swiglu_sharded_factory`` describes it: all gates, then all ups.
* GPU: the ``dist/`` folder of megatron ``dist_checkpointing``, loaded into a TP=1, PP=1
  model, so megatron does the resharding (model weights only; the optimizer is skipped).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

import torch

from runconfig.run_dir import COMMON_FILE, RunDirError, checkpoint_dir, latest_checkpoint
from runconfig.schema import RunConfig
from training.checkpoint import cpu_state_file

DIST_DIR = "dist"  # a GPU checkpoint's dist_checkpointing folder (training/backends.py)


def find_checkpoint(run_dir: Path, step: Optional[int] = None) -> Path:
    """The run's latest complete checkpoint, or the one of ``step``; names what is missing."""
    if step is None:
        found = latest_checkpoint(run_dir)
        if found is None:
            raise RunDirError(f"{run_dir}: no complete checkpoint under checkpoints/ (has the run saved one?)")
        return found
    path = checkpoint_dir(run_dir, step)
    if not (path / COMMON_FILE).is_file():
        kept = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*") if (p / COMMON_FILE).is_file())
        raise RunDirError(f"{path}: no complete checkpoint of step {step}; kept: {kept}")
    return path


def single_rank_config(cfg: RunConfig) -> RunConfig:
    """The run's config with TP = PP = 1 (the layout the full state dict has)."""
    parallel = dataclasses.replace(
        cfg.parallel, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, sequence_parallel=False
    )
    return dataclasses.replace(cfg, parallel=parallel)


def _join_gated(shards: list[torch.Tensor]) -> torch.Tensor:
    halves = [s.chunk(2, dim=0) for s in shards]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)


def _join(name: str, shards: list[torch.Tensor], param: Optional[torch.nn.Parameter], gated: bool) -> torch.Tensor:
    if param is None or not getattr(param, "tensor_model_parallel", False):
        first = shards[0]
        for rank, other in enumerate(shards[1:], start=1):
            if other.shape != first.shape or not torch.equal(other, first):
                raise RunDirError(f"{name}: replicated tensor differs between tensor-parallel ranks 0 and {rank}")
        return first
    if gated and name.rsplit(".", 1)[0].endswith("mlp.linear_fc1"):
        return _join_gated(shards)
    return torch.cat(shards, dim=param.partition_dim)


def _cpu_state(ckpt: Path, model: torch.nn.Module, tp: int, gated: bool) -> dict[str, torch.Tensor]:
    shards = []
    for rank in range(tp):
        path = ckpt / cpu_state_file(rank, 0)
        if not path.is_file():
            raise RunDirError(f"{path}: missing (the checkpoint says tensor-parallel size {tp})")
        shards.append(torch.load(path, map_location="cpu", weights_only=False)["model"])
    params = dict(model.named_parameters())
    full = {}
    for name, value in shards[0].items():
        if not isinstance(value, torch.Tensor):
            continue  # megatron's _extra_state entries (None on the local spec)
        full[name] = _join(name, [s[name] for s in shards], params.get(name), gated)
    return full


def _dist_state(ckpt: Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    from megatron.core import dist_checkpointing

    directory = ckpt / DIST_DIR
    metadata = dist_checkpointing.load_content_metadata(str(directory)) or {}
    state = dist_checkpointing.load({"model": model.sharded_state_dict(metadata=metadata)}, str(directory))
    model.load_state_dict(state["model"], strict=False)
    return {k: v for k, v in model.state_dict().items() if isinstance(v, torch.Tensor)}


def read_full_state(ckpt: Path, cfg: RunConfig, vocab_size: int) -> dict[str, torch.Tensor]:
    """Every model tensor of checkpoint ``ckpt`` at TP = PP = 1 (needs a megatron parallel state
    of one rank: ``training.distributed.single_process()``)."""
    from training.model import Placement, build_model

    common = json.loads((ckpt / COMMON_FILE).read_text())
    layout = common.get("layout") or {}
    tp, pp = int(layout.get("tp", 1)), int(layout.get("pp", 1))
    single = single_rank_config(cfg)
    if (ckpt / DIST_DIR).is_dir():
        model = build_model(single, vocab_size, Placement(initialize=True))
        return _dist_state(ckpt, model)
    if pp != 1:
        raise RunDirError(f"{ckpt / COMMON_FILE}: layout {layout}: CPU checkpoints have no pipeline stages")
    with torch.device("meta"):
        model = build_model(single, vocab_size, Placement(initialize=True))  # init sets partition_dim
    return _cpu_state(ckpt, model, tp, gated=cfg.model.activation == "swiglu")

"""The two execution paths behind one contract, :class:`Backend`.

``train_step(micro_batches) -> StepResult`` (loss = token mean over the global batch, the
grad norm, whether the update was applied), ``evaluate(micro_batches) -> float``,
``param_groups``, ``save_state(dir)`` / ``load_state(dir, common)``.

* :class:`GpuBackend`: NCCL, megatron ``DistributedDataParallel``, ``get_megatron_optimizer``
  with the parametrization's overrides (bf16, distributed optimizer), megatron's
  forward/backward schedules (TP / PP / DP) and ``finalize_model_grads``, checkpoints via
  ``dist_checkpointing``.
* :class:`CpuBackend`: gloo, torch ``DistributedDataParallel`` over megatron's data-parallel
  group when DP > 1, the same megatron param groups on a torch optimizer
  (:class:`training.optim.CpuOptimizer`), plain micro-batch accumulation. With pipeline
  parallelism, megatron's schedule and ``finalize_model_grads`` run the step instead
  (:class:`training.pipeline.CpuPipeline`). Sequence parallelism needs the GPU path.

Both reduce the loss the same way: the (sum of token losses, token count) pair is summed over
the whole world, so tensor-parallel duplicates and non-final pipeline stages (zeros) cancel in
the ratio. ``resolved=None`` trains with megatron's stock parameter groups (the unpatched
reference of benchmarks/patch_overhead.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch
import torch.distributed as dist
from megatron.core import parallel_state

from patches.rules import ResolvedParametrization
from runconfig.schema import RunConfig
from training.optim import CpuOptimizer
from training.pipeline import CpuPipeline, Schedule


@dataclass(frozen=True)
class StepResult:
    loss: float
    grad_norm: float
    applied: bool


MicroBatch = dict[str, torch.Tensor]  # tokens, labels, loss_mask, position_ids


@runtime_checkable
class Backend(Protocol):
    """What the step loop, checkpoints and diagnostics need of an execution path."""

    model: torch.nn.Module  # the module the optimizer steps (wrapped as the backend needs)
    optimizer: Any  # megatron's optimizer (GPU) or training.optim.CpuOptimizer (CPU)
    layout: dict[str, int]  # {"tp", "pp", "dp"} sizes, recorded in checkpoints

    @property
    def param_groups(self) -> list[dict]: ...

    def train_step(self, micro_batches: list[MicroBatch]) -> StepResult:
        """One optimizer step over the global batch (the micro-batches of this rank)."""
        ...

    def evaluate(self, micro_batches: list[MicroBatch]) -> float:
        """Token-mean held-out loss over the whole world."""
        ...

    def save_state(self, directory: Path) -> None: ...

    def load_state(self, directory: Path, common: dict[str, Any]) -> None: ...


def _world_mean(loss_sum: torch.Tensor, tokens: torch.Tensor) -> float:
    stats = torch.stack([loss_sum.detach().double(), tokens.detach().double()])
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(stats)
    return float(stats[0] / stats[1]) if stats[1] > 0 else float("nan")


def _layout() -> dict[str, int]:
    return {
        "tp": parallel_state.get_tensor_model_parallel_world_size(),
        "pp": parallel_state.get_pipeline_model_parallel_world_size(),
        "dp": parallel_state.get_data_parallel_world_size(),
    }


class CpuBackend:
    """gloo + torch optimizer over megatron param groups (see module docstring)."""

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, resolved: ResolvedParametrization | None) -> None:
        self.model = model
        self.optimizer = CpuOptimizer(cfg, [model], resolved)
        self.layout = _layout()
        # Pipeline stages run megatron's schedule, which also reduces data-parallel grads.
        self.pipeline = (
            CpuPipeline(model, cfg.model.seq_length, cfg.training.micro_batch_size) if self.layout["pp"] > 1 else None
        )
        dp_group = parallel_state.get_data_parallel_group()
        self.ddp = (
            torch.nn.parallel.DistributedDataParallel(model, process_group=dp_group)
            if self.layout["dp"] > 1 and self.pipeline is None
            else None
        )

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def _forward(self, mb: dict[str, torch.Tensor]) -> torch.Tensor:
        module = self.ddp if self.ddp is not None else self.model
        return module(mb["tokens"], mb["position_ids"], None, labels=mb["labels"]).float()

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> StepResult:
        self.model.train()
        self.optimizer.zero_grad()
        if self.pipeline is not None:
            stats = self.pipeline.run(micro_batches, forward_only=False)
            return self._apply(_world_mean(stats[0], stats[1]))
        total = sum(mb["loss_mask"].sum() for mb in micro_batches)
        loss_sum = torch.zeros((), dtype=torch.float64)
        last = len(micro_batches) - 1
        for i, mb in enumerate(micro_batches):
            sync = contextlib.nullcontext() if self.ddp is None or i == last else self.ddp.no_sync()
            with sync:
                token_loss = (self._forward(mb) * mb["loss_mask"]).sum()
                (token_loss / total).backward()
            loss_sum += token_loss.detach().double()
        return self._apply(_world_mean(loss_sum, torch.as_tensor(total)))

    def _apply(self, loss: float) -> StepResult:
        if not torch.isfinite(torch.tensor(loss)):
            self.optimizer.zero_grad()
            return StepResult(loss, float("nan"), False)
        applied, norm = self.optimizer.step()
        return StepResult(loss, norm, applied)

    @torch.no_grad()
    def evaluate(self, micro_batches: list[dict[str, torch.Tensor]]) -> float:
        self.model.eval()
        if self.pipeline is not None:
            stats = self.pipeline.run(micro_batches, forward_only=True)
            self.model.train()
            return _world_mean(stats[0], stats[1])
        loss_sum = torch.zeros((), dtype=torch.float64)
        tokens = torch.zeros((), dtype=torch.float64)
        for mb in micro_batches:
            loss_sum += (self._forward(mb) * mb["loss_mask"]).sum().double()
            tokens += mb["loss_mask"].sum().double()
        self.model.train()
        return _world_mean(loss_sum, tokens)

    def _file(self, directory: Path) -> Path:
        tp = parallel_state.get_tensor_model_parallel_rank()
        pp = parallel_state.get_pipeline_model_parallel_rank()
        from training.checkpoint import cpu_state_file

        return directory / cpu_state_file(tp, pp)

    def save_state(self, directory: Path) -> None:
        if parallel_state.get_data_parallel_rank() == 0:
            state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
            torch.save(state, self._file(directory))

    def load_state(self, directory: Path, common: dict[str, Any]) -> None:
        from training.checkpoint import other_model_parallel

        saved = common.get("layout")
        if other_model_parallel(saved, self.layout):
            raise ValueError(
                f"checkpoint {directory} was written with parallel layout {saved}; this CPU run uses "
                f"{self.layout} (resharding needs the GPU path's dist_checkpointing)"
            )
        state = torch.load(self._file(directory), weights_only=False)
        self.model.load_state_dict(state["model"], strict=True)
        self.optimizer.load_state_dict(state["optimizer"])


class GpuBackend:
    """NCCL + megatron DDP / optimizer / schedules (see module docstring)."""

    def __init__(
        self, cfg: RunConfig, model: torch.nn.Module, resolved: ResolvedParametrization | None, bf16: bool
    ) -> None:
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.distributed.finalize_model_grads import finalize_model_grads
        from megatron.core.optimizer import get_megatron_optimizer
        from megatron.core.transformer.module import Float16Module

        import patches
        from training.optim import megatron_optimizer_config, overrides

        distributed = cfg.parallel.use_distributed_optimizer  # sgd excluded by runconfig.validate
        config = model.config
        # Gradients are the token mean over the whole global batch (the CPU path's contract):
        # megatron sums token losses and finalize_model_grads divides by the all-reduced token
        # count, instead of averaging per-micro-batch means. Read by DDP at construction.
        config.calculate_per_token_loss = True
        if bf16:
            model = Float16Module(config, model)
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True,
            overlap_grad_reduce=False,
            use_distributed_optimizer=distributed,
            check_for_nan_in_grad=False,
        )
        self.model = DistributedDataParallel(config=config, ddp_config=ddp_config, module=model)
        self.optimizer = get_megatron_optimizer(
            megatron_optimizer_config(cfg, bf16=bf16, distributed=distributed),
            [self.model],
            config_overrides=overrides(cfg, resolved) if resolved is not None else None,
        )
        patches.check_distinct_groups(self.optimizer.param_groups)
        config.no_sync_func = self.model.no_sync
        config.finalize_model_grads_func = finalize_model_grads
        config.grad_scale_func = self.optimizer.scale_loss
        self.config = config
        self.schedule = Schedule(cfg.model.seq_length, cfg.training.micro_batch_size, device="cuda")
        self.layout = _layout()

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def _run(self, micro_batches: list[dict[str, torch.Tensor]], forward_only: bool) -> float:
        stats = self.schedule.run(self.model, micro_batches, forward_only, lambda t: t.cuda(non_blocking=True))
        dist.all_reduce(stats)
        return float(stats[0] / stats[1]) if stats[1] > 0 else float("nan")

    def train_step(self, micro_batches: list[dict[str, torch.Tensor]]) -> StepResult:
        self.model.train()
        self.model.zero_grad_buffer()
        self.optimizer.zero_grad()
        loss = self._run(micro_batches, forward_only=False)
        applied, grad_norm, _ = self.optimizer.step()
        return StepResult(loss, float(grad_norm) if grad_norm is not None else float("nan"), bool(applied))

    @torch.no_grad()
    def evaluate(self, micro_batches: list[dict[str, torch.Tensor]]) -> float:
        self.model.eval()
        loss = self._run(micro_batches, forward_only=True)
        self.model.train()
        return loss

    def save_state(self, directory: Path) -> None:
        dist.barrier()
        save_dist_checkpoint(self.model.module, self.optimizer, directory / "dist")

    def load_state(self, directory: Path, common: dict[str, Any]) -> None:
        prime_optimizer_state_for_loading(self.optimizer)
        load_dist_checkpoint(self.model.module, self.optimizer, directory / "dist")


# How the distributed optimizer's state is laid out in a dist checkpoint. megatron-core 0.16.1
# defaults to 'fully_sharded_model_space', which its own ShardedTensor validation now rejects
# ("flattened_range is not supported"); 'dp_reshardable' is megatron-LM's default: fully
# parallel save/load, resharding across data-parallel sizes (TP/PP changes need
# 'fully_reshardable'). Ignored by non-distributed optimizers.
DIST_CKPT_METADATA: dict[str, Any] = {
    "distrib_optim_sharding_type": "dp_reshardable",
    "singleton_local_shards": False,
    "chained_optim_avoid_prefix": True,
}


def _sharded_state(module: Any, optimizer: Any, is_loading: bool, metadata: dict[str, Any]) -> dict[str, Any]:
    model_sd = module.sharded_state_dict(metadata=metadata)  # the unwrapped model: no DDP "module." prefix
    optim_sd = optimizer.sharded_state_dict(model_sd, is_loading=is_loading, metadata=metadata)
    return {"model": model_sd, "optimizer": optim_sd}


def save_dist_checkpoint(module: Any, optimizer: Any, directory: Path) -> None:
    """Model + megatron optimizer through ``dist_checkpointing``, with the layout recorded."""
    from megatron.core import dist_checkpointing

    directory.mkdir(exist_ok=True)
    # megatron adds process groups to the metadata it is handed: the stored copy stays plain
    sharded = _sharded_state(module, optimizer, False, dict(DIST_CKPT_METADATA))
    dist_checkpointing.save(sharded, str(directory), content_metadata=dict(DIST_CKPT_METADATA))


def load_dist_checkpoint(module: Any, optimizer: Any, directory: Path) -> None:
    """Load in the layout the checkpoint was written in (its content metadata), as megatron-LM does."""
    from megatron.core import dist_checkpointing

    metadata = dist_checkpointing.load_content_metadata(str(directory)) or dict(DIST_CKPT_METADATA)
    state = dist_checkpointing.load(_sharded_state(module, optimizer, True, metadata), str(directory))
    module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])


def _init_sgd_state(opt: torch.optim.Optimizer, config: Any = None) -> None:
    """The state torch SGD keeps after a step (a momentum buffer when momentum != 0)."""
    for group in opt.param_groups:
        if group.get("momentum", 0.0):
            for p in group["params"]:
                opt.state[p].setdefault("momentum_buffer", torch.zeros_like(p))


def prime_optimizer_state_for_loading(optimizer: Any) -> None:
    """Give a fresh megatron optimizer the state that ``sharded_state_dict(is_loading=True)``
    reads, so a checkpoint can be loaded into it (the loaded values replace these).

    megatron-core 0.16.1 calls ``init_state_fn`` on load, which is None for SGD; and its
    distributed optimizer reads each torch Adam state's ``step`` (the fallback used when
    neither Transformer Engine nor Apex is installed) before any step has run.
    """
    for opt in getattr(optimizer, "chained_optimizers", [optimizer]):
        if getattr(opt, "init_state_fn", True) is None:
            opt.init_state_fn = _init_sgd_state
        inner = opt.optimizer
        if isinstance(inner, torch.optim.Adam | torch.optim.AdamW):
            for group in inner.param_groups:
                for p in group["params"]:
                    state = inner.state[p]
                    if not state:
                        state["step"] = torch.tensor(0.0)
                        state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)

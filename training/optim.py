"""Optimizer and LR schedule for both paths, from one set of megatron param groups.

GPU: ``get_megatron_optimizer(config, ddp_chunks, config_overrides=...)`` (mixed precision,
distributed optimizer, megatron's grad clipping). CPU: the same ``_get_param_groups`` with
the same overrides feed a torch optimizer, and :class:`CpuOptimizer` adds the two things
megatron's wrapper would do (a tensor-parallel-aware grad norm, clipping). Both paths use
megatron's ``OptimizerParamScheduler``, which writes each group's LR from its
``max_lr`` / ``min_lr``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.optimizer import OptimizerConfig as MegatronOptimizerConfig
from megatron.core.optimizer import _get_param_groups
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.tensor_parallel import param_is_not_tensor_parallel_duplicate
from megatron.core.transformer.module import param_is_not_shared

import patches
from patches.rules import OPTIMIZER_FAMILIES, ResolvedParametrization
from runconfig.schema import RunConfig

DECAY_STYLES = {"constant": "constant", "linear": "linear", "cosine": "cosine", "wsd": "WSD"}


def megatron_optimizer_config(cfg: RunConfig, bf16: bool = False, distributed: bool = False) -> MegatronOptimizerConfig:
    o = cfg.optimizer
    return MegatronOptimizerConfig(
        optimizer=OPTIMIZER_FAMILIES[o.name],  # megatron's names are the families: adam | sgd
        lr=o.lr,
        min_lr=o.lr * o.min_lr_ratio,
        weight_decay=o.weight_decay,
        adam_beta1=o.adam_beta1,
        adam_beta2=o.adam_beta2,
        adam_eps=o.adam_eps,
        decoupled_weight_decay=o.name != "adam",
        sgd_momentum=o.sgd_momentum,
        clip_grad=o.clip_grad,
        bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_distributed_optimizer=distributed,
    )


def overrides(cfg: RunConfig, resolved: ResolvedParametrization) -> dict:
    return patches.param_group_overrides(resolved, cfg.optimizer.lr, cfg.optimizer.lr * cfg.optimizer.min_lr_ratio)


def build_param_groups(
    cfg: RunConfig, chunks: list[torch.nn.Module], resolved: ResolvedParametrization | None
) -> list[dict]:
    """megatron's param groups with the parametrization's per-role LRs (both paths).

    ``resolved=None`` gives megatron's stock groups (no overrides): the unpatched reference.
    """
    groups = _get_param_groups(
        chunks, megatron_optimizer_config(cfg), overrides(cfg, resolved) if resolved is not None else None
    )
    patches.check_distinct_groups(groups)
    return groups


def torch_optimizer(cfg: RunConfig, groups: list[dict]) -> torch.optim.Optimizer:
    """The torch optimizer megatron itself falls back to when Apex/TE are absent."""
    o = cfg.optimizer
    if o.name == "sgd":
        return torch.optim.SGD(groups, lr=o.lr, momentum=o.sgd_momentum, weight_decay=o.weight_decay)
    cls = torch.optim.AdamW if o.name == "adamw" else torch.optim.Adam
    return cls(groups, lr=o.lr, betas=(o.adam_beta1, o.adam_beta2), eps=o.adam_eps, weight_decay=o.weight_decay)


class CpuOptimizer:
    """A torch optimizer plus megatron's grad-norm semantics, for the CPU (gloo) path.

    The grad norm counts every tensor-parallel shard once and replicated parameters once
    (megatron's ``param_is_not_tensor_parallel_duplicate`` / ``param_is_not_shared``), summed
    over the model-parallel group, so TP=2 clips exactly as TP=1.
    """

    def __init__(self, cfg: RunConfig, chunks: list[torch.nn.Module], resolved: ResolvedParametrization | None) -> None:
        self.groups = build_param_groups(cfg, chunks, resolved)
        self.optimizer = torch_optimizer(cfg, self.groups)
        self.clip_grad = cfg.optimizer.clip_grad
        self.params = [p for g in self.groups for p in g["params"]]

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def grad_norm(self) -> float:
        squares = torch.zeros(1, dtype=torch.float64)
        for p in self.params:
            if p.grad is not None and param_is_not_shared(p) and param_is_not_tensor_parallel_duplicate(p):
                squares += p.grad.detach().double().pow(2).sum()
        if dist.is_initialized() and parallel_state.get_model_parallel_group().size() > 1:
            dist.all_reduce(squares, group=parallel_state.get_model_parallel_group())
        return math.sqrt(squares.item())

    def step(self) -> tuple[bool, float]:
        """Clip and step; returns (applied, grad_norm). A non-finite norm skips the update."""
        norm = self.grad_norm()
        if not math.isfinite(norm):
            self.zero_grad()
            return False, norm
        if self.clip_grad > 0 and norm > self.clip_grad:
            scale = self.clip_grad / (norm + 1e-6)
            for p in self.params:
                if p.grad is not None:
                    p.grad.mul_(scale)
        self.optimizer.step()
        return True, norm

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)


def build_scheduler(cfg: RunConfig, optimizer: object) -> OptimizerParamScheduler:
    """megatron's scheduler over ``optimizer.param_groups`` (each group's own max/min LR)."""
    o, s, steps = cfg.optimizer, cfg.scheduler, cfg.training.steps
    return OptimizerParamScheduler(
        optimizer,
        init_lr=0.0,
        max_lr=o.lr,
        min_lr=o.lr * o.min_lr_ratio,
        lr_warmup_steps=s.warmup_steps,
        lr_decay_steps=steps,
        lr_decay_style=DECAY_STYLES[s.decay_style],
        start_wd=o.weight_decay,
        end_wd=o.weight_decay,
        wd_incr_steps=steps,
        wd_incr_style="constant",
        wsd_decay_steps=s.wsd_decay_steps,
        lr_wsd_decay_style=s.wsd_decay_style if s.decay_style == "wsd" else None,
        use_checkpoint_opt_param_scheduler=False,
        override_opt_param_scheduler=True,
    )


def group_bounds(param_groups: Iterable[dict]) -> dict[tuple, tuple[float, float]]:
    """Each group's ``(max_lr, min_lr)``, keyed as megatron matches groups to a checkpoint's
    (``param_group_identifier_keys``; ``patches.check_distinct_groups`` keeps the key unique)."""
    return {patches.group_identifier(g): (g["max_lr"], g["min_lr"]) for g in param_groups}


def set_group_bounds(
    param_groups: Iterable[dict], bounds: dict[tuple, tuple[float, float]], scheduler: OptimizerParamScheduler
) -> None:
    """Give the groups these peak and floor LRs and rewrite each group's current LR from them.

    Loading an optimizer state restores every group's hyperparameters from the checkpoint,
    ``max_lr`` / ``min_lr`` included (torch's ``load_state_dict``, megatron's
    ``_filter_and_reorder_param_groups`` and the distributed optimizer's loader), and megatron's
    scheduler reads the bounds from the groups, so ``override_opt_param_scheduler`` alone keeps
    the checkpoint's peak and floor (Megatron-LM issue #1138). A branch therefore puts back the
    bounds its own config built, per group (each role's factor kept), after loading."""
    for g in param_groups:
        g["max_lr"], g["min_lr"] = bounds[patches.group_identifier(g)]
    scheduler.step(0)  # the LR the next step trains with, from the new bounds


def group_lrs(param_groups: Iterable[dict], resolved: ResolvedParametrization) -> dict[str, float]:
    """Current LR of each group, keyed by the roles it holds (for metrics.jsonl)."""
    return {patches.group_name(g, resolved): float(g["lr"]) for g in param_groups}

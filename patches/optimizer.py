"""Per-role learning rates as megatron-core optimizer overrides.

megatron-core 0.16.1 builds parameter groups from ``Dict[ParamKey, ParamGroupOverride]``
(``get_megatron_optimizer`` on GPU, ``_get_param_groups`` on CPU) and its
``OptimizerParamScheduler`` reads only ``max_lr`` / ``min_lr`` per group, so each role's
LR factor goes into those two. Each override also carries ``lr_mult`` = the factor:
0.16.1 does not use it for the LR, but matches groups by
``(wd_mult, lr_mult, is_expert_parallel, is_decoupled_lr)`` when loading a checkpoint, so
groups that differed only in ``max_lr`` would be swapped on resume.
"""

from __future__ import annotations

from collections.abc import Iterable

from megatron.core.optimizer.optimizer import param_group_identifier_keys
from megatron.core.optimizer.optimizer_config import ParamKey, ParamWithNamePredicate
from megatron.core.optimizer_param_scheduler import ParamGroupOverride

from patches.roles import role_of
from patches.rules import ROLES, ResolvedParametrization


def _role_predicate(role: str) -> ParamWithNamePredicate:
    return ParamWithNamePredicate(name=f"depthmup:{role}", fn=lambda param, name: role_of(name, param) == role)


def param_group_overrides(
    resolved: ResolvedParametrization, lr: float, min_lr: float = 0.0
) -> dict[ParamKey, ParamGroupOverride]:
    """Overrides giving every role ``max_lr = lr * factor`` and ``min_lr = min_lr * factor``.

    ``lr`` / ``min_lr`` are the base values a Megatron user passes as ``--lr`` / ``--min-lr``.
    Biases and norms get ``wd_mult = 0`` (megatron's standard rule, which custom overrides
    replace). An unknown parameter raises ``UnsupportedParameterError`` while groups are built.
    """
    overrides: dict[ParamKey, ParamGroupOverride] = {}
    for role in ROLES:
        rule = resolved.roles[role]
        override = ParamGroupOverride(
            max_lr=lr * rule.lr_factor,
            min_lr=min_lr * rule.lr_factor,
            wd_mult=rule.wd_factor,
        )
        override["lr_mult"] = rule.lr_factor
        if resolved.family == "adam" and resolved.parametrization.scale_epsilon:
            override["eps"] = rule.eps
        overrides[ParamKey(with_name_predicate=_role_predicate(role))] = override
    return overrides


def group_identifier(group: dict) -> tuple:
    return tuple(group.get(key) for key in param_group_identifier_keys)


def check_distinct_groups(param_groups: Iterable[dict]) -> None:
    """Refuse groups that megatron's checkpoint loader could not tell apart."""
    seen: dict[tuple, dict] = {}
    for group in param_groups:
        ident = group_identifier(group)
        other = seen.get(ident)
        if other is not None and (other["max_lr"], other["min_lr"]) != (group["max_lr"], group["min_lr"]):
            raise ValueError(
                f"two optimizer groups share the checkpoint key {ident} with different LRs "
                f"({other['max_lr']} vs {group['max_lr']}); megatron 0.16.1 would swap them on resume"
            )
        seen[ident] = group


def group_name(group: dict, resolved: ResolvedParametrization) -> str:
    """A readable name for a group: the roles whose (LR factor, WD factor) it carries, joined
    by '+'. Works on any group dict with ``lr_mult`` / ``wd_mult``, whatever wraps the params."""
    roles = [
        role
        for role in ROLES
        if (resolved.roles[role].lr_factor, resolved.roles[role].wd_factor)
        == (group.get("lr_mult"), group.get("wd_mult"))
    ]
    return "+".join(roles) if roles else f"lr_mult={group.get('lr_mult')},wd_mult={group.get('wd_mult')}"

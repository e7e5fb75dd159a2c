"""The resolved table: every number the parametrization applies, per parameter.

Printed by ``python -m training.show``, stored as ``parametrization.json`` in every run
directory and inside every checkpoint, and compared on resume. Parameter names and shapes
are the global ones (layer numbers across pipeline stages, full tensor-parallel shapes), so
the table of a run does not depend on how it was parallelized.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import megatron.core
import torch

from patches.roles import role_of, unwrap_name
from patches.rules import ROLES, ResolvedParametrization

_LAYER_INDEX = re.compile(r"^decoder\.layers\.(\d+)\.")


def layer_of(global_name: str) -> int | None:
    """The 0-based block index in a global parameter name (None outside the blocks)."""
    match = _LAYER_INDEX.match(global_name)
    return int(match.group(1)) if match else None


def global_named_parameters(model: torch.nn.Module, layer_offset: int = 0) -> list[tuple[str, torch.nn.Parameter, str]]:
    """(global name, parameter, role) of each trainable parameter of one model chunk/stage:
    wrapper prefixes removed, layer numbers shifted by the stage's ``layer_offset``. The last
    pipeline stage's copy of a tied embedding (megatron marks it ``shared``; it is kept equal
    to the first stage's) is left out: the model has that parameter once, as with one stage."""
    out = []
    for name, param in model.named_parameters():
        if not param.requires_grad or getattr(param, "shared", False):
            continue
        bare = unwrap_name(name)
        if layer_offset:
            bare = _LAYER_INDEX.sub(lambda m: f"decoder.layers.{int(m.group(1)) + layer_offset}.", bare)
        out.append((bare, param, role_of(name, param)))
    return out


def tp_partition_dim(param: torch.Tensor) -> int | None:
    """The dimension megatron-core splits ``param`` along over tensor-parallel ranks, read from
    the attributes it sets on the parameter (``tensor_model_parallel``, ``partition_dim``); None
    for a parameter every rank holds whole. Megatron sets them on a weight only when it
    initializes it (``perform_initialization``; on the meta device that costs nothing), on a
    column-parallel bias always."""
    return int(param.partition_dim) if getattr(param, "tensor_model_parallel", False) else None


def global_parameters(
    model: torch.nn.Module, tp_size: int = 1, layer_offset: int = 0
) -> list[tuple[str, list[int], str]]:
    """(global name, global shape, role) of each trainable parameter of one model chunk/stage."""
    out = []
    for bare, param, role in global_named_parameters(model, layer_offset):
        shape = list(param.shape)
        dim = tp_partition_dim(param)
        if dim is not None and tp_size > 1:
            shape[dim] *= tp_size
        out.append((bare, shape, role))
    return out


def _rounded(x: float | None) -> float | None:
    return None if x is None else float(x)


def build_table(resolved: ResolvedParametrization, parameters: Iterable[tuple[str, list[int], str]]) -> dict[str, Any]:
    """The JSON-ready resolved table (top-level numbers, per-role rules, per-parameter rows)."""
    p = resolved.parametrization
    rows = []
    for name, shape, role in sorted(parameters, key=lambda r: _sort_key(r[0])):
        rule = resolved.roles[role]
        rows.append(
            {
                "name": name,
                "role": role,
                "shape": list(shape),
                "init_std": _rounded(rule.init_std),
                "multiplier": rule.forward_multiplier,
                "lr_factor": rule.lr_factor,
                "wd_factor": rule.wd_factor,
                "eps": _rounded(rule.eps),
            }
        )
    return {
        "preset": resolved.preset,
        "width": resolved.width,
        "yaida_s": resolved.yaida_s,
        "emergent_scale": resolved.emergent_scale,  # Yaida's gamma = L / n^(1-s) and L / n (width yaida)
        "alpha": resolved.alpha,
        "gamma": resolved.gamma,
        "num_layers": resolved.shape.num_layers,
        "hidden_size": resolved.shape.hidden_size,
        "head_dim": resolved.shape.kv_channels,
        "base_num_layers": resolved.base_num_layers,
        "base_hidden_size": resolved.base_hidden_size,
        "base_head_dim": resolved.base_head_dim,
        "width_ratio": resolved.width_ratio,
        "depth_ratio": resolved.depth_ratio,
        "block_multiplier": p.block_multiplier,
        "branch_multiplier": resolved.branch_multiplier,
        "softmax_scale": resolved.effective_softmax_scale,
        "output_multiplier": resolved.output_multiplier,
        "embedding_multiplier": resolved.embedding_multiplier,
        "init_method_std": resolved.init_method_std,
        "optimizer": resolved.optimizer,
        "optimizer_family": resolved.family,
        "adam_eps": resolved.adam_eps,
        "scale_epsilon": p.scale_epsilon,
        "independent_weight_decay": p.independent_weight_decay,
        "megatron_core": megatron.core.__version__,
        "roles": {
            role: {
                "init_std": _rounded(resolved.roles[role].init_std),
                "multiplier": resolved.roles[role].forward_multiplier,
                "lr_factor": resolved.roles[role].lr_factor,
                "wd_factor": resolved.roles[role].wd_factor,
                "eps": _rounded(resolved.roles[role].eps),
            }
            for role in ROLES
        },
        "params": rows,
    }


def _sort_key(name: str) -> tuple:
    """Embeddings, then layers in numeric order, then final norm and output."""
    m = _LAYER_INDEX.match(name)
    if name.startswith("embedding."):
        return (0, 0, name)
    if m:
        return (1, int(m.group(1)), name)
    return (2, 0, name)


def table_differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two tables (empty when they agree), one line per
    field that differs (``roles.hidden_in.lr_factor: 0.707 -> 0.577``), not whole rows."""
    ignore = {"megatron_core"}
    diffs: list[str] = []
    for key in sorted(set(old) | set(new)):
        if key not in ignore | {"params"}:
            diffs += _field_differences(key, old.get(key), new.get(key))
    old_rows = {r["name"]: r for r in old.get("params", [])}
    new_rows = {r["name"]: r for r in new.get("params", [])}
    for name in sorted(set(old_rows) | set(new_rows), key=_sort_key):
        if name not in old_rows or name not in new_rows:
            diffs.append(f"params[{name}]: {'absent' if name not in old_rows else 'present'} -> "
                         f"{'absent' if name not in new_rows else 'present'}")  # fmt: skip
        else:
            diffs += _field_differences(f"params[{name}]", old_rows[name], new_rows[name])
    return diffs


def _field_differences(where: str, old: Any, new: Any) -> list[str]:
    """``where.field: old -> new`` for each leaf that differs (dicts are compared key by key)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            line
            for key in sorted(set(old) | set(new))
            for line in _field_differences(f"{where}.{key}", old.get(key), new.get(key))
        ]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


def format_table(table: dict[str, Any]) -> str:
    """A terminal rendering of the table."""
    head = [
        f"preset {table['preset']} (width {table['width']}): alpha={table['alpha']:g} gamma={table['gamma']:g}",
        f"  L={table['num_layers']} L0={table['base_num_layers']} m_L={table['depth_ratio']:.6g} | "
        f"n={table['hidden_size']} n0={table['base_hidden_size']} m_d={table['width_ratio']:.6g} | "
        f"d={table['head_dim']} d0={table['base_head_dim']}",
        f"  branch multiplier a*m_L^-alpha = {table['block_multiplier']:g}*{table['depth_ratio']:.6g}^-{table['alpha']:g}"
        f" = {table['branch_multiplier']:.6g}",
        f"  softmax scale {table['softmax_scale']:.6g} | logit multiplier {table['output_multiplier']:.6g} | "
        f"embedding multiplier {table['embedding_multiplier']:.6g}",
        f"  optimizer {table['optimizer']} ({table['optimizer_family']} rules), sigma={table['init_method_std']:g}, "
        f"scale_epsilon={table['scale_epsilon']}, independent_weight_decay={table['independent_weight_decay']}",
    ]
    scale = table.get("emergent_scale")
    if scale:
        head.append(
            f"  Yaida s={scale['s']:g}: emergent scale gamma = L/n^(1-s) = {scale['gamma']:.6g}, "
            f"L/n = {scale['L_over_n']:.6g}"
        )
    head.append("")
    cols = ("name", "role", "shape", "init_std", "multiplier", "lr_factor", "wd_factor", "eps")
    body = [[_cell(row[c]) for c in cols] for row in table["params"]]
    widths = [max(len(c), *(len(r[i]) for r in body)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in body]
    return "\n".join(head + lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return "x".join(map(str, value))
    return str(value)

"""What coord-check measures and what each parametrization predicts for it, as tables.

Every quantity (:data:`QUANTITIES`) is one RMS taken from the coord-check records: at
initialization or after K steps, of the last layer or over every layer. Its slope of log2 RMS
against log2 depth (at fixed width) is judged against :data:`DEPTH_EXPECTED`, a column per
depth rule (alpha, gamma), and its slope against log2 width (at fixed depth) against
:data:`WIDTH_EXPECTED`, a column per width rule. A cell is

* a number e: the slope must be within ``tolerance`` of e;
* a range ``(lo, hi)``: the slope must lie in [lo - tolerance, hi + tolerance] (``None``: no
  bound on that side); used where the theory gives a bound, or where two regimes meet (the
  change of a depth-muP block is dominated by its inputs' change through its weights at init,
  slope -1/2, early, and by its own weight update, slope -1, once the update outgrows the
  initial weights, which at toy widths is within the first few steps);
* ``None``: reported, not judged.

The derivation of each cell (Adam, pre-LN blocks, branch multiplier ``L^-alpha``, block LR
``L^-gamma``, branch output init ``1/sqrt(2L)`` when alpha = 0 else ``1/sqrt(2 L0)``;
docs/parametrization.md) is in docs/eval.md, "What each row predicts".
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import numpy as np

Cell = Union[float, tuple[Optional[float], Optional[float]], None]


@dataclasses.dataclass(frozen=True)
class Quantity:
    field: str  # the CoordRecord field
    step: int  # 0: at initialization, -1: after the K steps
    layers: str  # "last": the last layer's value; "all": the RMS over layers; "": a scalar
    meaning: str


QUANTITIES: dict[str, Quantity] = {
    "stream": Quantity("layer_rms", 0, "last", "residual stream (last layer's output) at init"),
    "stream_final": Quantity("layer_rms", -1, "last", "residual stream after K steps"),
    "stream_change": Quantity("layer_delta_rms", -1, "last", "change of the residual stream"),
    "block": Quantity("block_rms", 0, "all", "each block's residual contribution (output - input) at init"),
    "block_change": Quantity("block_delta_rms", -1, "all", "change of each block's contribution"),
    "block_update": Quantity("block_update_rms", -1, "all", "(Delta W) x: each block's own weight change on its input"),
    "attn_out": Quantity("attn_out_rms", 0, "all", "attention output (before the branch multiplier) at init"),
    "attn_out_change": Quantity("attn_out_delta_rms", -1, "all", "change of the attention output"),
    "mlp_out": Quantity("mlp_out_rms", 0, "all", "MLP output (before the branch multiplier) at init"),
    "mlp_out_change": Quantity("mlp_out_delta_rms", -1, "all", "change of the MLP output"),
    "logits": Quantity("logits_rms", 0, "", "output logits at init"),
    "logits_change": Quantity("logits_delta_rms", -1, "", "change of the output logits"),
    "attn_logits": Quantity("attn_logits_rms", 0, "all", "attention logits scale*q.k at init"),
    "attn_logits_change": Quantity("attn_logits_delta_rms", -1, "all", "change of the attention logits"),
}

# Depth rules, the columns of DEPTH_EXPECTED: (alpha, gamma) -> the presets that have them.
DEPTH_RULES: dict[tuple[float, float], str] = {
    (0.0, 0.0): "sp/mup",
    (0.5, 0.5): "depth_mup",
    (0.5, 0.0): "branch_only",
    (1.0, 0.0): "ode",
}

# Expected slope of log2 RMS against log2 depth:    sp/mup      depth_mup     branch_only  ode
DEPTH_EXPECTED: dict[str, tuple[Cell, Cell, Cell, Cell]] = {
    "stream":             (0.0,        0.0,          0.0,         0.0),
    "stream_final":       ((0.5, 1.0), 0.0,          0.5,         0.0),
    "stream_change":      ((0.5, 1.0), 0.0,          0.5,         0.0),
    "block":              (-0.5,       -0.5,         -0.5,        -1.0),
    "block_change":       (0.0,        (-1.0, -0.5), -0.5,        -1.0),
    "block_update":       (0.0,        -1.0,         -0.5,        -1.0),
    "attn_out":           (-0.5,       0.0,          0.0,         0.0),
    "attn_out_change":    (0.0,        (-0.5, 0.0),  0.0,         0.0),
    "mlp_out":            (-0.5,       0.0,          0.0,         0.0),
    "mlp_out_change":     (0.0,        (-0.5, 0.0),  0.0,         0.0),
    "logits":             (0.0,        0.0,          0.0,         0.0),
    "logits_change":      (0.0,        0.0,          0.0,         0.0),
    "attn_logits":        (0.0,        0.0,          0.0,         0.0),
    "attn_logits_change": (0.0,        (-0.5, 0.0),  0.0,         0.0),
}  # fmt: skip

WIDTH_RULES = ("mup", "sp")

# Expected slope of log2 RMS against log2 width (Adam):  mup          sp
WIDTH_EXPECTED: dict[str, tuple[Cell, Cell]] = {
    "stream":             (0.0,          (0.0, 1.0)),
    "stream_final":       (0.0,          (1.0, None)),
    "stream_change":      (0.0,          (1.0, None)),
    "block":              (0.0,          1.0),
    "block_change":       (0.0,          (1.0, None)),
    "block_update":       (0.0,          (1.0, None)),
    "attn_out":           (0.0,          1.0),
    "attn_out_change":    (0.0,          (1.0, None)),
    "mlp_out":            (0.0,          1.0),
    "mlp_out_change":     (0.0,          (1.0, None)),
    "logits":             (None,         0.5),
    "logits_change":      ((None, 0.0),  (0.5, None)),
    "attn_logits":        (-0.5,         1.0),
    "attn_logits_change": ((None, 0.0),  (1.0, None)),
}  # fmt: skip


def depth_column(alpha: float, gamma: float) -> dict[str, Cell] | None:
    """The expected depth slopes of a depth rule (None: no column has this alpha and gamma)."""
    names = list(DEPTH_RULES)
    if (alpha, gamma) not in DEPTH_RULES:
        return None
    i = names.index((alpha, gamma))
    return {row: cells[i] for row, cells in DEPTH_EXPECTED.items()}


def width_column(width: str) -> dict[str, Cell] | None:
    """The expected width slopes of a width rule (None for a rule with no column: yaida)."""
    if width not in WIDTH_RULES:
        return None
    i = WIDTH_RULES.index(width)
    return {row: cells[i] for row, cells in WIDTH_EXPECTED.items()}


def value(record: dict[str, Any], quantity: Quantity) -> float | None:
    """A quantity's RMS in one record (None when the record has no such layer values)."""
    v = record[quantity.field]
    if not isinstance(v, list):
        return v
    if not v:
        return None
    return v[-1] if quantity.layers == "last" else float(np.sqrt(np.mean(np.square(v))))


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log2(y) against log2(x)."""
    lx, ly = np.log2(np.asarray(xs, float)), np.log2(np.maximum(np.asarray(ys, float), 1e-30))
    return float(np.polyfit(lx, ly, 1)[0])


def slopes(shapes: list[dict[str, Any]], axis: str, fixed: str, at: int) -> dict[str, float]:
    """Per quantity, the slope of log2 RMS against log2 ``axis`` (``num_layers`` or
    ``hidden_size``) over the shapes whose ``fixed`` key is ``at``; quantities a shape lacks
    (attention logits of a core attention that is not the toolkit's) are left out."""
    rows = sorted((s for s in shapes if s[fixed] == at), key=lambda s: s[axis])
    xs = [s[axis] for s in rows]
    out = {}
    for name, q in QUANTITIES.items():
        ys = [value(s["records"][q.step], q) for s in rows]
        if all(y is not None for y in ys):
            out[name] = slope(xs, ys)
    return out


def describe(cell: Cell) -> str:
    """A cell as the table prints it: '+0.50', '-1.00..-0.50', '<= +0.00', 'not judged'."""
    if cell is None:
        return "not judged"
    if not isinstance(cell, tuple):
        return f"{cell:+.2f}"
    lo, hi = cell
    if lo is None:
        return f"<= {hi:+.2f}"
    if hi is None:
        return f">= {lo:+.2f}"
    return f"{lo:+.2f}..{hi:+.2f}"


def breaks(measured: float, cell: Cell, tolerance: float) -> bool:
    """Whether a measured slope breaks its cell (never for a cell that is not judged)."""
    if cell is None:
        return False
    lo, hi = cell if isinstance(cell, tuple) else (cell, cell)
    return (lo is not None and measured < lo - tolerance) or (hi is not None and measured > hi + tolerance)


def expectations(alpha: float, gamma: float, width: str, family: str, name: str) -> dict[str, dict[str, Any]]:
    """The columns a model is judged against, per axis: ``{"rule": label, "cells": column or
    None, "why": why it has no column}``. ``name`` labels the parametrization (a preset).
    The sp/mup depth column and the sp width column are Adam's: under SGD the gradient of a
    block's input matrices carries the ``1/sqrt(2L)`` (resp. ``sigma sqrt(n)``) of the output
    init, which Adam's normalization removes and SGD keeps (the depth presets with alpha > 0
    scale the SGD LR so that their updates match Adam's: their columns hold for both)."""
    depth = depth_column(alpha, gamma)
    depth_rule = DEPTH_RULES.get((alpha, gamma), f"alpha={alpha:g}, gamma={gamma:g}")
    why_depth = "" if depth is not None else f"no depth column for alpha={alpha:g}, gamma={gamma:g}"
    if depth is not None and family != "adam" and alpha == 0.0:
        depth, why_depth = None, f"the {depth_rule} depth column is derived for Adam, not {family}"
    cells = width_column(width)
    why_width = "" if cells is not None else f"no width column for width rule {width} (its check: --yaida-s)"
    if cells is not None and family != "adam" and width == "sp":
        cells, why_width = None, f"the sp width column is derived for Adam, not {family}"
    return {
        "depth": {"rule": f"{name} (alpha {alpha:g}, gamma {gamma:g})", "cells": depth, "why": why_depth},
        "width": {"rule": f"{name} (width {width})", "cells": cells, "why": why_width},
    }


def violations(results: dict[str, Any], tolerance: float) -> list[str]:
    """One line per slope that breaks its cell, naming the quantity (empty: the check passes)."""
    out = []
    for axis, key, fixed_name in (("depth", "slopes", "width"), ("width", "width_slopes", "depth")):
        rule, cells = results["expected"][axis]["rule"], results["expected"][axis]["cells"] or {}
        for fixed, measured in results[key].items():
            for name, s in measured.items():
                if breaks(s, cells.get(name), tolerance):
                    out.append(
                        f"{fixed_name} {fixed}: {name} ({QUANTITIES[name].meaning}) slope vs {axis} {s:+.2f}, "
                        f"expected {describe(cells[name])} under {rule}"
                    )
    return out

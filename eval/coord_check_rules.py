"""What coord-check measures and what each parametrization predicts for it, as tables.

Every quantity (:data:`QUANTITIES`) is one RMS taken from the coord-check records: at
initialization or after K steps, of the last layer or over every layer. Its slope of log2 RMS
against log2 depth (at fixed width) is judged against the column :data:`DEPTH_ROWS` give at
the model's (alpha, gamma) (one rule: each row an exponent linear in alpha and gamma,
:func:`depth_column`), and its slope against log2 width (at fixed depth) against
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

# The presets whose (alpha, gamma) a depth column is labelled with.
DEPTH_RULES: dict[tuple[float, float], str] = {
    (0.0, 0.0): "sp/mup",
    (0.5, 0.5): "depth_mup",
    (0.5, 0.0): "branch_only",
    (1.0, 0.0): "ode",
}


@dataclasses.dataclass(frozen=True)
class Exponent:
    """A depth exponent ``const + a*alpha + g*gamma + z*[alpha = 0]`` (``z``: Megatron's
    branch-output init ``1/sqrt(2L)``, which the presets keep only when alpha = 0)."""

    const: float = 0.0
    a: float = 0.0
    g: float = 0.0
    z: float = 0.0

    def at(self, alpha: float, gamma: float) -> float:
        return self.const + self.a * alpha + self.g * gamma + (self.z if alpha == 0 else 0.0)


@dataclasses.dataclass(frozen=True)
class DepthRow:
    """A quantity's RMS as a sum of parts ``L^e``: ``first`` (a change's own weight update,
    or the one part of a row at init) and ``others`` (the input's change carried through the
    weights at init; the embedding's Theta(1) change). The slope over the measured depths lies
    between ``first`` and the largest part, which dominates at large depth (a point when they
    meet); which part dominates over the measured depths depends on the steps and the width.
    ``fit_floor``: a growing part next to a Theta(1) one may fit as low as this over a finite
    range of depths."""

    first: Exponent
    others: tuple[Exponent, ...] = ()
    fit_floor: Optional[float] = None

    def cell(self, alpha: float, gamma: float) -> Cell:
        first = self.first.at(alpha, gamma)
        hi = max([first, *(e.at(alpha, gamma) for e in self.others)])
        lo = first if self.fit_floor is None else min(first, self.fit_floor)
        lo, hi = round(lo, 9) + 0.0, round(hi, 9) + 0.0  # 1 - 0.7 - 0.3 is 0, and never -0.0
        return hi if lo == hi else (lo, hi)


_INIT = Exponent(z=-0.5)  # the branch-output init: 1/sqrt(2L) when alpha = 0, else 1/sqrt(2 L0)
_MULT = Exponent(a=-1.0)  # the branch multiplier L^-alpha
_UPDATE = Exponent(g=-1.0)  # Adam moves a block's weights L^-gamma per entry
_SUM = Exponent(const=1.0, a=-1.0, g=-1.0)  # L aligned block updates L^-(alpha+gamma)
_FLAT = Exponent()


def _plus(*terms: Exponent) -> Exponent:
    return Exponent(*(sum(getattr(t, f.name) for t in terms) for f in dataclasses.fields(Exponent)))


# Expected slope of log2 RMS against log2 depth, for Adam and pre-LN blocks (docs/eval.md,
# "What each row predicts", derives each row; tests/test_coord_check_alpha.py checks them
# against the preset columns): the one rule, evaluated at any (alpha, gamma) depth_domain allows.
_OUT_CHANGE = DepthRow(_UPDATE, (_INIT,))  # own update; the input's Theta(1) change through the init
_STREAM_CHANGE = DepthRow(_SUM, (_FLAT,), fit_floor=0.5)  # the blocks' updates; the embedding's
DEPTH_ROWS: dict[str, DepthRow] = {
    "stream": DepthRow(_FLAT),
    "stream_final": _STREAM_CHANGE,
    "stream_change": _STREAM_CHANGE,
    "block": DepthRow(_plus(_MULT, _INIT)),
    "block_change": DepthRow(_plus(_MULT, _UPDATE), (_plus(_MULT, _INIT),)),
    "block_update": DepthRow(_plus(_MULT, _UPDATE)),
    "attn_out": DepthRow(_INIT),
    "attn_out_change": _OUT_CHANGE,
    "mlp_out": DepthRow(_INIT),
    "mlp_out_change": _OUT_CHANGE,
    "logits": DepthRow(_FLAT),
    "logits_change": DepthRow(_FLAT),
    "attn_logits": DepthRow(_FLAT),
    "attn_logits_change": DepthRow(_UPDATE, (_FLAT,)),  # W_q, W_k move L^-gamma; their input Theta(1)
}
assert list(DEPTH_ROWS) == list(QUANTITIES)


def depth_domain(alpha: float, gamma: float) -> str:
    """Why the rows do not hold at (alpha, gamma) ("" where they do): they assume a stream
    Theta(1) at init (alpha = 0 with the 1/sqrt(2L) output init, or alpha >= 1/2: L blocks of
    variance L^-2alpha at most L^-1 each) and a block LR that does not grow with depth."""
    if not (alpha == 0 or 0.5 <= alpha <= 1.0):
        return f"alpha={alpha:g}: the rows are derived for alpha = 0 or 1/2 <= alpha <= 1"
    if not 0.0 <= gamma <= 1.0:
        return f"gamma={gamma:g}: the rows are derived for 0 <= gamma <= 1"
    return ""


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
    """The expected depth slopes at (alpha, gamma) (None outside the rows' domain,
    :func:`depth_domain`)."""
    if depth_domain(alpha, gamma):
        return None
    return {name: row.cell(alpha, gamma) for name, row in DEPTH_ROWS.items()}


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


# Rows a block type leaves not judged on the depth axis, and why (docs/eval.md, "Block linear1").
BLOCK_NOT_JUDGED: dict[str, tuple[tuple[str, ...], str]] = {
    "linear1": (
        ("stream", "stream_final", "stream_change"),
        "model.block=linear1: stream rows not judged (its one output-init matrix reads the LayerNorm's unit "
        "output, so at the base depth the L blocks outweigh the embedding in the stream and their independent "
        "sum scales like L^(1/2-alpha), falling with depth for alpha > 1/2)",
    ),
}


def expectations(
    alpha: float, gamma: float, width: str, family: str, name: str, block: str = "standard"
) -> dict[str, dict[str, Any]]:
    """The columns a model is judged against, per axis: ``{"rule": label, "cells": column or
    None, "why": why it has no column, or why some of its rows are not judged}``. ``name``
    labels the parametrization (a preset). The alpha = 0 depth column and the sp width column
    are Adam's: under SGD the gradient of a block's input matrices carries the ``1/sqrt(2L)``
    (resp. ``sigma sqrt(n)``) of the output init, which Adam's normalization removes and SGD
    keeps (with alpha > 0 the rules engine scales the SGD LR so that the updates match Adam's:
    those columns hold for both). ``block``: the rows :data:`BLOCK_NOT_JUDGED` names are left
    out of the depth column."""
    depth = depth_column(alpha, gamma)
    why_depth = depth_domain(alpha, gamma)
    if depth is not None and family != "adam" and alpha == 0.0:
        label = DEPTH_RULES.get((alpha, gamma), f"alpha={alpha:g}, gamma={gamma:g}")
        depth, why_depth = None, f"the {label} depth column is derived for Adam, not {family}"
    if depth is not None and block in BLOCK_NOT_JUDGED:
        rows, why_depth = BLOCK_NOT_JUDGED[block]
        depth = {row: None if row in rows else cell for row, cell in depth.items()}
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

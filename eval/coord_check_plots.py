"""coord-check's figures: one panel per quantity of the table (microsoft/mup's coord-check
picture, one line per step), its measured and expected slope in the title, red when it breaks
its rule; and the per-layer profiles of the last step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eval.coord_check_rules import QUANTITIES, breaks, describe, value

AXES = {  # axis: (its shape key, the fixed shape key, x label, the fixed axis's name, its symbol)
    "depth": ("num_layers", "hidden_size", "depth L (layers)", "width", "L"),
    "width": ("hidden_size", "num_layers", "width n (hidden size)", "depth", "n"),
}
PROFILES = (("layer_delta_rms", "change of the residual stream"), ("block_update_rms", "(Delta W) x per block"))


def _log_span(ax: Any, values: list[float], min_ratio: float = 16.0) -> None:
    """Give a log axis at least ``min_ratio`` of range so flat data looks flat."""
    lo, hi = min(values), max(values)
    mid = (lo * hi) ** 0.5
    half = max((hi / lo) ** 0.5, min_ratio**0.5) * 1.15
    ax.set_ylim(mid / half, mid * half)


def _log_rms_axis(ax: Any, ylabel: str) -> None:
    """Log y axis for RMS values, grid, label, and at least 16x of range (flat data looks flat)."""
    from matplotlib.ticker import LogFormatterSciNotation

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatterSciNotation())
    ax.grid(alpha=0.3, which="both")
    ax.set_ylabel(ylabel, fontsize=8)
    vals = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
    if vals:
        _log_span(ax, vals)


def _expected_line(ax: Any, xs: list[float], y0: float, cell: Any) -> None:
    """The expected slope through the first point, dashed (a range: both ends)."""
    if cell is None or y0 <= 0:
        return
    ends = cell if isinstance(cell, tuple) else (cell,)
    x = np.asarray(xs, float)
    for e in ends:
        if e is not None:
            ax.plot(x, y0 * (x / x[0]) ** e, ls="--", lw=1, color="0.45")


def plot(results: dict[str, Any], axis: str, path: Path, title: str) -> None:
    """A block of panels per fixed width (axis "depth") or fixed depth (axis "width")."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x_key, fixed_key, xlabel, fixed_name, symbol = AXES[axis]
    table = results["slopes" if axis == "depth" else "width_slopes"]
    expected = results["expected"][axis]["cells"] or {}
    tolerance = results["max_slope"]
    steps = results["steps"]
    names = list(QUANTITIES)
    ncols = (len(names) + len(PROFILES) + 1) // 2
    fig, axes = plt.subplots(2 * len(table), ncols, figsize=(2.9 * ncols, 5.6 * len(table)), squeeze=False)
    step_colors = plt.cm.viridis([i / max(steps, 1) for i in range(steps + 1)])
    for block, (fixed, slopes) in enumerate(table.items()):
        shapes = sorted((s for s in results["shapes"] if str(s[fixed_key]) == fixed), key=lambda s: s[x_key])
        xs = [s[x_key] for s in shapes]
        panels = axes[2 * block : 2 * block + 2].ravel()
        for ax, name in zip(panels, names):
            q = QUANTITIES[name]
            for t in [0] if q.step == 0 else range(1, steps + 1):
                ys = [value(s["records"][t], q) for s in shapes]
                if all(y is not None and y > 0 for y in ys):
                    ax.plot(xs, ys, marker="o", ms=3, color=step_colors[t], label=f"step {t}")
            first = value(shapes[0]["records"][q.step], q) if shapes else None
            cell = expected.get(name)
            _expected_line(ax, xs, first or 0.0, cell)
            bad = name in slopes and breaks(slopes[name], cell, tolerance)
            measured = f"{slopes[name]:+.2f}" if name in slopes else "n/a"
            ax.set_title(
                f"{name}: slope {measured}\nexpected {describe(cell)}" + ("  BREAKS" if bad else ""),
                fontsize=8,
                color="C3" if bad else "black",
            )
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel(xlabel, fontsize=8)
            _log_rms_axis(ax, f"RMS ({fixed_name} {fixed})")
        depth_colors = plt.cm.plasma([i / max(len(shapes) - 1, 1) * 0.85 for i in range(len(shapes))])
        for ax, (field, label) in zip(panels[len(names) :], PROFILES):
            for shape, color in zip(shapes, depth_colors):
                per_layer = shape["records"][-1][field]
                rel = [(i + 1) / len(per_layer) for i in range(len(per_layer))]
                ax.plot(rel, per_layer, color=color, label=f"{symbol}={shape[x_key]}")
            ax.set_title(f"{label}\nper layer at step {steps}", fontsize=8)
            ax.set_xlabel("layer index / L", fontsize=8)
            _log_rms_axis(ax, f"RMS ({fixed_name} {fixed})")
            ax.legend(fontsize=6, ncol=2)
        for ax in panels[len(names) + len(PROFILES) :]:
            ax.axis("off")
        panels[0].legend(fontsize=6)
        panels[len(names) - 1].legend(fontsize=6, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

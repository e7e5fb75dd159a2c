"""The figure of ``eval dynamics``: each quantity against training step, one curve per depth
(a row per family, eval transfer's labels and order; a cooldown branch's rows from its source run
dashed, up to its branch step, marked), and the measured exponents against depth next to the expected ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.dynamics import QUANTITIES
from eval.plots import save_figure

LABELS = {
    "update_ratio": "RMS(update)/RMS(weight), hidden matrices",
    "update_rms": "RMS(update), hidden matrices",
    "branch_rms": "RMS(branch output x multiplier)",
    "residual_rms": "RMS(residual stream)",
}


def _curve(ax: Any, s: dict[str, list], color: Any, label: str) -> bool:
    """One depth's curve: a cooldown branch's steps from its source run (``source_steps``) dashed,
    its own solid from the last of them on. True where it drew source rows."""
    source = set(s.get("source_steps", []))
    points = list(zip(s["steps"], s["values"]))
    before = [p for p in points if p[0] in source]
    own = [p for p in points if p[0] not in source]
    if before:
        ax.plot(*zip(*before), color=color, ls="--", alpha=0.7, label=None if own else label)
    if own:
        ax.plot(*zip(*(before[-1:] + own)), color=color, label=label)
    return bool(before)


def plot(result: dict[str, Any], stem: Path, dpi: int = 150) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    families = result["families"]
    fig, axes = plt.subplots(len(families) + 1, len(QUANTITIES), figsize=(4.2 * len(QUANTITIES), 3.4 * (len(families) + 1)),
                             squeeze=False)  # fmt: skip
    for row, family in zip(axes, families):
        series = result["series"][family]
        depths = sorted(series[QUANTITIES[0]], key=int)
        colors = plt.cm.plasma(np.linspace(0.0, 0.85, max(len(depths), 1)))
        branch_step = result.get("branch_steps", {}).get(family)
        for ax, quantity in zip(row, QUANTITIES):
            inherited = False
            for depth, color in zip(depths, colors):
                inherited |= _curve(ax, series[quantity][depth], color, f"L={depth}")
            if branch_step is not None:  # a cooldown branch: its rows up to here are its source run's
                ax.axvline(branch_step, color="0.5", ls=":", lw=1,
                           label=f"branch step {branch_step}" + (": dashed = source run's rows" if inherited else ""))  # fmt: skip
            ax.set_yscale("log")
            ax.set_title(f"{family}\n{LABELS[quantity]}", fontsize=7)  # a long family label on its own line
            ax.set_xlabel("step")
            ax.grid(alpha=0.3, which="both")
        row[0].legend(fontsize=7)
    bottom = axes[-1]
    for ax, quantity in zip(bottom, QUANTITIES):
        for i, family in enumerate(families):
            rows = [e for e in result["exponents"] if e["family"] == family and e["quantity"] == quantity]
            xs = [e["fraction"] + 0.02 * i for e in rows if e["value"] is not None]
            ys = [e["value"] for e in rows if e["value"] is not None]
            err = [[e["value"] - e["ci"][0] for e in rows if e["value"] is not None],
                   [e["ci"][1] - e["value"] for e in rows if e["value"] is not None]]  # fmt: skip
            ax.errorbar(xs, ys, yerr=err, fmt="o", color=f"C{i}", capsize=3, label=f"{family} measured")
            expected = [e["expected"] for e in rows if e["expected"] is not None]
            if expected:
                ax.axhline(expected[0], color=f"C{i}", ls="--", lw=1, label=f"{family} expected {expected[0]:+.2f}")
        ax.set_title(f"exponent vs depth: {quantity}", fontsize=8)
        ax.set_xlabel("fraction of training")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    written = save_figure(fig, stem.parent, stem.name, dpi)
    plt.close(fig)
    return written

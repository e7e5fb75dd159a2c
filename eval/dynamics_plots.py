"""The figures of ``eval dynamics``: each quantity against training step, one curve per depth
(a row per family, eval transfer's labels and order; a cooldown branch's rows from its source run
dashed, up to its branch step, marked), and the measured exponents against depth next to the
expected ones; with many families, the step panels over several figures (:func:`plot`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.dynamics import QUANTITIES
from eval.plots import FAMILY_MARKERS, LEGEND_FONT_PT, save_figure, wrap_to_width

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


PANEL_W, PANEL_H = 4.2, 3.4  # inches per panel
TITLE_PT = 7


def _offsets(n: int, fractions: list[float]) -> list[float]:
    """x offsets of ``n`` families' points at each fraction, centred on it and kept inside the
    gap to the next fraction whatever ``n``."""
    gaps = [b - a for a, b in zip(fractions, fractions[1:])]
    step = min(0.02, 0.8 * min(gaps or [0.5]) / max(n, 1))
    return [(i - (n - 1) / 2) * step for i in range(n)]


FAMILIES_PER_FIGURE = 4  # rows of step panels in one figure: 4 x 3.4 in (a screen, a page); more: one figure each 4


def plot(result: dict[str, Any], stem: Path, dpi: int = 150) -> list[Path]:
    """``stem.{png,pdf}``: with up to :data:`FAMILIES_PER_FIGURE` families, a row of step panels
    per family and the exponent panels under them. With more, ``stem`` holds the exponent panels
    (every family) and ``stem_steps_<i>.{png,pdf}`` the step panels, that many families each, in
    the report's order: a figure stays readable (before, 16 families drew one figure 58 inches tall)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = result["families"]
    if len(families) <= FAMILIES_PER_FIGURE:
        pages = [(stem, families, True)]
    else:
        chunks = [families[i : i + FAMILIES_PER_FIGURE] for i in range(0, len(families), FAMILIES_PER_FIGURE)]
        pages = [(stem, [], True)] + [
            (stem.with_name(f"{stem.name}_steps_{i}"), chunk, False) for i, chunk in enumerate(chunks, start=1)
        ]
    written: list[Path] = []
    for page_stem, shown, exponents in pages:
        fig = _figure(result, shown, exponents)
        try:
            written += save_figure(fig, page_stem.parent, page_stem.name, dpi)
        finally:
            plt.close(fig)
    return written


def _figure(result: dict[str, Any], shown: list[str], exponents: bool) -> Any:
    """A row of step panels per family of ``shown``; then, with ``exponents``, the exponent panels
    of every family with one legend under them."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D

    families = result["families"]
    n_rows = len(shown) + int(exponents)
    fig, axes = plt.subplots(n_rows, len(QUANTITIES), figsize=(PANEL_W * len(QUANTITIES), PANEL_H * n_rows),
                             squeeze=False)  # fmt: skip
    title_pt = PANEL_W * 72 * 0.75  # about the axes' width (the panel less its tick labels)
    for row, family in zip(axes, shown):
        series = result["series"][family]
        depths = sorted(series[QUANTITIES[0]], key=int)
        colors = plt.cm.plasma(np.linspace(0.0, 0.85, max(len(depths), 1)))
        branch_step = result.get("branch_steps", {}).get(family)
        name = wrap_to_width(family, title_pt, size=TITLE_PT, indent="  ")  # a long label over lines, in its panel
        for ax, quantity in zip(row, QUANTITIES):
            inherited = False
            for depth, color in zip(depths, colors):
                inherited |= _curve(ax, series[quantity][depth], color, f"L={depth}")
            if branch_step is not None:  # a cooldown branch: its rows up to here are its source run's
                ax.axvline(branch_step, color="0.5", ls=":", lw=1,
                           label=f"branch step {branch_step}" + (": dashed = source run's rows" if inherited else ""))  # fmt: skip
            ax.set_yscale("log")
            ax.set_title(f"{name}\n{LABELS[quantity]}", fontsize=TITLE_PT)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3, which="both")
        row[0].legend(fontsize=7)
    if not exponents:
        fig.tight_layout()
        return fig
    offsets = _offsets(len(families), list(result["fractions"]))
    style = [(f"C{i % 10}", FAMILY_MARKERS[i % len(FAMILY_MARKERS)]) for i in range(len(families))]
    for ax, quantity in zip(axes[-1], QUANTITIES):
        for family, dx, (color, marker) in zip(families, offsets, style):
            rows = [e for e in result["exponents"] if e["family"] == family and e["quantity"] == quantity]
            rows = [e for e in rows if e["value"] is not None]
            if rows:
                err = [[e["value"] - e["ci"][0] for e in rows], [e["ci"][1] - e["value"] for e in rows]]
                ax.errorbar([e["fraction"] + dx for e in rows], [e["value"] for e in rows], yerr=err, fmt=marker,
                            color=color, capsize=3)  # fmt: skip
            expected = [e["expected"] for e in result["exponents"] if e["family"] == family
                        and e["quantity"] == quantity and e["expected"] is not None]  # fmt: skip
            if expected:
                ax.axhline(expected[0], color=color, ls="--", lw=1)
        ax.set_title(f"exponent vs depth: {quantity}", fontsize=8)
        ax.set_xlabel("fraction of training")
        ax.grid(alpha=0.3)
    # one legend for the exponent panels, under them: a family's marker and colour (measured, 95% CI)
    # and its dashed line (expected), each label wrapped to its column
    width_pt = fig.get_figwidth() * 72 - 12
    ncol = max(1, min(len(families), int(width_pt // 300)))
    text_pt = width_pt / ncol - 5 * LEGEND_FONT_PT
    legend = fig.legend(
        [Line2D([], [], color=c, marker=m, ls="--", lw=1) for c, m in style],
        [wrap_to_width(f, text_pt, indent="  ") for f in families],
        loc="lower center", ncols=ncol, fontsize=LEGEND_FONT_PT, frameon=False, alignment="left",
        title="exponents: measured (markers, 95% CI) and expected at init / first steps (dashed), per family",
        title_fontsize=LEGEND_FONT_PT,
    )  # fmt: skip
    height = legend.get_window_extent(fig.canvas.get_renderer()).height / fig.dpi + 0.1
    fig.set_size_inches(fig.get_figwidth(), PANEL_H * n_rows + height)
    fig.tight_layout(rect=(0, height / (PANEL_H * n_rows + height), 1, 1))
    return fig

"""Figures of the transfer analysis, built on bare ``matplotlib.figure.Figure`` objects (Agg, no pyplot state).

Every function returns its figures so tests can count curves and labels instead of
trusting that a file exists; :func:`save_figure` writes PNG and PDF atomically.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from eval.curves import Family  # noqa: E402
from eval.outputs import atomic_write_bytes, number  # noqa: E402
from eval.transfer import DepthResult, FractionResult, TransferAnalysis, fraction_label  # noqa: E402

LOSS_LABEL = "validation loss (nats/token)"
LR_LABEL = r"$\log_2$ learning rate"
DEPTH_CMAP = "viridis"
FAMILY_CMAP = "tab10"
DIVERGED_Y = 0.96  # axes-fraction height of the first row of "diverged" markers
DIVERGED_STEP = 0.035  # and the step down per depth


def panel_title(family: str, fraction: str, width: int = 48) -> str:
    """``family — fraction`` on one line, or the family's label wrapped at its commas over
    lines of at most ``width`` characters: a family with two swept keys (fig10's
    ``depth_mup (model.block=linear1, model.linear1_phi=abs)``) ran over its neighbour's title."""
    title = f"{family} — {fraction}"
    if len(title) <= width:
        return title
    lines, line = [], ""
    for part in [p + "," for p in family.split(",")[:-1]] + [family.split(",")[-1] + f" — {fraction}"]:
        if line and len(line) + len(part) > width:
            lines.append(line.rstrip())
            line = part.lstrip()
        else:
            line += part
    return "\n".join([*lines, line.strip()])


def depth_colors(depths: list[int]) -> dict[int, tuple]:
    """A fixed colour per depth (sequential colormap, shallow = dark), shared by every panel."""
    cmap = colormaps[DEPTH_CMAP]
    depths = sorted(set(depths))
    if len(depths) == 1:
        return {depths[0]: cmap(0.35)}
    return {d: cmap(0.85 * i / (len(depths) - 1)) for i, d in enumerate(depths)}


FAMILY_MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # 7 shapes beside 10 colours: 70 families before a repeat


def family_colors(families: list[Family]) -> dict[Family, tuple]:
    cmap = colormaps[FAMILY_CMAP]
    return {f: cmap(i % cmap.N) for i, f in enumerate(families)}


def family_markers(families: list[Family]) -> dict[Family, str]:
    """A marker shape per family beside its colour, so families past the tenth (and lines that
    lie on each other: equal optima) stay apart."""
    return {f: FAMILY_MARKERS[i % len(FAMILY_MARKERS)] for i, f in enumerate(families)}


LEGEND_FONT_PT = 8.33  # matplotlib's "small" at the default 10 pt


def text_width_pt(text: str, size: float = LEGEND_FONT_PT) -> float:
    """Width in points of the widest line of ``text`` as matplotlib renders it (Agg, default font)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer = RendererAgg(1, 1, 72)
    prop = FontProperties(size=size)
    return max(renderer.get_text_width_height_descent(line, prop, ismath=False)[0] for line in text.split("\n"))


def wrap_to_width(text: str, width_pt: float, size: float = LEGEND_FONT_PT, indent: str = "") -> str:
    """``text`` broken after its commas, then its spaces, into lines no wider than ``width_pt``
    (a single word wider than that keeps its own line); continuation lines start with ``indent``."""
    parts = re.findall(r"[^ ,]*,? ?|.+", text)
    lines, line = [], ""
    for part in (p for p in parts if p):
        if line.strip() and text_width_pt((line + part).rstrip(), size) > width_pt:
            lines.append(line.rstrip())
            line = indent + part
        else:
            line += part
    lines.append(line.rstrip())
    return "\n".join(lines)


def depth_label(d: DepthResult) -> str:
    return f"L={d.depth}" + (" (base)" if d.is_base else "")


def _basin_ylim(results: list[FractionResult]) -> tuple[float, float] | None:
    """A y-range that shows every curve's basin: from the lowest loss up to the highest loss within two usable
    points of any curve's best point, so extreme losses far from the optimum are clipped."""
    lows, highs = [], []
    for r in results:
        for d in r.depths:
            mean = d.fit.means
            usable = np.flatnonzero(np.isfinite(mean))
            if not usable.size:
                continue
            j = int(np.argmin(mean[usable]))
            near = usable[max(0, j - 2) : j + 3]
            lows.append(float(np.nanmin(mean)))
            highs.append(float(np.max(mean[near])))
            if d.optimum.found:
                lows.append(d.optimum.loss)
    if not lows:
        return None
    lo, hi = min(lows), max(highs)
    span = hi - lo if hi > lo else max(abs(lo) * 0.02, 0.05)
    return lo - 0.08 * span, hi + 0.12 * span


LOSS_PANEL = (4.6, 3.5)  # inches per panel of the loss figure
LOSS_PANELS_PER_ROW = 4  # families side by side while their panels fit in this many columns


def plot_loss_vs_lr(analysis: TransferAnalysis) -> Figure:
    """Fig. 10 style: loss vs log2 LR, one curve per depth; one panel per family and eval fraction.

    Each family's fractions sit side by side, and families side by side while their panels fit
    in :data:`LOSS_PANELS_PER_ROW` columns, in rows of equal length (9 families at one fraction:
    3 x 3; 12 at two: 6 rows of 2 families); one legend of depths and markers, shared by every
    panel, stands right of the top row."""
    families, fractions = analysis.families, analysis.fractions
    per_family = max(1, len(fractions))
    most = max(1, LOSS_PANELS_PER_ROW // per_family)
    nrows = max(1, -(-len(families) // most))
    per_row = max(1, -(-len(families) // nrows))
    ncols = per_row * per_family
    fig = Figure(figsize=(LOSS_PANEL[0] * ncols + 1.9, LOSS_PANEL[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    colors = depth_colors([d.depth for r in analysis.results for d in r.depths] or [1])
    for i, family in enumerate(families):
        row = [analysis.result(family, f) for f in fractions]
        ylim = _basin_ylim(row)
        for j, result in enumerate(row):
            _loss_panel(axes[i // per_row][(i % per_row) * per_family + j], result, colors, ylim)
    for k in range(len(families) * per_family, nrows * ncols):  # the last row's empty places
        fig.delaxes(axes[k // ncols][k % ncols])
    if families:
        _depth_legend(fig, analysis, colors)
    else:
        axes[0][0].text(0.5, 0.5, "no runs to analyse", ha="center", va="center", transform=axes[0][0].transAxes)
        axes[0][0].set_axis_off()
    fig.suptitle("Loss vs learning rate across depth (seed mean; band = ±1 seed std)", fontsize="medium")
    return fig


def _loss_panel(ax: Axes, result: FractionResult, colors: dict[int, tuple], ylim: tuple[float, float] | None) -> None:
    ax.set_title(panel_title(result.family.label, fraction_label(result.fraction)), fontsize="medium")
    ax.set_xlabel(LR_LABEL)
    ax.set_ylabel(LOSS_LABEL)
    ax.grid(True, alpha=0.3, linewidth=0.6)
    top = blended_transform_factory(ax.transData, ax.transAxes)
    depth_rank = {dep: k for k, dep in enumerate(sorted(colors))}
    any_curve = False
    for d in result.depths:
        c, color = d.curve, colors[d.depth]
        usable = c.usable
        x, y, std = c.log2_lr[usable], d.fit.means[usable], c.std_loss[usable]  # the means the fit used
        if x.size:
            any_curve = True
            ax.plot(x, y, "-o", color=color, ms=3.5, lw=1.5, label=depth_label(d), gid=f"curve:L={d.depth}")
            band = np.isfinite(std)
            if band.any():
                ax.fill_between(x[band], (y - std)[band], (y + std)[band], color=color, alpha=0.15, lw=0)
        if d.optimum.fit is not None:
            xx = np.linspace(d.optimum.fit.lo, d.optimum.fit.hi, 50)
            ax.plot(xx, d.optimum.fit(xx), ":", color=color, lw=1.2, label="_fit", gid=f"fit:L={d.depth}")
        if d.optimum.found:
            quad = d.optimum.method == "quadratic"
            ax.plot(
                [d.optimum.log2_lr],
                [d.optimum.loss],
                marker="*" if quad else "D",
                ms=13 if quad else 7,
                mfc=color if d.optimum.edge is None else "white",
                mec="black" if d.optimum.edge is None else color,
                mew=0.8 if d.optimum.edge is None else 1.8,
                ls="none",
                zorder=5,
                label="_optimum",
                gid=f"optimum:L={d.depth}",
            )
        diverged = ~usable & (c.n_diverged > 0)
        if diverged.any():
            rank = depth_rank[d.depth]  # stagger the rows of markers so depths do not hide each other
            ax.plot(
                c.log2_lr[diverged],
                np.full(int(diverged.sum()), DIVERGED_Y - DIVERGED_STEP * rank),
                "x",
                color=color,
                ms=7,
                mew=1.8,
                transform=top,
                clip_on=False,
                label="_diverged",
                gid=f"diverged:L={d.depth}",
            )
    if ylim is not None:
        ax.set_ylim(*ylim)
    if not any_curve:
        ax.text(
            0.5,
            0.5,
            "no usable point\n(all runs diverged or missing)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )


def _depth_legend(fig: Figure, analysis: TransferAnalysis, colors: dict[int, tuple]) -> None:
    depths: dict[int, str] = {}
    for r in analysis.results:
        for d in r.depths:
            depths.setdefault(d.depth, depth_label(d))
    handles: list[Line2D] = [
        Line2D([], [], color=colors[dep], marker="o", ms=3.5, label=depths[dep]) for dep in sorted(depths)
    ]
    handles += [
        Line2D([], [], marker="*", ms=11, mfc="grey", mec="black", ls="none", label="optimum (quadratic fit)"),
        Line2D([], [], marker="D", ms=6, mfc="grey", mec="black", ls="none", label="optimum (best grid point)"),
        Line2D([], [], marker="D", ms=6, mfc="white", mec="black", ls="none", label="optimum at edge (bound)"),
        Line2D([], [], marker="x", ms=7, mew=1.8, color="grey", ls="none", label="diverged (not fitted)"),
    ]
    fig.legend(handles=handles, loc="outside right upper", fontsize="small", frameon=False)


PANEL_WIDTH = 5.2  # inches per fraction panel of the optimum figure
PANEL_HEIGHT = 4.4  # its height without the legend
LEGEND_COLUMN_PT = 300  # at least this wide per legend column (points)


def plot_optimal_lr_vs_depth(analysis: TransferAnalysis) -> Figure:
    """Optimal log2 LR against depth (log2 axis), one line per family with its fitted slope and CI; one panel per
    fraction; one legend for all panels under them, each family's label wrapped to the legend's column width and
    its slope at every fraction, the figure as tall as the legend needs (any number of families)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fractions = analysis.fractions
    ncols = max(1, len(fractions))
    fig = Figure(figsize=(PANEL_WIDTH * ncols, PANEL_HEIGHT), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    colors, markers = family_colors(analysis.families), family_markers(analysis.families)
    all_depths = sorted({d.depth for r in analysis.results for d in r.depths})
    for ax, fraction in zip(axes, fractions):
        for family in analysis.families:
            _optimum_series(ax, analysis.result(family, fraction), colors[family], markers[family])
        ax.set_xscale("log", base=2)
        if all_depths:
            ax.set_xticks(all_depths, [str(d) for d in all_depths])
            ax.minorticks_off()
        ax.set_xlabel("depth L (number of layers, log2 scale)")
        ax.set_ylabel(r"optimal $\log_2$ learning rate")
        ax.set_title(f"Optimal LR vs depth — {fraction_label(fraction)}", fontsize="medium")
        ax.grid(True, alpha=0.3, linewidth=0.6)
        if not ax.get_legend_handles_labels()[0]:
            ax.text(0.5, 0.5, "no optimum found", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(
        "Does the optimal LR move with depth? (slope 0 = perfect transfer; bars = 95% seed-bootstrap CI)",
        fontsize="medium",
        wrap=True,
    )
    _family_legend(fig, analysis, colors, markers)
    return fig


def _family_legend(fig: Figure, analysis: TransferAnalysis, colors: dict, markers: dict) -> None:
    """One legend under the panels: per family with an optimum, its line and marker, its label and its
    slope per fraction; in as many columns as the figure's width holds, text wrapped to a column."""
    shown = [
        f for f in analysis.families
        if any(d.optimum.found for x in analysis.fractions for d in analysis.result(f, x).depths)
    ]  # fmt: skip
    if not shown:
        return
    width_pt = fig.get_figwidth() * 72 - 12
    ncol = max(1, min(len(shown), int(width_pt // LEGEND_COLUMN_PT)))
    text_pt = width_pt / ncol - (2.0 + 0.8 + (2.0 if ncol > 1 else 0.0)) * LEGEND_FONT_PT  # handle, pad, spacing
    texts = [_family_legend_text(analysis, f, text_pt) for f in shown]
    handles = [Line2D([], [], color=colors[f], marker=markers[f], lw=1.5, ms=6) for f in shown]
    legend = fig.legend(
        handles, texts, loc="outside lower center", ncols=ncol, fontsize=LEGEND_FONT_PT, frameon=False,
        labelspacing=0.6, alignment="left",
    )  # fmt: skip
    # the panels keep their height and the figure grows by the legend's (constrained layout would
    # otherwise squeeze the axes to nothing: "constrained_layout not applied")
    box = legend.get_window_extent(fig.canvas.get_renderer())
    fig.set_size_inches(
        max(fig.get_figwidth(), box.width / fig.dpi + 0.2), PANEL_HEIGHT + box.height / fig.dpi + 0.15, forward=False
    )


def _family_legend_text(analysis: TransferAnalysis, family: Family, width_pt: float) -> str:
    """``label`` wrapped, then its slope: on the same line for one fraction, else one line per fraction."""
    results = [analysis.result(family, x) for x in analysis.fractions]
    if len(results) == 1:
        return wrap_to_width(slope_legend(results[0]).replace(":\n", ": "), width_pt, indent="  ")
    lines = [wrap_to_width(family.label, width_pt, indent="  ")]
    lines += [
        wrap_to_width(f"  {fraction_label(r.fraction)}: {_slope_text(r)}", width_pt, indent="    ") for r in results
    ]
    return "\n".join(lines)


LEGEND_WRAP = 24  # a family label longer than this puts its slope on a second line of its line's label


def _slope_text(result: FractionResult) -> str:
    s = result.slope
    if not s.available:
        return "no slope"
    ci = f" [95% CI {number(s.ci_low, '+.3f')}, {number(s.ci_high, '+.3f')}]" if s.ci_available else " (no CI)"
    return f"slope {number(s.slope, '+.3f')}" + ci


def slope_legend(result: FractionResult) -> str:
    sep = ":\n" if len(result.family.label) > LEGEND_WRAP else ": "
    return f"{result.family.label}{sep}{_slope_text(result)}"


def _optimum_series(ax: Axes, result: FractionResult, color: tuple, marker: str = "o") -> None:
    found = [d for d in result.depths if d.optimum.found]
    if not found:
        return
    x = np.array([d.depth for d in found], dtype=float)
    y = np.array([d.optimum.log2_lr for d in found])
    ax.plot(
        x,
        y,
        "-",
        marker=marker,
        color=color,
        lw=1.5,
        ms=6,
        label=slope_legend(result),
        gid=f"optima:{result.family.label}",
    )
    cis = [d.opt_ci for d in found]
    if all(ci is not None for ci in cis):
        lo = np.array([y[k] - cis[k][0] for k in range(len(found))]).clip(min=0)
        hi = np.array([cis[k][1] - y[k] for k in range(len(found))]).clip(min=0)
        ax.errorbar(x, y, yerr=[lo, hi], fmt="none", ecolor=color, elinewidth=1.0, capsize=3)
    edge = np.array([d.optimum.edge is not None for d in found])
    if edge.any():
        ax.plot(x[edge], y[edge], marker, mfc="white", mec=color, ms=8, mew=1.5, label="_edge")
    if result.slope.available:
        xx = np.array([x.min(), x.max()])
        ax.plot(
            xx, result.slope.intercept + result.slope.slope * np.log2(xx), "--", color=color, lw=1.0, label="_slope_fit"
        )


def plot_block_multiplier_heatmaps(analysis: TransferAnalysis) -> list[tuple[str, Figure]]:
    """Loss over LR x block multiplier, one figure per (family without the multiplier) x fraction, one panel per depth.

    Returns ``(file stem, figure)`` pairs; empty when no family group varies ``parametrization.block_multiplier``.
    """
    groups: dict[tuple, list[Family]] = {}
    for family in analysis.families:
        key = tuple((k, v) for k, v in family.keys if k != "block_multiplier")
        groups.setdefault(key, []).append(family)
    out: list[tuple[str, Figure]] = []
    for members in groups.values():
        if len(members) < 2:
            continue
        members = sorted(members, key=lambda f: float(f.value("block_multiplier")))
        label = _group_label(members[0])
        for fraction in analysis.fractions:
            fig = _heatmap_figure(analysis, members, fraction, label)
            out.append((f"fig_heatmap_{_slug(label)}_f{fraction:g}", fig))
    return out


def _group_label(family: Family) -> str:
    extras = [f"{k}={v}" for k, v in family.keys if k in family.shown and k not in ("preset", "block_multiplier")]
    return family.preset + (f" ({', '.join(extras)})" if extras else "")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", text).strip("_")


def _heatmap_figure(analysis: TransferAnalysis, members: list[Family], fraction: float, label: str) -> Figure:
    results = [analysis.result(f, fraction) for f in members]
    multipliers = [float(f.value("block_multiplier")) for f in members]
    depths = sorted({d.depth for r in results for d in r.depths})
    ncols = max(1, len(depths))
    fig = Figure(figsize=(4.6 * ncols, 0.45 * len(multipliers) + 2.8), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    grids = {}
    for depth in depths:
        lrs = sorted({float(x) for r in results for d in r.depths if d.depth == depth for x in d.curve.log2_lr})
        values = np.full((len(multipliers), len(lrs)), np.nan)
        diverged = np.zeros_like(values, dtype=bool)
        for i, r in enumerate(results):
            d = next((d for d in r.depths if d.depth == depth), None)
            if d is None:
                continue
            for k, x in enumerate(d.curve.log2_lr):
                col = lrs.index(float(x))
                values[i, col] = d.curve.mean_loss[k]
                diverged[i, col] = not d.curve.usable[k] and d.curve.n_diverged[k] > 0
        grids[depth] = (lrs, values, diverged)
    cmap = colormaps["viridis_r"].with_extremes(bad="lightgrey", over="#f7f7f7")
    for ax, depth in zip(axes, depths):
        lrs, values, diverged = grids[depth]
        finite = values[np.isfinite(values)]
        # per-depth colour range: losses differ across depth, the question is where the basin lies at each one
        vmin = float(finite.min()) if finite.size else 0.0
        vmax = float(np.percentile(finite, 60)) if finite.size else 1.0
        vmax = vmax if vmax > vmin else vmin + 1e-3
        image = ax.imshow(
            values, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", origin="lower", interpolation="nearest"
        )
        fig.colorbar(image, ax=ax, label=LOSS_LABEL, extend="max", shrink=0.9, pad=0.02)
        ax.set_xticks(range(len(lrs)), [number(x, ".1f") for x in lrs], rotation=90, fontsize="x-small")
        ax.set_yticks(range(len(multipliers)), [f"{m:g}" for m in multipliers], fontsize="small")
        ax.set_xlabel(LR_LABEL)
        ax.set_ylabel("block multiplier a")
        ax.set_title(f"L={depth}", fontsize="medium")
        for i, k in zip(*np.nonzero(diverged)):
            ax.text(k, i, "×", ha="center", va="center", color="black", fontsize="small")
        if finite.size:
            i, k = np.unravel_index(np.nanargmin(values), values.shape)
            ax.plot([k], [i], marker="*", ms=12, mfc="white", mec="black", ls="none", label="_best")
    if not depths:
        axes[0].text(0.5, 0.5, "no runs", ha="center", va="center", transform=axes[0].transAxes)
    fig.suptitle(
        f"{label} — {fraction_label(fraction)}: loss over LR × block multiplier "
        "(★ best cell, × diverged, grey = no run, pale = above colour range)",
        fontsize="medium",
    )
    return fig


def save_figure(fig: Figure, out_dir: Path, stem: str, dpi: int = 150) -> list[Path]:
    """Write ``stem.png`` (``dpi``) and ``stem.pdf`` into ``out_dir`` atomically; return the paths."""
    paths = []
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=dpi)  # constrained layout already fits titles and outside legends
        path = Path(out_dir) / f"{stem}.{ext}"
        atomic_write_bytes(path, buf.getvalue())
        paths.append(path)
    return paths

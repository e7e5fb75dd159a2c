"""The machine- and human-readable outputs of the transfer analysis: JSON, CSV, Markdown and HTML.

Markdown and HTML are rendered from one list of blocks so the two reports cannot disagree;
the HTML embeds its figures as base64 PNG so it is a single self-contained file.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.optimum import Optimum
from eval.outputs import atomic_write_text, number, write_json
from eval.results import sources_list
from eval.transfer import DepthPrediction, DepthResult, FractionResult, PresetGap, TransferAnalysis, fraction_label

MAX_REASONS_SHOWN = 50


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _pow2(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else 2.0**x


# ---------------------------------------------------------------- JSON


def optimum_dict(opt: Optimum, ci: tuple[float, float] | None, lr: float | None = None) -> dict[str, Any]:
    """``lr``: the optimum's LR as the table had it, where it is a grid point (else ``2^log2_lr``)."""
    fit = opt.fit
    return {
        "log2_lr": _num(opt.log2_lr),
        "lr": _pow2(opt.log2_lr) if lr is None else _num(lr),
        "loss": _num(opt.loss),
        "method": opt.method,
        "edge": opt.edge,
        "edge_reason": opt.edge_reason,
        "fallback": opt.fallback,
        "note": opt.note,
        "ci_log2_lr": list(ci) if ci else None,
        "fit": None
        if fit is None
        else {"a": fit.a, "b": fit.b, "c": fit.c, "x0": fit.x0, "lo": fit.lo, "hi": fit.hi, "n_points": fit.n_points},
    }


def depth_dict(d: DepthResult) -> dict[str, Any]:
    c = d.curve
    g_x, g_loss, g_std, g_n = d.best_grid
    smin, smax = d.seed_counts
    return {
        "depth": d.depth,
        "is_base": d.is_base,
        "n_lr_tried": d.n_lr_tried,
        "n_lr_usable": d.n_lr_usable,
        "n_lr_diverged": d.n_lr_diverged,
        "seeds_min": smin,
        "seeds_max": smax,
        "optimum": optimum_dict(d.optimum, d.opt_ci, d.optimum_lr),
        "best_grid": {
            "log2_lr": _num(g_x),
            "lr": _num(d.best_grid_lr),
            "loss": _num(g_loss),
            "std": _num(g_std),
            "n_seeds": g_n,
        },
        "regret": {
            "value": _num(d.regret),
            "ci": list(d.regret_ci) if d.regret_ci else None,
            "status": d.regret_status,
            "method": d.regret_method,
            "loss_at_base_lr": _num(d.loss_at_base_lr),
            "note": d.regret_note,
        },
        "curve": [
            {
                "log2_lr": float(c.log2_lr[i]),
                "lr": float(c.lr[i]),  # as the table had it
                "mean_loss": _num(float(c.mean_loss[i])),
                "fit_loss": _num(float(d.fit.means[i])),  # the mean the optimum is fitted to (seed model)
                "std_loss": _num(float(c.std_loss[i])),
                "n_seeds": int(c.n_seeds[i]),
                "n_diverged": int(c.n_diverged[i]),
                "n_missing": int(c.n_missing[i]),
            }
            for i in range(c.log2_lr.size)
        ],
        "diverged_run_ids": c.diverged_run_ids,
        "missing_run_ids": c.missing_run_ids,
    }


def result_dict(r: FractionResult) -> dict[str, Any]:
    s = r.slope
    return {
        "family": r.family.label,
        "preset": r.family.preset,
        "keys": r.family.key_dict(),
        "fraction": r.fraction,
        "fraction_label": fraction_label(r.fraction),
        "base_depth": r.base_depth,
        "base_source": r.base_source,
        "slope": {
            "value": _num(s.slope),
            "intercept": _num(s.intercept),
            "stderr": _num(s.stderr),
            "n_depths": s.n_depths,
            "ci_low": _num(s.ci_low),
            "ci_high": _num(s.ci_high),
            "ci_contains_zero": s.ci_contains_zero,
            "tolerance": r.slope_tolerance,
            "ci_inside_tolerance": (-r.slope_tolerance <= s.ci_low and s.ci_high <= r.slope_tolerance)
            if s.ci_available
            else None,
            "verdict": r.verdict,
            "permitted_drift_octaves": _num(r.permitted_drift),
            "ci_note": s.ci_note,
            "note": s.note,
        },
        "drift_log2_lr": _num(r.drift),
        "drift_ci": list(r.drift_ci) if r.drift_ci else None,
        "max_regret": _num(r.max_regret),
        "max_regret_text": r.max_regret_text(),
        "regret_diverged_at": r.regret_diverged_at,
        "regret_not_measured_at": r.regret_not_measured_at,
        "bootstrap_samples": r.n_boot,
        "depths": [depth_dict(d) for d in r.depths],
    }


EDGE_MARK = "†"
CUT_MARK = "‡"
HEADLINE_LEGEND = (
    f"{EDGE_MARK}: rests on an optimum at the edge of the usable LRs (not bracketed: that number is a bound, not an "
    f"estimate). {CUT_MARK}: rests on an optimum whose interval is cut by the LRs tried (it ends on the last usable "
    "LR with nothing usable past it: the CI understates the uncertainty on that side). The report's warnings "
    "name the optima; `transfer.json` lists them under each headline row's `marks`."
)


def optimum_marks(depths: list[DepthResult], prefix: str = "") -> dict[str, list[str]]:
    """The optima behind a number that are bounds (``edge``: at the edge of the usable LRs) or
    whose intervals are cut by the LRs tried (``cut``: :attr:`DepthResult.open_ends`), as
    ``L=32 low`` (with ``prefix``, e.g. a family label, in front)."""
    seen: list[DepthResult] = []
    for d in depths:
        if d is not None and d.optimum.found and all(d is not e for e in seen):
            seen.append(d)
    return {
        "edge": [f"{prefix}L={d.depth} {d.optimum.edge}" for d in seen if d.optimum.edge is not None],
        "cut": [label for d in seen for label in d.open_labels(prefix)],
    }


def mark_text(marks: dict[str, list[str]] | None) -> str:
    """`` †``, `` ‡``, `` †‡`` or nothing: what a headline number rests on (:data:`HEADLINE_LEGEND`)."""
    if not marks:
        return ""
    text = (EDGE_MARK if marks.get("edge") else "") + (CUT_MARK if marks.get("cut") else "")
    return " " + text if text else ""


def slope_marks(r: FractionResult) -> dict[str, list[str]]:
    """What the slope and drift rest on: every depth's optimum."""
    return optimum_marks([d for d in r.depths if d.optimum.found]) if r.slope.available else optimum_marks([])


def regret_marks(r: FractionResult, d: DepthResult | None) -> dict[str, list[str]]:
    """What a regret at ``d`` rests on: the base depth's optimum (the LR reused) and ``d``'s own."""
    return optimum_marks([r.base, d]) if d is not None and d.regret_status == "ok" else optimum_marks([])


def max_regret_marks(r: FractionResult) -> dict[str, list[str]]:
    if not math.isfinite(r.max_regret):
        return optimum_marks([])
    worst = max((d for d in r.depths if math.isfinite(d.regret) and not d.is_base), key=lambda d: d.regret)
    return regret_marks(r, worst)


def gap_marks(analysis: TransferAnalysis, g: PresetGap) -> dict[str, list[str]]:
    """What a loss gap rests on: both families' optima at its depth."""
    marks = optimum_marks([])
    for family in (g.reference, g.family):
        r = analysis.result(family, g.fraction)
        d = next((d for d in r.depths if d.depth == g.depth), None)
        for kind, items in optimum_marks([d], f"{family.label} ").items():
            marks[kind] += items
    return marks


def verdict_text(tolerance: float | None) -> str:
    """What the verdict column means, with the tolerance used."""
    tol = "the tolerance" if tolerance is None else f"±{tolerance:g} octave of optimal LR per doubling of depth"
    return (
        f"Verdict (per family and fraction, from the slope's 95% CI and an equivalence bound of {tol}, "
        '`--slope-tolerance`): "consistent with transfer" when the whole CI lies within the bound (every slope it '
        "allows moves the optimum less than that; the Summary table gives the drift it permits over the depths "
        'swept); else "does not transfer" when the CI excludes 0; else "inconclusive": the CI contains 0 but also '
        "slopes beyond the bound, so containing 0 alone does not show transfer. A marked verdict rests on the "
        "marked optima."
    )


def headline_legend(rows: list[dict[str, Any]]) -> str | None:
    """The legend of the marks, when a headline row carries one."""
    kinds = ("slope", "deepest_opt", "regret_at_deepest", "loss_gap")
    marked = any(mark_text((h.get("marks") or {}).get(k)) for h in rows for k in kinds)
    return HEADLINE_LEGEND if marked else None


def headline_rows(analysis: TransferAnalysis) -> list[dict[str, Any]]:
    """The three answers per family and fraction: where the optimum goes (slope), what reusing
    the base depth's LR costs at the deepest depth (regret), and the loss gap to the reference
    family there; each with its CI (None where there is none), and ``marks``: per number, the
    optima it rests on that are bounds (``edge``) or have intervals cut by the LRs tried
    (``cut``), empty lists where none (:func:`optimum_marks`)."""
    rows = []
    for r in analysis.results:
        found = [d for d in r.depths if d.optimum.found]
        deepest = found[-1] if found else None
        # the base depth's regret is 0 by construction: as the deepest depth's it would read "no cost"
        regret_at = deepest if deepest is not None and not deepest.is_base else None
        gap = next((g for g in analysis.gaps if g.family == r.family and g.fraction == r.fraction), None)
        s = r.slope
        rows.append(
            {
                "family": r.family.label,
                "fraction": r.fraction,
                "fraction_label": fraction_label(r.fraction),
                "slope": _num(s.slope),
                "slope_ci": [s.ci_low, s.ci_high] if s.ci_available else None,
                "verdict": r.verdict,
                "slope_tolerance": r.slope_tolerance,
                "deepest_depth": deepest.depth if deepest else None,
                "deepest_opt_log2_lr": _num(deepest.optimum.log2_lr) if deepest else None,
                "deepest_opt_ci": list(deepest.opt_ci) if deepest and deepest.opt_ci else None,
                "regret_at_deepest": _num(regret_at.regret) if regret_at else None,
                "regret_at_deepest_ci": list(regret_at.regret_ci) if regret_at and regret_at.regret_ci else None,
                "gap_reference": gap.reference.label if gap else None,
                "gap_depth": gap.depth if gap else None,
                "loss_gap": _num(gap.gap) if gap else None,
                "loss_gap_ci": list(gap.ci) if gap and gap.ci else None,
                "regret_at_deepest_status": (
                    "base_depth"
                    if deepest is not None and deepest.is_base
                    else regret_at.regret_status
                    if regret_at
                    else None
                ),
                "marks": {
                    "slope": slope_marks(r),
                    "deepest_opt": optimum_marks([deepest]),
                    "regret_at_deepest": regret_marks(r, regret_at),
                    "loss_gap": gap_marks(analysis, gap) if gap else optimum_marks([]),
                },
            }
        )
    return rows


PREDICTION_NOTE = (
    "The optimal log2 LR at each target depth from the least-squares line of the per-depth optima against "
    "log2 depth; 95% bootstrap interval (the line refitted to every draw of the optima, plus their scatter about "
    "the line beyond seed noise). Regret: the loss expected at that depth from training with the base depth's "
    "optimal LR instead, curvature x (difference in log2 LR)^2 with the curvature of the quadratic fit at the "
    "nearest swept depth. A line through optima that do not lie on one (e.g. a step between two depths) "
    "predicts poorly; the intervals cover seed noise and that scatter, not a trend that bends beyond the sweep."
)


def prediction_dict(p: DepthPrediction) -> dict[str, Any]:
    return {
        "family": p.family.label,
        "fraction": p.fraction,
        "fraction_label": fraction_label(p.fraction),
        "target_depth": p.depth,
        "log2_lr": _num(p.log2_lr),
        "lr": _pow2(p.log2_lr),
        "ci_log2_lr": list(p.ci) if p.ci else None,
        "base_depth": p.base_depth,
        "base_log2_lr": _num(p.base_log2_lr),
        "regret_of_base_lr": _num(p.regret),
        "regret_ci": list(p.regret_ci) if p.regret_ci else None,
        "curvature_depth": p.curvature_depth,
        "lack_of_fit_sd": _num(p.lack_of_fit_sd),
        "extrapolated": p.extrapolated,
        "note": p.note,
        "measured": p.measured,  # the target depth was swept: its own optimum and regret follow
        "measured_log2_lr": _num(p.measured_log2_lr),
        "measured_ci_log2_lr": list(p.measured_ci) if p.measured_ci else None,
        "measured_method": p.measured_method,
        "measured_regret": _num(p.measured_regret),
        "measured_regret_ci": list(p.measured_regret_ci) if p.measured_regret_ci else None,
        "line_minus_measured_log2_lr": _num(p.log2_lr - p.measured_log2_lr),
        "measured_note": p.measured_note,
    }


def prediction_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    header = [
        "family", "fraction", "target L", "predicted optimal log2 LR [95% CI]", "LR",
        "base L optimum (log2)", "regret of the base LR there (nats) [95% CI]",
        "measured there: optimal log2 LR [95% CI]; regret [95% CI]", "note",
    ]  # fmt: skip
    cells = [
        [
            h["family"],
            h["fraction_label"],
            str(h["target_depth"]) + (" (extrapolated)" if h["extrapolated"] else ""),
            _with_ci(h["log2_lr"], h["ci_log2_lr"], ".2f"),
            "—" if h["lr"] is None else number(h["lr"], ".3g"),
            "—" if h["base_log2_lr"] is None else f"{number(h['base_log2_lr'], '.2f')} (L={h['base_depth']})",
            _with_ci(h["regret_of_base_lr"], h["regret_ci"], ".4f"),
            _measured_cell(h),
            h["note"] or "—",
        ]
        for h in rows
    ]
    return header, cells


def _measured_cell(h: dict[str, Any]) -> str:
    """The swept target depth's own optimum and regret ('not swept' otherwise)."""
    if not h["measured"]:
        return "not swept"
    if h["measured_log2_lr"] is None:
        return h["measured_note"]
    text = f"{_with_ci(h['measured_log2_lr'], h['measured_ci_log2_lr'], '.2f')} ({h['measured_method']})"
    regret = _with_ci(h["measured_regret"], h["measured_regret_ci"], ".4f")
    return text + "; " + (regret if h["measured_regret"] is not None else h["measured_note"] or "—")


def _with_ci(value: Any, ci: Any, fmt: str) -> str:
    if value is None:
        return "—"
    return number(value, fmt) + (f" [{number(ci[0], fmt)}, {number(ci[1], fmt)}]" if ci else " (no CI)")


def headline_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the headline table (shared by report.md and the demo's summary)."""
    tolerances = sorted({h["slope_tolerance"] for h in rows if h.get("slope_tolerance") is not None})
    verdict = "verdict (slope CI vs ±" + (f"{tolerances[0]:g})" if len(tolerances) == 1 else "tolerance)")
    header = [
        "family", "fraction", "slope of optimal log2 LR vs log2 L [95% CI]", verdict, "deepest L",
        "optimal log2 LR there [95% CI]", "regret there (nats) [95% CI]", "loss gap vs reference [95% CI]",
    ]  # fmt: skip

    def marked(h: dict[str, Any], value: Any, ci: Any, fmt: str, kind: str) -> str:
        return _with_ci(value, ci, fmt) + (mark_text((h.get("marks") or {}).get(kind)) if value is not None else "")

    cells = []
    for h in rows:
        regret = marked(h, h["regret_at_deepest"], h["regret_at_deepest_ci"], ".4f", "regret_at_deepest")
        if h["regret_at_deepest"] is None and h.get("regret_at_deepest_status") == "diverged":
            regret = "diverged (the base LR)"
        if h.get("regret_at_deepest_status") == "base_depth":
            regret = "— (the base depth)"
        cells.append(
            [
                h["family"],
                h["fraction_label"],
                marked(h, h["slope"], h["slope_ci"], "+.3f", "slope"),
                (h["verdict"] + mark_text((h.get("marks") or {}).get("slope")))
                if h.get("verdict")
                else ("no verdict (no CI)" if "verdict" in h else "—"),
                str(h["deepest_depth"]) if h["deepest_depth"] is not None else "—",
                marked(h, h["deepest_opt_log2_lr"], h["deepest_opt_ci"], ".2f", "deepest_opt"),
                regret,
                (
                    f"{marked(h, h['loss_gap'], h['loss_gap_ci'], '+.4f', 'loss_gap')} (− {h['gap_reference']})"
                    if h["gap_reference"]
                    else "reference"
                ),
            ]
        )
    return header, cells


def gap_dict(g: PresetGap) -> dict[str, Any]:
    return {
        "fraction": g.fraction,
        "fraction_label": fraction_label(g.fraction),
        "reference": g.reference.label,
        "family": g.family.label,
        "depth": g.depth,
        "loss_gap": _num(g.gap),
        "ci": list(g.ci) if g.ci else None,
        "ci_contains_zero": (g.ci[0] <= 0.0 <= g.ci[1]) if g.ci else None,
        "note": g.note,
    }


def analysis_dict(analysis: TransferAnalysis, figures: list[str]) -> dict[str, Any]:
    cs = analysis.curveset
    return {
        "tool": "python -m eval transfer",
        "source": analysis.source,
        "sources": [{"file": file, "runs": runs} for file, runs in analysis.sources],
        "settings": analysis.settings,
        "fractions": analysis.fractions,
        "counts": {"runs": cs.n_trained, "pending_runs": cs.n_pending_runs, "shared_base_rows": cs.n_shared},
        "families": [{"label": f.label, "preset": f.preset, "keys": f.key_dict()} for f in analysis.families],
        "results": [result_dict(r) for r in analysis.results],
        "preset_gaps": [gap_dict(g) for g in analysis.gaps],
        "headline": headline_rows(analysis),
        "goals": analysis.goals,
        "goal_context": analysis.goal_context,
        "target_depth_predictions": [prediction_dict(p) for p in analysis.predictions],
        "warnings": [{"where": n.where, "message": n.message} for n in analysis.notes],
        "divergence_reasons": analysis.divergence_reasons,
        "figures": figures,
    }


def write_transfer_json(path: Path, analysis: TransferAnalysis, figures: list[str]) -> None:
    write_json(path, analysis_dict(analysis, figures))


# ---------------------------------------------------------------- CSV


def csv_rows(analysis: TransferAnalysis) -> tuple[list[str], list[dict[str, Any]]]:
    """One row per family x fraction x depth; family-level numbers repeated on each row for easy filtering."""
    key_names = sorted({k for f in analysis.families for k, _ in f.keys if k != "preset"})
    header = [
        "family", "preset", *key_names, "fraction", "depth", "is_base", "base_depth",
        "n_lr_tried", "n_lr_usable", "n_lr_diverged", "seeds_min", "seeds_max",
        "opt_log2_lr", "opt_lr", "opt_loss", "opt_method", "opt_edge", "opt_edge_reason", "opt_ci_low", "opt_ci_high",
        "best_grid_log2_lr", "best_grid_loss", "best_grid_loss_std", "best_grid_seeds",
        "loss_at_base_lr", "regret", "regret_ci_low", "regret_ci_high", "regret_status", "regret_method",
        "slope", "slope_ci_low", "slope_ci_high", "drift_log2_lr", "opt_note",
    ]  # fmt: skip
    rows = []
    for r in analysis.results:
        for d in r.depths:
            g_x, g_loss, g_std, g_n = d.best_grid
            smin, smax = d.seed_counts
            keys = r.family.key_dict()
            rows.append(
                {
                    "family": r.family.label,
                    "preset": r.family.preset,
                    **{k: keys.get(k, "") for k in key_names},
                    "fraction": r.fraction,
                    "depth": d.depth,
                    "is_base": d.is_base,
                    "base_depth": r.base_depth,
                    "n_lr_tried": d.n_lr_tried,
                    "n_lr_usable": d.n_lr_usable,
                    "n_lr_diverged": d.n_lr_diverged,
                    "seeds_min": smin,
                    "seeds_max": smax,
                    "opt_log2_lr": d.optimum.log2_lr,
                    "opt_lr": d.optimum_lr,
                    "opt_loss": d.optimum.loss,
                    "opt_method": d.optimum.method,
                    "opt_edge": d.optimum.edge,
                    "opt_edge_reason": d.optimum.edge_reason,
                    "opt_ci_low": d.opt_ci[0] if d.opt_ci else None,
                    "opt_ci_high": d.opt_ci[1] if d.opt_ci else None,
                    "best_grid_log2_lr": g_x,
                    "best_grid_loss": g_loss,
                    "best_grid_loss_std": g_std,
                    "best_grid_seeds": g_n,
                    "loss_at_base_lr": d.loss_at_base_lr,
                    "regret": d.regret,
                    "regret_ci_low": d.regret_ci[0] if d.regret_ci else None,
                    "regret_ci_high": d.regret_ci[1] if d.regret_ci else None,
                    "regret_status": d.regret_status,
                    "regret_method": d.regret_method,
                    "slope": r.slope.slope,
                    "slope_ci_low": r.slope.ci_low,
                    "slope_ci_high": r.slope.ci_high,
                    "drift_log2_lr": r.drift,
                    "opt_note": d.optimum.note,
                }
            )
    return header, rows


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else repr(value)
    return str(value)


def write_transfer_csv(path: Path, analysis: TransferAnalysis) -> None:
    header, rows = csv_rows(analysis)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_csv_cell(row[h]) for h in header])
    atomic_write_text(path, buf.getvalue())


# ---------------------------------------------------------------- Markdown / HTML


@dataclass
class Block:
    """One element of the report: ``h1``/``h2``/``h3``/``p`` (text), ``list`` (items), ``table`` (header, rows), ``img`` (file)."""

    kind: str
    text: str = ""
    items: list[str] | None = None
    header: list[str] | None = None
    rows: list[list[str]] | None = None


def _f(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None or not math.isfinite(x) else number(x, spec)


def _slope_text(r: FractionResult) -> str:
    s = r.slope
    if not s.available:
        return "n/a"
    ci = f" [{number(s.ci_low, '+.3f')}, {number(s.ci_high, '+.3f')}]" if s.ci_available else " (no CI)"
    return f"{number(s.slope, '+.3f')}{ci}"


def _flags(d: DepthResult) -> str:
    o = d.optimum
    flags = []
    if o.edge:
        flags.append(f"edge-{o.edge} ({o.edge_reason})")
    if o.fallback and o.fallback != "edge":
        flags.append(o.fallback.replace("_", " "))
    if not o.found:
        flags.append("no usable point")
    if d.n_lr_diverged:
        flags.append(f"{d.n_lr_diverged} LR diverged")
    return ", ".join(flags) or "—"


def _regret_text(d: DepthResult) -> str:
    if d.regret_status == "ok":
        ci = f" [{number(d.regret_ci[0], '.4f')}, {number(d.regret_ci[1], '.4f')}]" if d.regret_ci else ""
        return f"{number(d.regret, '.4f')}{ci} ({d.regret_method})"
    return d.regret_status.replace("_", " ")


def _sources_text(analysis: TransferAnalysis) -> str:
    """``Source: `results.csv``` or, for tables read as one, each with the runs it gave."""
    if len(analysis.sources) < 2:
        return f"Source: `{analysis.source}`"
    return f"Sources, read as one table: {sources_list(analysis.sources, '`')}"


def _runs_text(cs) -> str:
    """Run counts as ``launch status`` counts them: a shared base-depth run once."""
    text = f"{cs.n_trained} runs ({cs.n_pending_runs} pending, ignored)"
    if cs.n_shared:
        text += (
            f"; {cs.n_shared} base-depth rows are runs of another preset standing for this one "
            "(at L = L0 every preset is the same model), counted once"
        )
    return text


def build_blocks(analysis: TransferAnalysis, figures: list[tuple[str, str]]) -> list[Block]:
    """The report's content. ``figures`` holds (PNG file name relative to the report, caption)."""
    st = analysis.settings
    cs = analysis.curveset
    head_header, head_rows = headline_table(headline_rows(analysis))
    blocks = [
        Block("h1", "Learning-rate transfer across depth"),
        Block(
            "p",
            f"{_sources_text(analysis)} — {_runs_text(cs)}; "
            f"fractions: {', '.join(fraction_label(f) for f in analysis.fractions)}; quadratic fit window ±{st['fit_window']} "
            f"usable LR point(s); {st['bootstrap_samples']} seed-bootstrap samples (RNG seed {st['bootstrap_seed']}, "
            f"{st['ci_level']:g}% percentile CI); diverged runs "
            + (
                "contribute evals reached before diverging."
                if st["use_evals_before_divergence"]
                else "count at their curve's worst finished loss where other seeds of their LR finished; "
                "LRs where every seed diverged are left out of the fits."
            ),
        ),
    ]
    if analysis.goals:
        from eval.goals import goal_table

        g_header, g_rows = goal_table(analysis.goals)
        met = sum(1 for g in analysis.goals if g["met"])
        blocks += [
            Block("h2", "Goals"),
            *(Block("p", line) for line in analysis.goal_context),
            Block("p", f"{met} of {len(analysis.goals)} goals met (intervals: the headline's 95% bootstrap CIs)."),
            Block("table", header=g_header, rows=g_rows),
        ]
    legend = headline_legend(headline_rows(analysis))
    blocks += [
        Block("h2", "Headline"),
        Block("table", header=head_header, rows=head_rows),
        *([Block("p", legend)] if legend else []),
        Block("p", verdict_text(st.get("slope_tolerance"))),
    ]
    if analysis.predictions:
        p_header, p_rows = prediction_table([prediction_dict(p) for p in analysis.predictions])
        blocks += [
            Block("h2", "Predicted optimal LR at target depths"),
            Block("p", PREDICTION_NOTE),
            Block("table", header=p_header, rows=p_rows),
        ]
    blocks += [
        Block("h2", "Summary"),
        Block(
            "p",
            "Slope: least-squares slope of optimal log2 LR against log2 depth (0 = the optimum does not move). "
            "Drift: max − min of optimal log2 LR across depths. Max regret: the worst loss increase from using the "
            "base depth's optimal LR at another depth instead of that depth's own optimum; \"diverged at L=…\" "
            "where that LR diverged (no number: the transfer failed there), and the depths where no regret could "
            f"be measured are named. {EDGE_MARK} and {CUT_MARK} as in the headline.",
        ),
        Block(
            "table",
            header=[
                "family",
                "fraction",
                "base L",
                "depths with optimum",
                "slope [95% CI]",
                "CI contains 0",
                "verdict",
                "drift (log2 LR) [95% CI]",
                "max regret",
            ],  # fmt: skip
            rows=[
                [
                    r.family.label,
                    fraction_label(r.fraction),
                    str(r.base_depth) if r.base_depth is not None else "—",
                    f"{r.slope.n_depths} of {len(r.depths)}",
                    _slope_text(r) + (mark_text(slope_marks(r)) if r.slope.available else ""),
                    {True: "yes", False: "no", None: "—"}[r.slope.ci_contains_zero],
                    (
                        r.verdict
                        + mark_text(slope_marks(r))
                        + f" (±{r.slope_tolerance:g} per doubling: ≤ {_f(r.permitted_drift, '.2f')} octave over the depths)"
                    )
                    if r.verdict
                    else "no verdict (no CI)",
                    _f(r.drift)
                    + (f" [{number(r.drift_ci[0])}, {number(r.drift_ci[1])}]" if r.drift_ci else "")
                    + (mark_text(slope_marks(r)) if math.isfinite(r.drift) else ""),
                    r.max_regret_text() + mark_text(max_regret_marks(r)),
                ]
                for r in analysis.results
            ],
        ),
    ]
    if analysis.gaps:
        blocks += [
            Block("h2", "Loss gap between families at the deepest depth"),
            Block(
                "p",
                "Best loss of a family minus the reference's best loss, at the deepest depth both reached (negative: "
                "lower loss than the reference). The reference is the first family that differs only in the preset "
                "(one per block type, width, ...). The CI resamples each family's seeds independently. "
                f"{EDGE_MARK} and {CUT_MARK} as in the headline.",
            ),
            Block(
                "table",
                header=["family − reference", "fraction", "L", "loss gap [95% CI]", "CI contains 0"],
                rows=[
                    [
                        f"{g.family.label} − {g.reference.label}",
                        fraction_label(g.fraction),
                        str(g.depth),
                        number(g.gap, "+.4f")
                        + (f" [{number(g.ci[0], '+.4f')}, {number(g.ci[1], '+.4f')}]" if g.ci else " (no CI)")
                        + mark_text(gap_marks(analysis, g)),
                        ("yes" if g.ci[0] <= 0 <= g.ci[1] else "no") if g.ci else "—",
                    ]
                    for g in analysis.gaps
                ],
            ),
        ]
    if figures:
        blocks.append(Block("h2", "Figures"))
        for name, caption in figures:
            blocks += [Block("img", text=name, items=[caption]), Block("p", caption)]
    blocks.append(Block("h2", "Per-depth optima and regrets"))
    for r in analysis.results:
        blocks.append(
            Block("h3", f"{r.family.label} — {fraction_label(r.fraction)} (base L={r.base_depth}, {r.base_source})")
        )
        blocks.append(
            Block(
                "table",
                header=[
                    "L",
                    "LRs usable/tried",
                    "seeds",
                    "best grid lr (log2)",
                    "loss ± std",
                    "optimal lr (log2) [95% CI]",
                    "optimal lr",
                    "method",
                    "flags",
                    "loss at base lr",
                    "regret [95% CI]",
                ],  # fmt: skip
                rows=[_depth_row(d) for d in r.depths],
            )
        )
    blocks.append(Block("h2", f"Warnings ({len(analysis.notes)})"))
    blocks.append(Block("list", items=[str(n) for n in analysis.notes] or ["none"]))
    if analysis.divergence_reasons:
        reasons = sorted(analysis.divergence_reasons.items())
        items = [f"{rid}: {why}" for rid, why in reasons[:MAX_REASONS_SHOWN]]
        if len(reasons) > MAX_REASONS_SHOWN:
            items.append(f"... {len(reasons) - MAX_REASONS_SHOWN} more in transfer.json")
        blocks += [Block("h2", "Diverged runs (summary.json reasons)"), Block("list", items=items)]
    blocks += [
        Block("h2", "How to read this"),
        Block(
            "list",
            items=[
                "Loss-vs-LR panels: one curve per depth (darker = shallower); ★ marks a quadratic-fit optimum, ◆ a "
                "best-grid-point fallback, a hollow ◆ an optimum on the edge of the usable LRs (only a bound); × at the "
                "top marks LRs where every seed diverged (excluded from fits). Curves that share their minimum's x "
                "position across depth mean the LR transfers.",
                "Optimal-LR-vs-depth: the optimum transfers when its slope against log2 depth is within the "
                'tolerance: the verdict says "consistent with transfer" only when the slope\'s whole CI lies inside '
                "±tolerance. A CI that contains 0 but reaches beyond the tolerance (e.g. [-1.131, +0.159]) is "
                '"inconclusive", not transfer; a CI that excludes 0 (beyond the tolerance) "does not transfer". A '
                "negative slope means deeper models want smaller LRs. Error bars and the slope CI cover seed noise "
                "only, not grid resolution.",
                "Regret: loss at depth L when reusing the base depth's optimal LR, minus the best loss at L (the fitted "
                "minimum when the quadratic is accepted, else the best grid mean). It is a loss minus the curve's "
                "minimum, so it is ≥ 0 in every bootstrap draw and its interval cannot reach below 0: a lower end "
                'printed 0.000 means "consistent with no regret" (the interval\'s upper end bounds the cost), not a '
                "measured regret of 0.",
            ],
        ),
    ]
    return blocks


def _depth_row(d: DepthResult) -> list[str]:
    g_x, g_loss, g_std, g_n = d.best_grid
    smin, smax = d.seed_counts
    o = d.optimum
    ci = f" [{number(d.opt_ci[0], '.2f')}, {number(d.opt_ci[1], '.2f')}]" if d.opt_ci else ""
    return [
        str(d.depth) + (" (base)" if d.is_base else ""),
        f"{d.n_lr_usable}/{d.n_lr_tried}",
        str(smin) if smin == smax else f"{smin}–{smax}",
        _f(g_x, ".2f"),
        f"{_f(g_loss, '.4f')} ± {_f(g_std, '.4f')} (n={g_n})",
        _f(o.log2_lr, ".3f") + ci,
        _f(d.optimum_lr, ".4g"),
        o.method,
        _flags(d),
        _f(d.loss_at_base_lr, ".4f"),
        _regret_text(d),
    ]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            out.append("#" * int(b.kind[1]) + " " + b.text)
        elif b.kind == "p":
            out.append(b.text)
        elif b.kind == "list":
            out.append("\n".join(f"- {item}" for item in b.items or []))
        elif b.kind == "table":
            lines = ["| " + " | ".join(_md_cell(h) for h in b.header or []) + " |"]
            lines.append("|" + "---|" * len(b.header or []))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows or []]
            out.append("\n".join(lines))
        elif b.kind == "img":
            out.append(f"![{(b.items or [''])[0]}]({b.text})")
    return "\n\n".join(out) + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1400px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
img { max-width: 100%; border: 1px solid #eee; }
code { background: #f6f6f6; padding: 0 0.2em; }
li { margin: 0.2em 0; }
"""


def _inline(text: str) -> str:
    """HTML-escape and turn `code` spans into <code>."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def render_html(blocks: list[Block], base_dir: Path, title: str = "LR transfer across depth") -> str:
    """Self-contained HTML: images are read from ``base_dir`` and embedded as base64 PNG."""
    body: list[str] = []
    for b in blocks:
        if b.kind in ("h1", "h2", "h3"):
            body.append(f"<{b.kind}>{_inline(b.text)}</{b.kind}>")
        elif b.kind == "p":
            body.append(f"<p>{_inline(b.text)}</p>")
        elif b.kind == "list":
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items or []) + "</ul>")
        elif b.kind == "table":
            head = "".join(f"<th>{_inline(h)}</th>" for h in b.header or [])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in b.rows or [])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif b.kind == "img":
            path = base_dir / b.text
            alt = html.escape((b.items or [""])[0], quote=True)
            if path.is_file():
                data = base64.b64encode(path.read_bytes()).decode("ascii")
                body.append(f'<img src="data:image/png;base64,{data}" alt="{alt}">')
            else:
                body.append(f"<p>(figure {html.escape(b.text)} missing)</p>")
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def write_reports(out_dir: Path, analysis: TransferAnalysis, figures: list[tuple[str, str]]) -> None:
    blocks = build_blocks(analysis, figures)
    atomic_write_text(out_dir / "report.md", render_markdown(blocks))
    atomic_write_text(out_dir / "report.html", render_html(blocks, out_dir))

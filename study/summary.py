"""The study's headline: what was spent and why the study stopped, each goal against its target,
best loss per depth and arm, its rise with depth, the LR optima, and ``eval transfer``'s
headline rows; as ``demo_summary.json`` and ``demo_summary.md``."""

from __future__ import annotations

from typing import Any, NamedTuple

from study.corpus import DEFAULT_CORPUS, corpus_attribution, corpus_label
from study.planner import DIVERGED, Outcome, Point, Stop
from study.spec import Study
from study.sweep import AdaptiveSweep

STOP_TEXT = {
    "goals_met": "every goal met",
    "budget_spent": "STOPPED ON BUDGET: the run budget is spent and not every goal is met",
    "unreachable": "stopped: the goals not met cannot be narrowed by more runs (no interval, no optimum, or an interval cut by the LRs tried with nothing left to try past it)",
    "no_goals": "no goals in the study file: the fixed design (scan, refine, seeds) only",
    "running": "not finished",
}


def arm_label(preset: str, variant: str) -> str:
    return f"{preset} ({variant})" if variant else preset


def spent(results: dict[Point, Outcome], sweep: AdaptiveSweep, s: Study) -> dict[str, Any]:
    """Runs trained (each run once: a base-depth run shared by every preset counts once, as
    ``launch status`` counts it), how many the sequential phase added, and their time."""
    base = s.depths[0]
    sequential = [p for p in results if p.seed >= sweep.planner.default_seeds(p.depth)]
    return {
        "runs": len(results),
        "runs_at_shared_base": sum(1 for p in results if p.depth == base),
        "runs_sequential": len(sequential),
        "runs_diverged": sum(1 for o in results.values() if o == DIVERGED),
        "budget_runs": s.run_budget,
        "run_core_minutes": sweep.run_seconds() / 60,
    }


def stop_lines(stop: Stop, used: dict[str, Any], s: Study) -> list[str]:
    """What the summary and the report say above the goals: why the study stopped and what it spent."""
    base = (
        f"{used['runs']} runs trained ({used['runs_at_shared_base']} at the base depth L={s.depths[0]}, "
        f"one model for every preset, each counted once; {used['runs_sequential']} added by the sequential phase; "
        f"{used['runs_diverged']} diverged), {used['run_core_minutes']:.1f} core-minutes of runs"
    )
    if s.goals:
        per = f", {s.budget_runs} per variant" if len(s.variants) > 1 else ""
        base += f"; budget {s.run_budget} runs{per}"
        if used["runs"] > s.run_budget:
            base += " (the scan, refine and seed phases alone used more: the budget caps only the sequential phase)"
    return [f"**{STOP_TEXT[stop.reason]}.** " + base + "."]


def unreached(results: dict[Point, Outcome], sweep: AdaptiveSweep, s: Study) -> list[str]:
    """A line for each arm whose walk stopped short of the deepest depth: every run at a depth
    diverged or failed, so no LR window could be centred at the next one (the planner's chain
    ends there). Said, because the depths past it are simply absent from the sweep."""
    lines = []
    for variant in s.variants:
        for preset in s.presets:
            for depth, deeper in zip(s.depths, s.depths[1:]):
                if sweep.planner.best(preset, depth, results, variant) is not None:
                    continue
                owner = sweep.planner.owner(preset, depth)
                tried = sorted(
                    {p.log2_lr for p in results if (p.preset, p.depth, p.variant) == (owner, depth, variant)}
                )
                if tried:
                    lrs = ", ".join(f"2^{x:g}" for x in tried)
                    key = "base_lrs_log2" if depth == s.depths[0] else "window / step_log2"
                    lines.append(
                        f"**{arm_label(preset, variant)}: every run at L={depth} diverged or failed** (LRs tried: {lrs}), "
                        f"so no LR window could be centred at L={deeper}: L={deeper} and deeper were not trained "
                        f"(study {s.name!r}: its {key} reach no LR that trains at L={depth})."
                    )
                break
    return lines


class StudyStatus(NamedTuple):
    results: dict[Point, Outcome]  # the finished runs
    stop: Stop  # why the study stopped
    used: dict[str, Any]  # what it spent (:func:`spent`)
    lines: list[str]  # what the summary and the report say: the stop lines, then ``unreached``
    unreached: list[str]  # :func:`unreached`'s lines (the demo logs them too)


def study_status(sweep: AdaptiveSweep, s: Study) -> StudyStatus:
    """The finished results, why the study stopped, what it spent, and the lines that say so."""
    results = sweep.results()  # one read of every run's summary
    stop = sweep.planner.stop(results)
    used = spent(results, sweep, s)
    short = unreached(results, sweep, s)
    return StudyStatus(results, stop, used, stop_lines(stop, used, s) + short, short)


def headline(
    report: dict[str, Any], sweep: AdaptiveSweep, s: Study, status: StudyStatus | None = None
) -> dict[str, Any]:
    """Best end-of-training loss per depth per arm, its rise with depth, the LR optima, the
    goals and what was spent (``status``: :func:`study_status`, computed here if not given)."""
    out: dict[str, Any] = {"settings": {k: v for k, v in vars(s).items()}, "corpus": s.corpus, "presets": {}}
    results, stop, used, lines, _ = status or study_status(sweep, s)
    out["stop"] = {"reason": stop.reason, "text": STOP_TEXT[stop.reason]}
    out["spent"] = used
    out["goals"] = report.get("goals", [])
    out["stop_lines"] = lines
    deepest = s.depths[-1]
    for variant in s.variants:
        for preset in s.presets:
            means = {d: sweep.planner.means(preset, d, results, variant) for d in s.depths}
            best = {d: min(means[d].values(), default=None) for d in s.depths}
            opt = {d: sweep.planner.best(preset, d, results, variant) for d in s.depths}
            finite = [v for v in best.values() if v is not None]
            out["presets"][arm_label(preset, variant)] = {
                "best_end_loss": best,
                "best_lr_log2": opt,
                "loss_rise_deepest_minus_base": (best[deepest] - best[s.depths[0]])
                if None not in (best[deepest], best[s.depths[0]])
                else None,
                "loss_spread": (max(finite) - min(finite)) if finite else None,
            }
        sp, dm = (out["presets"].get(arm_label(p, variant)) for p in ("sp", "depth_mup"))
        if sp and dm and sp["best_end_loss"][deepest] is not None and dm["best_end_loss"][deepest] is not None:
            suffix = f"_{variant}" if variant else ""
            out[f"depth_mup_minus_sp_at_deepest{suffix}"] = dm["best_end_loss"][deepest] - sp["best_end_loss"][deepest]
    out["transfer_headline"] = report.get("headline", []) if isinstance(report, dict) else []
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table's lines."""
    return ["| " + " | ".join(header) + " |", "|---" * len(header) + "|", *("| " + " | ".join(r) + " |" for r in rows)]


def render_markdown(h: dict[str, Any], s: Study, minutes: float) -> str:
    from eval.goals import goal_table
    from eval.report import headline_legend, headline_table

    depths = s.depths
    corpus = h.get("corpus", DEFAULT_CORPUS)
    lines = [
        f"Depth transfer at {'GPU' if s.device == 'cuda' else 'CPU'} scale ({s.name} on {corpus_label(corpus)}: width {s.hidden_size}, {s.heads} heads, sequence "
        f"{s.seq_length}, batch {s.batch}, {s.steps} AdamW steps, warmup + cosine, BPE {s.vocab_size}; "
        f"{minutes:.1f} min wall in this invocation).",
        "",
        *h.get("stop_lines", []),
    ]
    if h.get("goals"):
        g_header, g_rows = goal_table(h["goals"])
        met = sum(1 for g in h["goals"] if g["met"])
        lines += [
            "",
            f"Goals ({met} of {len(h['goals'])} met; achieved = the 95% CIs of the transfer table below):",
            "",
            *_table(g_header, g_rows),
        ]
    lines += [
        "",
        "| preset | " + " | ".join(f"L={d}" for d in depths) + " | best loss L=" + f"{depths[-1]} - L={depths[0]} |",
        "|---" * (len(depths) + 2) + "|",
    ]
    for preset, row in h["presets"].items():
        cells = [
            f"{row['best_end_loss'][d]:.3f} (2^{row['best_lr_log2'][d]:g})"
            if row["best_end_loss"][d] is not None
            else "-"
            for d in depths
        ]
        rise = row["loss_rise_deepest_minus_base"]
        lines.append(f"| {preset} | " + " | ".join(cells) + (f" | {rise:+.3f} |" if rise is not None else " | - |"))
    lines += [
        "",
        "Cells: best end-of-training validation loss (nats; seeds that diverged where others finished counted as "
        "`eval transfer` counts them) and the grid LR that gave it. "
        f"At L={depths[0]} (= L0) every preset is the same model, trained once.",
    ]
    if s.custom_presets:  # the transfer table below names families by what results.csv records
        arms = "; ".join(
            f"{name} = parametrization.alpha={v['alpha']!r}, parametrization.gamma={v['gamma']!r}"
            for name, v in s.custom_presets.items()
        )
        lines.append(
            f"Custom arms (preset custom in results.csv; `eval transfer` names each family by its alpha and "
            f"gamma): {arms}."
        )
    for variant in s.variants:
        gap = h.get("depth_mup_minus_sp_at_deepest" + (f"_{variant}" if variant else ""))
        if gap is not None:
            where = f" ({variant})" if variant else ""
            lines.append(f"depth_mup minus sp at L={depths[-1]}{where}: {gap:+.3f} nats.")
    if h.get("transfer_headline"):
        header, rows = headline_table(h["transfer_headline"])
        legend = headline_legend(h["transfer_headline"])
        lines += [
            "",
            "Transfer (`eval transfer`: quadratic optima, 95% seed-bootstrap CIs; no CI where a cell has one seed):",
            "",
            *_table(header, rows),
            *([legend] if legend else []),
        ]
        if any(row["regret_at_deepest"] is None for row in h["transfer_headline"]):
            lines.append(
                "Regret —: not measured there; the report's warnings say why (usually the base depth's optimal LR lies "
                "outside the LRs tried at that depth; `eval transfer --target-depth` extrapolates it)."
            )
    lines.append(f"Corpus: {corpus_attribution(corpus)}.")
    return "\n".join(lines) + "\n"

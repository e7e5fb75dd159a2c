"""The study's headline: best loss per depth and arm, its rise with depth, the LR optima, and
``eval transfer``'s headline rows; as ``demo_summary.json`` and ``demo_summary.md``."""

from __future__ import annotations

from typing import Any

from study.corpus import DEFAULT_CORPUS, attribution
from study.spec import Study
from study.sweep import AdaptiveSweep


def arm_label(preset: str, variant: str) -> str:
    return f"{preset} ({variant})" if variant else preset


def headline(report: dict[str, Any], sweep: AdaptiveSweep, s: Study) -> dict[str, Any]:
    """Best end-of-training loss per depth per arm, its rise with depth, and the LR optima."""
    out: dict[str, Any] = {"settings": {k: v for k, v in vars(s).items()}, "presets": {}}
    results = sweep.results()  # one read of every run's summary
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


def render_markdown(h: dict[str, Any], s: Study, minutes: float) -> str:
    from eval.report import headline_table

    depths = s.depths
    lines = [
        f"Depth transfer at CPU scale ({s.name}: width {s.hidden_size}, {s.heads} heads, sequence "
        f"{s.seq_length}, batch {s.batch}, {s.steps} AdamW steps, warmup + cosine, BPE {s.vocab_size}; "
        f"{minutes:.1f} min wall).",
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
        "Cells: best end-of-training validation loss (nats) and the grid LR that gave it. "
        f"At L={depths[0]} (= L0) every preset is the same model, trained once.",
    ]
    for variant in s.variants:
        gap = h.get("depth_mup_minus_sp_at_deepest" + (f"_{variant}" if variant else ""))
        if gap is not None:
            where = f" ({variant})" if variant else ""
            lines.append(f"depth_mup minus sp at L={depths[-1]}{where}: {gap:+.3f} nats.")
    if h.get("transfer_headline"):
        header, rows = headline_table(h["transfer_headline"])
        lines += [
            "",
            "Transfer (`eval transfer`: quadratic optima, 95% seed-bootstrap CIs; no CI where a cell has one seed):",
            "",
            "| " + " | ".join(header) + " |",
            "|---" * len(header) + "|",
            *("| " + " | ".join(r) + " |" for r in rows),
        ]
    lines.append(f"Corpus: {attribution(DEFAULT_CORPUS)}.")
    return "\n".join(lines) + "\n"

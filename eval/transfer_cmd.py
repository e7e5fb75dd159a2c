"""``python -m eval transfer``: wire the command line to the analysis, the figures and the reports.

Exit codes: 0 done (warnings are in the report), 1 outputs written but a figure failed,
2 bad input (results.csv missing/empty/malformed, or an option that does not fit the sweep).
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from eval.outputs import number
from eval.seed_model import SEED_MODELS
from rundir.contract import ExitCode

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from eval.transfer import TransferAnalysis

HELP = "optimal LR per depth, its drift and slope across depth, and the transfer regret (TP-VI Fig. 10)"

FIGURE_CAPTIONS = {
    "fig_loss_vs_lr": "Loss vs log2 LR per depth, one panel per family and eval fraction.",
    "fig_optimal_lr_vs_depth": "Optimal log2 LR vs depth with least-squares slope and 95% seed-bootstrap CI.",
}


def _fraction(text: str) -> float | str:
    if text == "all":
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number (or 'all')") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def _tolerance(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def _goal(text: str) -> tuple[str, float]:
    from eval.goals import GOALS

    name, _, value = text.partition("=")
    if name not in GOALS:
        raise argparse.ArgumentTypeError(f"{text!r}: unknown goal {name!r}; the goals are {sorted(GOALS)}")
    try:
        target = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected GOAL=NUMBER") from None
    if not target > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the target must be > 0")
    return name, target


def where_condition(text: str) -> tuple[str, str]:
    """One `--where COLUMN=VALUE` (eval transfer, eval dynamics)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected COLUMN=VALUE, e.g. model.block=linear1")
    return key.strip(), value.strip()


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the runs and families compared, the same in ``eval transfer`` and
    ``eval dynamics`` (one parser, one meaning: ``eval.results.select_runs`` applies ``--where``,
    ``--depths`` and ``--shared-base``; ``--presets`` keeps those presets' families)."""
    parser.add_argument("--presets", nargs="+", metavar="P", help="only these parametrization presets")
    parser.add_argument(
        "--ignore-columns",
        nargs="+",
        default=[],
        metavar="COL",
        help="leave these columns of results.csv out (per-run records another tool writes, e.g. a wall time: every "
        "column besides the contract's is otherwise read as a swept setting that defines a family)",
    )
    parser.add_argument(
        "--where",
        nargs="+",
        type=where_condition,
        default=[],
        metavar="COLUMN=VALUE",
        help="only the rows whose column holds this value, e.g. model.block=linear1 or optimizer.min_lr_ratio=0.1: "
        "one variant of a sweep that swept several (each combination of the swept columns is otherwise its own family)",
    )
    parser.add_argument(
        "--depths",
        nargs="+",
        type=int,
        metavar="L",
        help="only these depths (e.g. leave the deepest out: eval transfer predicts it with --target-depth)",
    )
    parser.add_argument(
        "--shared-base",
        metavar="PRESET",
        help="use PRESET's runs at the base depth for presets that have none there (at L = L0 all presets "
        "are the same model, so a sweep may train it once)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from eval.transfer import DEFAULT_SLOPE_TOLERANCE

    parser.add_argument(
        "sweep_dir",
        nargs="+",
        metavar="SWEEP_DIR",
        help="sweep directory holding results.csv (or the CSV itself, its runs/ folder, or run directories of it: "
        "their rows only); several are read as one table (cooldowns "
        "from several branch steps, a stable sweep and its cooldowns, one sweep run on two clusters): each checked "
        "alone, a run ID in two of them refused unless its rows are the same",
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="output directory (created; files replaced atomically)"
    )
    parser.add_argument(
        "--fractions",
        nargs="+",
        type=_fraction,
        metavar="F",
        help="eval fractions to analyse, e.g. 0.5 1.0, or 'all' (default: 0.5 and 1.0 where recorded)",
    )
    parser.add_argument(
        "--base-depth",
        type=int,
        metavar="N",
        help="base depth L0 for the regret (default: parametrization.base_num_layers if all runs agree, else the smallest depth)",
    )
    add_selection_arguments(parser)
    parser.add_argument(
        "--fit-window",
        type=int,
        default=1,
        metavar="K",
        help="usable LR points on each side of the best one in the quadratic fit (default 1: three points)",
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, metavar="B", help="seed-bootstrap samples (0 = no CI; default 1000)"
    )
    parser.add_argument(
        "--bootstrap-seed", type=int, default=0, metavar="S", help="RNG seed of the bootstrap (default 0)"
    )
    parser.add_argument(
        "--seed-model",
        choices=SEED_MODELS,
        default="independent",
        help="independent (default): plain seed means per LR; additive: each seed's offset, shared by all its LRs, "
        "is removed first (narrower CIs when offsets dominate, wider when unstable LRs are noisy; eval/seed_model.py)",
    )
    parser.add_argument(
        "--slope-tolerance",
        type=_tolerance,
        default=DEFAULT_SLOPE_TOLERANCE,
        metavar="T",
        help="equivalence bound of the verdict, in octaves of optimal LR per doubling of depth: 'consistent with "
        "transfer' only when the slope's 95%% CI lies within +-T, 'does not transfer' when it excludes 0, else "
        f"'inconclusive' (default {DEFAULT_SLOPE_TOLERANCE:g}: 0.4 octave of drift from L=2 to L=32; docs/eval.md)",
    )
    parser.add_argument(
        "--use-evals-before-divergence",
        action="store_true",
        help="use evals a diverged run reached before diverging (default: a diverged seed counts at its curve's "
        "worst finished loss where other seeds of its LR finished, and an LR where every seed diverged is unusable)",
    )
    parser.add_argument(
        "--goals",
        nargs="+",
        type=_goal,
        metavar="GOAL=TARGET",
        help="precision goals to check and report (eval/goals.py), e.g. slope_ci_halfwidth=0.15 deepest_opt_ci_width=1; "
        "a goal is not met while an optimum's CI behind it ends on the last LR tried (cut by the grid)",
    )
    parser.add_argument(
        "--target-depth",
        type=int,
        nargs="+",
        metavar="L",
        help="predict the optimal LR at depth L (any L, also beyond the sweep) from the fitted depth trend, with a "
        "95%% interval and the regret of using the base depth's LR there",
    )
    parser.add_argument("--dpi", type=int, default=150, help="PNG resolution (default 150)")
    parser.add_argument("--no-figures", action="store_true", help="write only the JSON, CSV and reports")


@dataclass
class TransferOutputs:
    """What :func:`write_transfer` produced: the analysis, and the files written under ``out``."""

    analysis: TransferAnalysis
    files: list[str]  # figures (PNG and PDF) and downstream tables, besides transfer.json/.csv and the reports
    figures: list[tuple[str, str]]  # (PNG name, caption) in report order
    figure_failed: bool  # a figure raised (its note is in the analysis); the numbers are written


def write_transfer(
    sweep_dir: str | Path | Sequence[str | Path],
    out: str | Path,
    *,
    shared_base: Optional[str] = None,
    fractions: Any = None,
    base_depth: Optional[int] = None,
    presets: Optional[list[str]] = None,
    fit_window: int = 1,
    n_boot: int = 1000,
    boot_seed: int = 0,
    use_evals_before_divergence: bool = False,
    seed_model: str = "independent",
    figures: bool = True,
    dpi: int = 150,
    goals: Optional[dict[str, float]] = None,
    goal_context: Optional[list[str]] = None,
    target_depths: Optional[list[int]] = None,
    depths: Optional[list[int]] = None,
    slope_tolerance: Optional[float] = None,
    ignore_columns: Optional[list[str]] = None,
    where: Optional[list[tuple[str, str]]] = None,
) -> TransferOutputs:
    """Analyse a sweep and write transfer.json, transfer.csv, report.md/.html and the figures.

    ``sweep_dir``: a sweep directory or a results.csv, or several read as one table
    (``eval.results.read_results``).

    The Python API behind ``python -m eval transfer`` (the demo calls it). ``goals`` adds the
    per-goal table (eval/goals.py) to the report and transfer.json, ``goal_context`` the lines
    said above it (a study's stop reason and what it spent); ``target_depths`` adds the predicted
    optimal LR at those depths; ``slope_tolerance`` is the verdict's equivalence bound (None:
    ``eval.transfer.DEFAULT_SLOPE_TOLERANCE``); ``ignore_columns`` are left out of the CSV; ``where`` keeps the rows with these (column, value) pairs. Raises ``ResultsError`` / ``AnalysisInputError`` on bad input and
    ``OSError`` when ``out`` cannot be made.
    """
    from eval.report import write_reports, write_transfer_csv, write_transfer_json
    from eval.results import read_paths, select_runs
    from eval.transfer import DEFAULT_SLOPE_TOLERANCE, Note, analyze

    paths = [sweep_dir] if isinstance(sweep_dir, (str, Path)) else list(sweep_dir)
    sweep = select_runs(
        read_paths(paths, ignore_columns=ignore_columns or ()),
        where=where,
        depths=depths,
        shared_base=shared_base,
    )
    analysis = analyze(
        sweep,
        fractions=fractions,
        base_depth=base_depth,
        presets=presets,
        window=fit_window,
        n_boot=n_boot,
        boot_seed=boot_seed,
        use_evals_before_divergence=use_evals_before_divergence,
        seed_model=seed_model,
        slope_tolerance=DEFAULT_SLOPE_TOLERANCE if slope_tolerance is None else slope_tolerance,
    )
    if goals:
        from eval.goals import check_goals

        analysis.goals = [c.as_dict() for c in check_goals(analysis, goals)]
        analysis.goal_context = list(goal_context or [])
    if target_depths:
        from eval.transfer import predict_at_depths

        analysis.predictions = predict_at_depths(analysis, target_depths)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    made: list[tuple[str, str]] = []
    files: list[str] = []
    failed = False
    if figures:
        from eval.plots import save_figure

        for name, build in _figure_builders(analysis):
            try:
                for stem, caption, fig in build():
                    files += [p.name for p in save_figure(fig, out, stem, dpi)]
                    made.append((f"{stem}.png", caption))
            except Exception as exc:  # a broken figure must not cost the numbers
                failed = True
                analysis.notes.append(Note("figures", f"{name} failed: {type(exc).__name__}: {exc}"))
                traceback.print_exc()
    write_transfer_json(out / "transfer.json", analysis, files)
    write_transfer_csv(out / "transfer.csv", analysis)
    write_reports(out, analysis, made)
    from eval.downstream import write_downstream

    downstream = write_downstream(sweep, out)
    if downstream is not None:
        files += ["downstream.csv", downstream.name]
    _remove_stale(out, files)
    return TransferOutputs(analysis, files, made, failed)


# files of ours that a run writes only sometimes (figures: not with --no-figures; heatmaps: only over
# block multipliers; downstream: only with lm_eval.json); a rerun into the same --out removes those it did not write
OPTIONAL_OUTPUTS: tuple[str, ...] = (
    "fig_loss_vs_lr.png", "fig_loss_vs_lr.pdf", "fig_optimal_lr_vs_depth.png", "fig_optimal_lr_vs_depth.pdf",
    "fig_heatmap_*.png", "fig_heatmap_*.pdf", "downstream.csv", "downstream.md",
)  # fmt: skip


def _remove_stale(out: Path, written: list[str]) -> None:
    """Remove this command's optional outputs left in ``out`` by an earlier run that this one did
    not write, so the folder holds one analysis: a rerun with ``--no-figures`` or on another
    sweep left the earlier figures beside the new numbers. Other files are not touched."""
    for pattern in OPTIONAL_OUTPUTS:
        for path in out.glob(pattern):
            if path.name not in written and path.is_file():
                path.unlink()


def run(args: argparse.Namespace) -> ExitCode:
    from eval.results import ResultsError
    from eval.transfer import AnalysisInputError, fraction_label

    fractions = args.fractions
    if fractions and "all" in fractions:
        if len(fractions) > 1:
            print("error: --fractions: 'all' cannot be combined with numbers", file=sys.stderr)
            return ExitCode.USAGE
        fractions = "all"
    try:
        outputs = write_transfer(
            args.sweep_dir,
            args.out,
            shared_base=args.shared_base,
            fractions=fractions,
            base_depth=args.base_depth,
            presets=args.presets,
            fit_window=args.fit_window,
            n_boot=args.bootstrap,
            boot_seed=args.bootstrap_seed,
            use_evals_before_divergence=args.use_evals_before_divergence,
            seed_model=args.seed_model,
            figures=not args.no_figures,
            dpi=args.dpi,
            goals=dict(args.goals) if args.goals else None,
            target_depths=args.target_depth,
            depths=args.depths,
            slope_tolerance=args.slope_tolerance,
            ignore_columns=args.ignore_columns,
            where=args.where,
        )
    except (ResultsError, AnalysisInputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:
        print(f"error: --out {args.out}: cannot create: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    _print_summary(outputs.analysis, Path(args.out), fraction_label)
    if "downstream.md" in outputs.files:
        print(f"downstream scores: {Path(args.out) / 'downstream.md'}")
    return ExitCode.FAILED if outputs.figure_failed else ExitCode.OK


def _figure_builders(analysis: TransferAnalysis) -> list[tuple[str, Callable[[], list[tuple[str, str, Figure]]]]]:
    """(name, builder) pairs; each builder returns (file stem, caption, figure) triples."""
    from eval.plots import plot_block_multiplier_heatmaps, plot_loss_vs_lr, plot_optimal_lr_vs_depth

    def heatmaps() -> list[tuple[str, str, Figure]]:
        return [
            (stem, f"Loss over LR x block multiplier ({stem.removeprefix('fig_heatmap_')}).", fig)
            for stem, fig in plot_block_multiplier_heatmaps(analysis)
        ]

    return [
        ("fig_loss_vs_lr", lambda: [("fig_loss_vs_lr", FIGURE_CAPTIONS["fig_loss_vs_lr"], plot_loss_vs_lr(analysis))]),
        (
            "fig_optimal_lr_vs_depth",
            lambda: [
                (
                    "fig_optimal_lr_vs_depth",
                    FIGURE_CAPTIONS["fig_optimal_lr_vs_depth"],
                    plot_optimal_lr_vs_depth(analysis),
                )
            ],
        ),
        ("fig_heatmap", heatmaps),
    ]


def _interval_line(analysis: TransferAnalysis) -> str:
    """How the printed intervals were made and on how many seeds, so they can be judged from stdout."""
    st = analysis.settings
    counts = [d.seed_counts for r in analysis.results for d in r.depths if d.optimum.found]
    seeds = f"{min(c[0] for c in counts)}-{max(c[1] for c in counts)}" if counts else "none"
    if not st.get("bootstrap_samples"):
        return f"intervals: none (--bootstrap 0); usable seeds per (depth, LR) cell: {seeds}"
    return (
        f"intervals: {st['ci_level']:g}% percentile, {st['bootstrap_samples']} seed-bootstrap draws (pooled residuals "
        f"of each curve, --seed-model {st['seed_model']}, RNG seed {st['bootstrap_seed']}); usable seeds per "
        f"(depth, LR) cell: {seeds}; none where a family has one seed per cell (docs/eval.md)"
    )


def _print_summary(analysis: TransferAnalysis, out: Path, fraction_label: Callable[[float], str]) -> None:
    from eval.goals import achieved_text, met_text
    from eval.report import HEADLINE_LEGEND, gap_marks, mark_text, max_regret_marks, slope_marks
    from eval.results import sources_text

    if len(analysis.sources) > 1:
        print(sources_text(analysis.sources))
    print(_interval_line(analysis))
    marked = False
    for r in analysis.results:
        s = r.slope
        marks = mark_text(slope_marks(r))
        slope = number(s.slope, "+.3f") if s.available else "n/a"
        ci = f" [{number(s.ci_low, '+.3f')}, {number(s.ci_high, '+.3f')}]" if s.ci_available else ""
        drift = f"{number(r.drift)}{marks}" if r.drift == r.drift else "n/a"
        regret = r.max_regret_text() + mark_text(max_regret_marks(r))
        marked = marked or bool(marks) or bool(mark_text(max_regret_marks(r)))
        verdict = f"{r.verdict}{marks}" if r.verdict else "no verdict (no CI)"
        print(
            f"{r.family.label:<28} {fraction_label(r.fraction):<12} base L={r.base_depth}  "
            f"slope {slope}{ci}{marks if s.available else ''}  drift {drift}  max regret {regret}  "
            f"verdict (±{r.slope_tolerance:g}): {verdict}"
        )
    for g in analysis.gaps:
        ci = f" [{number(g.ci[0], '+.4f')}, {number(g.ci[1], '+.4f')}]" if g.ci else " (no CI)"
        marks = mark_text(gap_marks(analysis, g))
        marked = marked or bool(marks)
        print(
            f"loss gap {g.family.label} - {g.reference.label} at L={g.depth}, "
            f"{fraction_label(g.fraction)}: {number(g.gap, '+.4f')}{ci}{marks}"
        )
    if marked:
        print(HEADLINE_LEGEND.replace("`", ""))
    for p in analysis.predictions:
        ci = f" [{number(p.ci[0], '.2f')}, {number(p.ci[1], '.2f')}]" if p.ci else " (no CI)"
        rci = f" [{number(p.regret_ci[0], '.4f')}, {number(p.regret_ci[1], '.4f')}]" if p.regret_ci else ""
        regret = f"{number(p.regret, '.4f')}{rci}" if p.regret == p.regret else "n/a"
        print(
            f"{p.family.label:<28} {fraction_label(p.fraction):<12} L={p.depth}: optimal log2 LR {number(p.log2_lr, '.2f')}{ci}"
            f" (lr {2.0**p.log2_lr:.3g}); regret of the L={p.base_depth} LR there {regret}"
            + (" (extrapolated)" if p.extrapolated else "")
            + (f"; {p.measured_text()}" if p.measured else "")
        )
    for g in analysis.goals:
        met = {"yes": "met", "NO": "NOT met"}.get(met_text(g), met_text(g))
        print(f"goal {g['goal']} {g['family']} {g['fraction_label']}: target {g['target']:g}, achieved {achieved_text(g)}, "
              f"{met}")  # fmt: skip
    if analysis.notes:
        print(f"{len(analysis.notes)} warning(s):")
        for note in analysis.notes:
            print(f"  - {note}")
    print(f"wrote {out}/transfer.json, transfer.csv, report.md, report.html")

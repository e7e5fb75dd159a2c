"""Depth-transfer metrics: per-depth optimal LR, its drift and slope across depth, the seed
bootstrap CI of that slope, and the regret of reusing the base depth's LR at every depth.

These are the numbers behind "if I tune the LR on a shallow model, does it transfer to a deep
one?" (TP-VI, Section 10.3 / Fig. 10): under a parametrization that transfers, the optimal
log2 LR is flat in log2 depth (slope ~ 0, small drift) and the regret stays ~ 0.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field, replace

import numpy as np

from eval.curves import CurveSet, DepthCurve, Family, build_curves
from eval.optimum import LossAt, Optimum, fit_optimum, loss_at
from eval.outputs import lr_text, number
from eval.results import FRACTION_ATOL, ResultsError, SweepResults, check_presets, read_divergence_reasons
from eval.seed_model import SEED_MODELS, CurveMeans, curve_means
from rundir.contract import PARAMETRIZATION_KEYS

DEFAULT_FRACTIONS: tuple[float, ...] = (0.5, 1.0)
CI_LEVEL = 95.0
# equivalence bound of the transfer verdict, in octaves of optimal LR per doubling of depth
# (``--slope-tolerance``): over L = 2..32 it permits 0.4 octave of drift; docs/eval.md, "Verdict"
DEFAULT_SLOPE_TOLERANCE = 0.1
VERDICTS: tuple[str, ...] = ("consistent with transfer", "does not transfer", "inconclusive")
_MAX_IDS_SHOWN = 4
_ARM_COLUMNS = ("preset", *PARAMETRIZATION_KEYS)  # the family columns that say which parametrization it is


def curve_rng(seed: int, family: Family, fraction: float, *more: int) -> np.random.Generator:
    """The RNG of one family's draws at one fraction, keyed on what identifies that curve, not
    on its position among the families or fractions analysed: ``seed``, ``more`` (which draws:
    e.g. a target depth), the CRC-32 of the family's sorted non-empty column=value pairs (UTF-8;
    an empty value, e.g. the alpha of a fixed preset in a sweep with a custom arm, is left out
    as the label leaves it out) and the fraction in millionths. So a family's intervals are the
    same whatever other families the table holds or ``--presets``/``--where`` keep, and in
    whatever order its rows come (docs/eval.md, "Bootstrap CIs"); stable across processes and
    platforms (never Python's salted ``hash``)."""
    ident = "\n".join(f"{name}={value}" for name, value in sorted(family.keys) if value != "")
    return np.random.default_rng([seed, *more, zlib.crc32(ident.encode("utf-8")), round(fraction * 1e6)])


class AnalysisInputError(ValueError):
    """The request does not fit the sweep (fraction not recorded, unknown preset or base depth)."""


@dataclass(frozen=True)
class Note:
    """A warning for the report: ``where`` names preset/fraction/depth, ``message`` says what and why."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.where}] {self.message}" if self.where else self.message


@dataclass
class DepthResult:
    """One depth of one family at one fraction: its curve, optimum and regret."""

    depth: int
    is_base: bool
    curve: DepthCurve
    optimum: Optimum
    fit: CurveMeans  # the per-LR means the optimum is fitted to, and their bootstrap (eval.seed_model)
    opt_ci: tuple[float, float] | None = None  # bootstrap percentile CI of the optimal log2 LR
    regret: float = math.nan
    regret_status: str = "no_optimum"
    regret_method: str | None = None
    regret_note: str = ""
    loss_at_base_lr: float = math.nan
    regret_ci: tuple[float, float] | None = None  # bootstrap percentile CI of the regret
    # bootstrap draws of this depth's best (fitted) loss, for CIs of differences between families
    loss_draws: np.ndarray | None = field(default=None, repr=False)
    # bootstrap draws of the optimum's log2 LR and of the fitted curvature (NaN where a draw has no quadratic)
    opt_draws: np.ndarray | None = field(default=None, repr=False)
    curvature_draws: np.ndarray | None = field(default=None, repr=False)

    @property
    def n_lr_tried(self) -> int:
        return int(self.curve.log2_lr.size)

    @property
    def n_lr_usable(self) -> int:
        return int(self.curve.usable.sum())

    @property
    def n_lr_diverged(self) -> int:
        """LRs where no seed is usable and at least one diverged."""
        return int(np.sum(~self.curve.usable & (self.curve.n_diverged > 0)))

    def usable_end(self, side: str) -> float:
        """The lowest (``low``) or highest (``high``) usable LR of the curve (log2)."""
        usable = self.curve.log2_lr[self.curve.usable]
        return float(usable.min() if side == "low" else usable.max())

    def beyond_end(self, side: str) -> tuple[float | None, str]:
        """The LR tried next past the usable end on ``side`` (log2; None when nothing was tried
        past it) and what is known there: ``grid`` (nothing tried), ``diverged`` (every seed
        that ran there diverged: a real bound), ``missing`` (failed or no row, without a usable
        loss) or ``pending`` (a run there has not ended)."""
        c = self.curve
        end = self.usable_end(side)
        tried = np.union1d(c.log2_lr, c.pending_log2_lr)
        past = tried[tried > end + 1e-9] if side == "high" else tried[tried < end - 1e-9]
        if not past.size:
            return None, "grid"
        x = float(past.min() if side == "high" else past.max())
        if np.any(np.abs(c.pending_log2_lr - x) < 1e-9):
            return x, "pending"
        i = int(np.flatnonzero(np.abs(c.log2_lr - x) < 1e-9)[0])
        return x, "diverged" if c.n_diverged[i] > 0 and c.n_missing[i] == 0 else "missing"

    @property
    def open_ends(self) -> tuple[str, ...]:
        """Sides (``low``, ``high``) where the optimum's CI is cut by the LRs tried: it ends on
        the last usable LR of that side (enough bootstrap optima sit on that grid point) and
        nothing past it bounds the curve: no LR was tried there, or the next one has no usable
        loss for a reason other than divergence (failed, missing, pending; :meth:`beyond_end`).
        The curve is then not bracketed on that side and the interval understates the
        uncertainty there. Only an end next to an LR where every seed diverged is a real bound
        (the optimum cannot lie in a diverging LR), not open."""
        if self.opt_ci is None or not self.curve.usable.any():
            return ()
        return tuple(
            side
            for side, ci_end in (("low", self.opt_ci[0]), ("high", self.opt_ci[1]))
            if abs(ci_end - self.usable_end(side)) < 1e-9 and self.beyond_end(side)[1] != "diverged"
        )

    def open_labels(self, prefix: str = "") -> list[str]:
        """Its :attr:`open_ends` as ``L=32 high`` (with ``prefix`` in front): how goals and the
        headline's marks name a cut interval."""
        return [f"{prefix}L={self.depth} {side}" for side in self.open_ends]

    @property
    def seed_counts(self) -> tuple[int, int]:
        """Fewest and most usable seeds over the usable LRs (0, 0 when none)."""
        n = self.curve.n_seeds[self.curve.usable]
        return (int(n.min()), int(n.max())) if n.size else (0, 0)

    @property
    def best_grid(self) -> tuple[float, float, float, int]:
        """log2 LR, mean loss, seed std and seed count of the best grid point (NaNs when none)."""
        i = self.optimum.best_index
        if i is None:
            return math.nan, math.nan, math.nan, 0
        c = self.curve
        return float(c.log2_lr[i]), float(c.mean_loss[i]), float(c.std_loss[i]), int(c.n_seeds[i])

    @property
    def best_grid_lr(self) -> float:
        """The best grid point's LR as the table had it (NaN when none)."""
        i = self.optimum.best_index
        return math.nan if i is None else float(self.curve.lr[i])

    @property
    def optimum_lr(self) -> float:
        """The optimum's LR: the grid value as the table had it where the optimum is a grid point
        (``method`` ``grid``), else ``2^log2_lr`` of the fit."""
        if self.optimum.method == "grid" and self.optimum.best_index is not None:
            return float(self.curve.lr[self.optimum.best_index])
        return self.optimum.lr


SLOPE_ZERO_ATOL = 1e-9  # octaves per doubling: a slope this near 0 is 0 (float rounding, not a measurement)


@dataclass
class SlopeFit:
    """Least-squares slope of optimal log2 LR against log2 depth, with a seed-bootstrap CI."""

    slope: float = math.nan
    intercept: float = math.nan
    stderr: float = math.nan
    n_depths: int = 0
    ci_low: float = math.nan
    ci_high: float = math.nan
    ci_note: str = ""
    note: str = ""  # why there is no slope

    @property
    def available(self) -> bool:
        return math.isfinite(self.slope)

    @property
    def ci_available(self) -> bool:
        return math.isfinite(self.ci_low) and math.isfinite(self.ci_high)

    @property
    def ci_contains_zero(self) -> bool | None:
        """The CI holds 0 (None without a CI): the one answer the verdict, the report's "CI contains
        0" column and ``transfer.json`` give. An end within ``SLOPE_ZERO_ATOL`` of 0 is 0 (rounding
        of a slope of equal optima; it prints ``+0.000``); beyond that the numbers decide, not
        their 3-decimal print (``[+0.000, +0.412]`` from a low end of +0.0004 excludes 0)."""
        if not self.ci_available:
            return None
        return self.ci_low <= SLOPE_ZERO_ATOL and self.ci_high >= -SLOPE_ZERO_ATOL


@dataclass
class FractionResult:
    """One family at one eval fraction."""

    family: Family
    fraction: float
    base_depth: int | None
    base_source: str
    depths: list[DepthResult]
    slope: SlopeFit
    drift: float = math.nan
    drift_ci: tuple[float, float] | None = None
    n_boot: int = 0
    slope_tolerance: float = DEFAULT_SLOPE_TOLERANCE

    @property
    def verdict(self) -> str | None:
        """:func:`transfer_verdict` of this slope at :attr:`slope_tolerance` (None without a CI)."""
        return transfer_verdict(self.slope, self.slope_tolerance)

    @property
    def permitted_drift(self) -> float:
        """The drift of the optimum (octaves) the tolerance permits over this family's depths
        with an optimum: tolerance x log2(deepest / shallowest); NaN with fewer than two."""
        found = [d.depth for d in self.depths if d.optimum.found]
        return self.slope_tolerance * math.log2(max(found) / min(found)) if len(found) >= 2 else math.nan

    @property
    def regret_diverged_at(self) -> list[int]:
        """Depths where the base depth's optimal LR diverged (regret status ``diverged``: it lies
        inside the LRs tried there but past the usable ones, next to diverged runs)."""
        return [d.depth for d in self.depths if d.regret_status == "diverged"]

    @property
    def regret_not_measured_at(self) -> list[int]:
        """Depths with no regret for another reason (outside the LRs tried, missing runs, no optimum)."""
        return [d.depth for d in self.depths if d.regret_status not in ("ok", "diverged")]

    @property
    def max_regret(self) -> float:
        """The largest regret over the depths, NaN when the base LR diverged at any depth (no
        number: that transfer failed, :attr:`regret_diverged_at`) or no regret was measured.
        Depths without a regret for another reason are left out (:attr:`regret_not_measured_at`),
        and so is the base depth (0 by construction): with no other depth there is no number,
        where "0.0000" read as "transfers at no cost"."""
        if self.regret_diverged_at:
            return math.nan
        vals = [d.regret for d in self.depths if math.isfinite(d.regret) and not d.is_base]
        return max(vals) if vals else math.nan

    def max_regret_text(self, fmt: str = ".4f") -> str:
        """``diverged at L=8, 16, 32`` when the base LR diverged somewhere, else the largest
        regret, with the depths where none was measured named."""
        missing = self.regret_not_measured_at
        unmeasured = f"not measured at L={', '.join(map(str, missing))}" if missing else ""
        if self.regret_diverged_at:
            text = f"diverged at L={', '.join(map(str, self.regret_diverged_at))}"
            return text + (f"; {unmeasured}" if unmeasured else "")
        if not math.isfinite(self.max_regret):
            if not unmeasured and not any(d.optimum.found for d in self.depths if not d.is_base):
                return f"n/a (no depth besides the base L={self.base_depth})"
            return unmeasured or "n/a"
        return number(self.max_regret, fmt) + (f" ({unmeasured})" if unmeasured else "")

    @property
    def base(self) -> DepthResult | None:
        return next((d for d in self.depths if d.is_base), None)


@dataclass(frozen=True)
class PresetGap:
    """Best loss of ``family`` minus that of ``reference`` at the deepest depth both reached
    (negative: ``family`` trains to a lower loss). The CI resamples each family's seeds
    independently, which is right for distinct runs; when the base depth is the only depth both
    reached, its runs are shared and the gap is 0."""

    fraction: float
    reference: Family
    family: Family
    depth: int
    gap: float
    ci: tuple[float, float] | None
    note: str = ""


@dataclass
class TransferAnalysis:
    """Everything the outputs need: per family x fraction results, the curves and the notes."""

    source: str
    fractions: list[float]
    families: list[Family]
    results: list[FractionResult]
    curveset: CurveSet
    notes: list[Note] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    divergence_reasons: dict[str, str] = field(default_factory=dict)
    gaps: list[PresetGap] = field(default_factory=list)
    goals: list[dict] = field(default_factory=list)  # eval.goals.GoalCheck.as_dict() rows, when goals were given
    goal_context: list[str] = field(default_factory=list)  # what a study says above them (stop reason, spent)
    predictions: list = field(default_factory=list)  # DepthPrediction rows (--target-depth)
    sources: list[tuple[str, int]] = field(default_factory=list)  # (table read, its runs analysed), in order

    def result(self, family: Family, fraction: float) -> FractionResult:
        return next(r for r in self.results if r.family == family and r.fraction == fraction)


def transfer_verdict(slope: SlopeFit, tolerance: float) -> str | None:
    """Three-way answer from the slope's 95% CI and an equivalence bound ``tolerance`` (octaves
    per doubling): ``consistent with transfer`` when the CI lies inside [-tolerance, +tolerance]
    (every slope it allows moves the optimum by less than the tolerance; a CI inside the bound
    that excludes 0 is a drift detected but smaller than the tolerance, and counts as this),
    else ``does not transfer`` when it excludes 0, else ``inconclusive`` (it contains 0 and
    slopes beyond the tolerance). None without a CI."""
    if not slope.ci_available:
        return None
    if -tolerance <= slope.ci_low and slope.ci_high <= tolerance:
        return VERDICTS[0]
    if not slope.ci_contains_zero:
        return VERDICTS[1]
    return VERDICTS[2]


def fraction_label(fraction: float) -> str:
    """``mid (f=0.5)``, ``end (f=1)`` or ``f=0.25``: how a fraction is named in tables and figures."""
    if abs(fraction - 1.0) <= FRACTION_ATOL:
        return "end (f=1)"
    if abs(fraction - 0.5) <= FRACTION_ATOL:
        return "mid (f=0.5)"
    return f"f={fraction:.4g}"


def resolve_fractions(sweep: SweepResults, requested: list[float] | str | None) -> tuple[list[float], list[Note]]:
    """Match requested fractions to recorded ones; default to mid (0.5) and end (1.0) where recorded."""
    recorded = sweep.recorded_fractions()
    shown = ", ".join(f"{f:g}" for f in recorded)
    if requested == "all":
        return recorded, []
    notes: list[Note] = []
    if requested is None:
        chosen = [r for r in recorded if any(abs(r - f) <= FRACTION_ATOL for f in DEFAULT_FRACTIONS)]
        if not chosen:
            notes.append(
                Note(
                    "", f"neither 0.5 nor 1.0 is recorded in {sweep.name}; analysing every recorded fraction ({shown})"
                )
            )
            return recorded, notes
        if len(chosen) < len(DEFAULT_FRACTIONS):
            notes.append(
                Note("", f"only fraction(s) {', '.join(f'{f:g}' for f in chosen)} of the default 0.5, 1.0 are recorded")
            )
        return chosen, notes
    chosen = []
    for f in requested:
        match = [r for r in recorded if abs(r - f) <= FRACTION_ATOL]
        if not match:
            raise AnalysisInputError(
                f"{sweep.name}: fraction {f:g} is not recorded in column 'fraction'; recorded: {shown}"
            )
        if match[0] not in chosen:
            chosen.append(match[0])
    return chosen, notes


def choose_base_depth(depths: list[int], recorded: list[int], override: int | None) -> tuple[int | None, str, str]:
    """The base depth L0 of one family: ``--base-depth``, else an agreed ``base_num_layers``, else the smallest depth.

    Returns (depth, source, note); the note is empty unless a fallback happened.
    """
    if not depths:
        return None, "none", "no runs with results"
    smallest = min(depths)
    if override is not None:
        if override in depths:
            return override, "--base-depth", ""
        return (
            smallest,
            "smallest depth",
            f"--base-depth {override} is not among this family's depths {depths}; using L={smallest}",
        )
    if len(recorded) == 1:
        if recorded[0] in depths:
            return recorded[0], "parametrization.base_num_layers", ""
        return (
            smallest,
            "smallest depth",
            f"parametrization.base_num_layers={recorded[0]} was not swept (depths {depths}); using the smallest depth L={smallest}",
        )
    return (
        smallest,
        "smallest depth",
        f"runs disagree on parametrization.base_num_layers {recorded}; using the smallest depth L={smallest}",
    )


def analyze(
    sweep: SweepResults,
    *,
    fractions: list[float] | str | None = None,
    base_depth: int | None = None,
    presets: list[str] | None = None,
    window: int = 1,
    n_boot: int = 1000,
    boot_seed: int = 0,
    use_evals_before_divergence: bool = False,
    seed_model: str = "independent",
    slope_tolerance: float = DEFAULT_SLOPE_TOLERANCE,
) -> TransferAnalysis:
    """Run the whole transfer analysis on validated sweep results."""
    if window < 1:
        raise AnalysisInputError(f"--fit-window must be >= 1, got {window}")
    if not (math.isfinite(slope_tolerance) and slope_tolerance > 0):
        raise AnalysisInputError(f"--slope-tolerance must be a positive number, got {slope_tolerance}")
    if n_boot < 0:
        raise AnalysisInputError(f"--bootstrap must be >= 0, got {n_boot}")
    if seed_model not in SEED_MODELS:
        raise AnalysisInputError(f"--seed-model must be one of {list(SEED_MODELS)}, got {seed_model!r}")
    chosen, notes = resolve_fractions(sweep, fractions)
    notes = [Note("", w) for w in sweep.warnings] + notes
    curveset = build_curves(sweep, chosen, use_evals_before_divergence=use_evals_before_divergence)
    families = curveset.families
    if presets:
        try:
            check_presets(sweep, presets)
        except ResultsError as exc:
            raise AnalysisInputError(str(exc)) from None
        families = [f for f in families if f.preset in presets]
    if base_depth is not None:
        all_depths = sorted({c.depth for (fam, _), cs in curveset.curves.items() if fam in families for c in cs})
        if base_depth not in all_depths:
            raise AnalysisInputError(
                f"{sweep.name}: --base-depth {base_depth} is not a swept depth (column 'model.num_layers' holds {all_depths})"
            )
    if curveset.n_pending_runs:
        ids = _ids(curveset.pending_run_ids)
        notes.append(
            Note("", f"{curveset.n_pending_runs} of {curveset.n_runs} runs are pending and were ignored ({ids})")
        )
    results: list[FractionResult] = []
    for family in families:
        for fraction in chosen:
            rng = curve_rng(boot_seed, family, fraction)
            result, fam_notes = _analyze_family_fraction(
                family, fraction, curveset, base_depth, window, n_boot, rng, seed_model
            )
            result.slope_tolerance = slope_tolerance
            results.append(result)
            notes.extend(fam_notes)
    diverged = sorted({rid for r in results for d in r.depths for rid in d.curve.diverged_run_ids})
    gaps = [g for fraction in chosen for g in preset_gaps([r for r in results if r.fraction == fraction])]
    return TransferAnalysis(
        source=sweep.name,
        sources=sweep.runs_per_file(),
        fractions=chosen,
        families=families,
        results=results,
        curveset=curveset,
        notes=notes,
        settings={
            "fit_window": window,
            "seed_model": seed_model,
            "bootstrap_samples": n_boot,
            "bootstrap_seed": boot_seed,
            "ci_level": CI_LEVEL,
            "slope_tolerance": slope_tolerance,
            "use_evals_before_divergence": use_evals_before_divergence,
            "base_depth_override": base_depth,
            "presets": presets,
        },
        divergence_reasons=read_divergence_reasons(sweep, diverged),
        gaps=gaps,
    )


def preset_gaps(results: list[FractionResult]) -> list[PresetGap]:
    """Each family against the first one that differs from it only in the preset (one fraction;
    e.g. per block type in a study with variants), at the deepest depth both have an optimum.
    Preset custom's alpha and gamma (:data:`rundir.contract.PARAMETRIZATION_KEYS`) count as part
    of the preset: a custom arm is compared with sp as depth_mup is."""
    gaps = []
    groups: dict[tuple, list[FractionResult]] = {}
    for r in results:
        groups.setdefault(tuple(kv for kv in r.family.keys if kv[0] not in _ARM_COLUMNS), []).append(r)
    for group in groups.values():
        gaps += _gaps_to_first(group)
    return gaps


def _gaps_to_first(results: list[FractionResult]) -> list[PresetGap]:
    if len(results) < 2:
        return []
    ref = results[0]
    ref_found = {d.depth: d for d in ref.depths if d.optimum.found}
    gaps = []
    for other in results[1:]:
        found = {d.depth: d for d in other.depths if d.optimum.found}
        common = sorted(set(ref_found) & set(found))
        if not common:
            continue
        a, b = ref_found[common[-1]], found[common[-1]]
        gap = b.optimum.loss - a.optimum.loss
        ci, note = None, ""
        if a.loss_draws is not None and b.loss_draws is not None:
            diff = b.loss_draws - a.loss_draws  # independent resamples: pairing by index is arbitrary
            diff = diff[np.isfinite(diff)]
            if diff.size:
                ci = _percentile_ci(diff)
        else:
            note = "no seed bootstrap for one of the two (single seeds or --bootstrap 0): no CI"
        gaps.append(PresetGap(ref.fraction, ref.family, other.family, common[-1], float(gap), ci, note))
    return gaps


def _percentile_ci(draws: np.ndarray) -> tuple[float, float]:
    lo, hi = np.percentile(draws, [(100 - CI_LEVEL) / 2, 100 - (100 - CI_LEVEL) / 2])
    return float(lo), float(hi)


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:_MAX_IDS_SHOWN])
    return shown + (f", ... {len(ids) - _MAX_IDS_SHOWN} more" if len(ids) > _MAX_IDS_SHOWN else "")


def _shared_base_hint(family: Family, fraction: float, curveset: CurveSet, depth: int) -> str:
    """Where another preset of the same family keys has runs at the missing base depth: the
    option that uses them (a study trains the shared base depth once, under its first preset)."""
    others = {k: v for k, v in family.keys if k not in _ARM_COLUMNS}
    lenders = sorted(
        f.preset
        for f in curveset.families
        if f.preset != family.preset
        and {k: v for k, v in f.keys if k not in _ARM_COLUMNS} == others
        and any(c.depth == depth for c in curveset.curves.get((f, fraction), []))
    )
    if not lenders:
        return ""
    return (
        f"; {', '.join(lenders)} {'has' if len(lenders) == 1 else 'have'} runs at L={depth}: "
        f"`--shared-base {lenders[0]}` uses them (at L = L0 every preset is the same model)"
    )


def depth_optimum(curve: DepthCurve, seed_model: str = "independent", window: int = 1) -> tuple[CurveMeans, Optimum]:
    """One depth's per-LR means (seeds that diverged where others finished counted as
    :mod:`eval.seed_model` counts them) and the optimum fitted to them: what ``eval transfer``
    reports for a depth. Its ``best_index`` is the best grid point (ties: the lowest LR)."""
    fit = curve_means(curve.seed_losses, curve.seed_ids, seed_model, curve.n_diverged)
    return fit, fit_optimum(curve.log2_lr, fit.means, window=window, n_diverged=curve.n_diverged)


def best_grid_lrs(sweep: SweepResults, fraction: float = 1.0) -> dict[tuple[Family, int], float | None]:
    """Per (family, depth): the LR of the best grid point at ``fraction`` as ``eval transfer``
    finds it with its defaults (:func:`depth_optimum`, ``--seed-model independent``), None where
    no LR has a usable loss. The one choice of "the runs at the best LR" (``eval dynamics``)."""
    curveset = build_curves(sweep, [fraction])
    best: dict[tuple[Family, int], float | None] = {}
    for (family, _), curves in curveset.curves.items():
        for curve in curves:
            _, opt = depth_optimum(curve)
            best[(family, curve.depth)] = None if opt.best_index is None else float(curve.lr[opt.best_index])
    return best


def _analyze_family_fraction(
    family: Family,
    fraction: float,
    curveset: CurveSet,
    base_override: int | None,
    window: int,
    n_boot: int,
    rng: np.random.Generator,
    seed_model: str = "independent",
) -> tuple[FractionResult, list[Note]]:
    where_ff = f"{family.label} | {fraction_label(fraction)}"
    notes: list[Note] = []
    curves = curveset.curves[(family, fraction)]
    depths = [c.depth for c in curves]
    recorded = curveset.base_depths_recorded.get(family, [])
    base, source, base_note = choose_base_depth(depths, recorded, base_override)
    if base_note and depths:
        if base_override is None and len(recorded) == 1 and recorded[0] not in depths:
            base_note += _shared_base_hint(family, fraction, curveset, recorded[0])
        notes.append(Note(where_ff, base_note))
    results = []
    for curve in curves:
        fit, opt = depth_optimum(curve, seed_model, window)
        results.append(DepthResult(depth=curve.depth, is_base=curve.depth == base, curve=curve, optimum=opt, fit=fit))
        notes.extend(_depth_notes(f"{where_ff} | L={curve.depth}", curve, opt))
    if not results:
        notes.append(Note(where_ff, "no runs with results (all pending?): nothing to analyse"))
    _fill_regrets(results, where_ff, notes)
    slope = _fit_slope(results)
    found = [d for d in results if d.optimum.found]
    drift = float(np.ptp([d.optimum.log2_lr for d in found])) if len(found) >= 2 else math.nan
    if results and not slope.available:
        slope.note = (
            f"only one depth ({'L=' + str(found[0].depth) if found else 'none'}) has an optimum: no slope or drift"
            if len(found) == 1
            else "no depth has an optimum: no slope or drift"
        )
        if len(depths) == 1:
            slope.note = f"single depth L={depths[0]} in this family: no slope or drift across depth"
        notes.append(Note(where_ff, slope.note))
    edge_depths = [d.depth for d in found if d.optimum.edge is not None]
    if slope.available and edge_depths:
        notes.append(
            Note(
                where_ff,
                f"slope and drift include optima on the edge of the usable LRs at L={edge_depths}; they are bounds, not estimates",
            )
        )
    result = FractionResult(family, fraction, base, source, results, slope, drift, n_boot=n_boot)
    _bootstrap(result, window, n_boot, rng, where_ff, notes)
    return result, notes


def _depth_notes(where: str, curve: DepthCurve, opt: Optimum) -> list[Note]:
    notes: list[Note] = []
    n_div, n_miss = int(curve.n_diverged.sum()), int(curve.n_missing.sum())
    if not opt.found:
        notes.append(
            Note(
                where,
                f"no usable point: all {curve.log2_lr.size} LR(s) at this depth have no finite loss "
                f"({n_div} run(s) diverged, {n_miss} missing); no optimum",
            )
        )
        return notes
    if opt.edge is not None:
        bound = "above" if opt.edge == "high" else "below"
        notes.append(
            Note(
                where,
                f"optimum at the {opt.edge} edge ({opt.edge_reason}) at lr={opt.lr:.4g}: the true optimum may lie {bound} it",
            )
        )
    if opt.fallback not in (None, "edge"):
        notes.append(Note(where, f"no quadratic fit: {opt.note}"))
    partial = [i for i in range(curve.log2_lr.size) if curve.n_seeds[i] > 0 and curve.n_diverged[i] > 0]
    if partial:
        cells = ", ".join(
            f"lr={lr_text(curve.lr[i])} ({curve.n_diverged[i]} of {curve.n_diverged[i] + curve.n_seeds[i] + curve.n_missing[i]})"
            for i in partial
        )
        notes.append(
            Note(
                where,
                "some seeds diverged where others did not; each counts at this curve's worst finished loss "
                f"in its LR's mean: {cells}",
            )
        )
    if curve.nonfinite_run_ids:
        ids = curve.nonfinite_run_ids
        notes.append(
            Note(
                where,
                f"{len(ids)} run(s) not marked diverged recorded a nan/inf loss; treated as diverged: {_ids(ids)}",
            )
        )
    if n_miss:
        notes.append(
            Note(
                where,
                f"{n_miss} run(s) have no loss at this eval point (failed before it, or no row): {_ids(curve.missing_run_ids)}",
            )
        )
    return notes


def _fill_regrets(results: list[DepthResult], where_ff: str, notes: list[Note]) -> None:
    """Regret at each depth = loss there at the base depth's optimal LR minus that depth's best loss."""
    base = next((d for d in results if d.is_base), None)
    if base is None:
        return
    if not base.optimum.found:
        for d in results:
            d.regret_status, d.regret_note = "no_base_optimum", f"the base depth L={base.depth} has no optimum"
        notes.append(Note(where_ff, f"base depth L={base.depth} has no usable point: no regrets"))
        return
    x_base = base.optimum.log2_lr
    if base.optimum.edge is not None:
        notes.append(
            Note(
                where_ff,
                f"the base depth's optimum is on the {base.optimum.edge} edge; regrets use that LR (lr={base.optimum.lr:.4g})",
            )
        )
    for d in results:
        if not d.optimum.found:
            d.regret_status, d.regret_note = "no_optimum", "this depth has no usable point"
            continue
        c = d.curve
        at: LossAt = loss_at(c.log2_lr, d.fit.means, d.optimum, x_base, n_diverged=c.n_diverged)
        d.regret_status, d.regret_method, d.regret_note = at.status, at.method, at.note
        if at.status == "ok":
            d.loss_at_base_lr = at.loss
            d.regret = at.loss - d.optimum.loss
        else:
            notes.append(Note(f"{where_ff} | L={d.depth}", f"no regret: the base-depth optimal LR {at.note}"))


def depth_slopes(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least-squares slope of each row of ``y`` against ``x`` (optimal log2 LR against log2 depth):
    the point fit and every bootstrap draw. Each row is taken relative to its first value before it
    is centred, so a row of one value (every depth's optimum the same grid LR) has the slope 0
    exactly, not the ±1e-16 that centring on a rounded mean (or ``np.polyfit``) gave: a CI printed
    ``[+0.000, +0.000]`` read "does not contain 0"."""
    y = np.atleast_2d(np.asarray(y, dtype=float))
    xc = np.asarray(x, dtype=float) - float(np.mean(x))
    d = y - y[:, :1]
    return (d - d.mean(axis=1, keepdims=True)) @ xc / float(xc @ xc)


def _fit_slope(results: list[DepthResult]) -> SlopeFit:
    found = [d for d in results if d.optimum.found]
    if len(found) < 2:
        return SlopeFit(n_depths=len(found))
    x = np.log2([d.depth for d in found])
    y = np.array([d.optimum.log2_lr for d in found])
    slope = float(depth_slopes(x, y)[0])
    intercept = float(y.mean() - slope * x.mean())
    stderr = math.nan
    if len(found) >= 3:
        resid = y - (slope * x + intercept)
        sxx = float(np.sum((x - x.mean()) ** 2))
        stderr = math.sqrt(float(np.sum(resid**2)) / (len(found) - 2) / sxx)
    return SlopeFit(slope=float(slope), intercept=float(intercept), stderr=stderr, n_depths=len(found))


def _bootstrap_regrets(
    found: list[DepthResult], draws_of: list[tuple[np.ndarray, list[Optimum]]], where_ff: str, notes: list[Note]
) -> None:
    """Regret CI per depth: in each draw, the base depth's resampled optimum is reused on this
    depth's resampled curve, so the base optimum's own uncertainty is inside the interval."""
    base_j = next((j for j, d in enumerate(found) if d.is_base), None)
    if base_j is None:
        return
    base_optima = draws_of[base_j][1]
    for j, d in enumerate(found):
        if d.regret_status != "ok":
            continue
        means, optima = draws_of[j]
        c = d.curve
        regrets = np.full(len(optima), np.nan)
        for b, (opt, base_opt) in enumerate(zip(optima, base_optima)):
            at = loss_at(c.log2_lr, means[b], opt, base_opt.log2_lr, n_diverged=c.n_diverged)
            if at.status == "ok":
                regrets[b] = at.loss - opt.loss
        ok = np.isfinite(regrets)
        if ok.mean() < CI_LEVEL / 100:
            notes.append(
                Note(
                    f"{where_ff} | L={d.depth}",
                    f"no regret CI: in {int((~ok).sum())} of {ok.size} bootstrap draws the base depth's "
                    "optimal LR fell outside this depth's usable LRs",
                )
            )
            continue
        d.regret_ci = _percentile_ci(regrets[ok])


def _bootstrap(
    result: FractionResult, window: int, n_boot: int, rng: np.random.Generator, where_ff: str, notes: list[Note]
) -> None:
    """Percentile CIs by resampling seeds within every (depth, LR) cell and refitting optima and slope."""
    found = [d for d in result.depths if d.optimum.found]
    if not found:
        return
    if n_boot == 0:
        result.slope.ci_note = "bootstrap disabled (--bootstrap 0): no CI"
        return
    seeds = np.concatenate([d.curve.n_seeds[d.curve.usable] for d in found])
    pools = [d.fit.noise_pool() for d in found]  # each depth's own seed residuals and their df
    own = [j for j, (_, df) in enumerate(pools) if df > 0]
    if not own:
        result.slope.ci_note = (
            "one seed per (depth, LR) cell: a seed bootstrap has nothing to resample, so no CI is given"
            if seeds.max() <= 1
            else "no depth has seed noise of its own (the additive seed model leaves no residual degrees of "
            "freedom): a seed bootstrap has nothing to resample, so no CI is given"
        )
        if result.slope.available:
            notes.append(Note(where_ff, result.slope.ci_note))
        return
    # a depth with no seed noise of its own borrows the residuals pooled over the family's depths that have some
    family_pool = (np.concatenate([pools[j][0] for j in own]), sum(pools[j][1] for j in own))
    borrowing = [j for j in range(len(found)) if j not in own]
    in_own = np.concatenate([found[j].curve.n_seeds[found[j].curve.usable] for j in own])
    n_single = int(np.sum(in_own == 1))
    if n_single:
        result.slope.ci_note = (
            f"{n_single} of {seeds.size} (depth, LR) cells have one seed; their noise in the CI is the pooled "
            "residuals of their curve"
        )
        notes.append(Note(where_ff, result.slope.ci_note))
    if borrowing:
        depths = ", ".join(str(found[j].depth) for j in borrowing)
        lenders = ", ".join(str(found[j].depth) for j in own)
        why = (
            "one usable seed at every LR"
            if all(found[j].seed_counts[1] <= 1 for j in borrowing)
            else "no residual degrees of freedom under the additive seed model"
        )
        # each lender's seed SD, so a reader sees how alike the noise is across the depths measured
        sds = [float(np.sqrt(np.mean(pools[j][0] ** 2))) for j in own]
        spread = f"{min(sds):.3f}" if len(sds) == 1 else f"{min(sds):.3f} to {max(sds):.3f}"
        text = (
            f"L={depths} {'has' if len(borrowing) == 1 else 'have'} no seed noise of its own ({why}); its noise in the CI is borrowed: the residuals "
            f"pooled over this family's depths with several seeds (L={lenders}; {family_pool[0].size} residuals, "
            f"df {family_pool[1]}; seed SD {spread} nats there), which assumes the seed noise is alike across "
            "depths: where the borrowing depth is noisier, its interval is too narrow"
        )
        result.slope.ci_note = "; ".join(t for t in (result.slope.ci_note, text) if t)
        notes.append(Note(where_ff, text))
    opt_boot = np.empty((n_boot, len(found)))
    draws_of: list[tuple[np.ndarray, list[Optimum]]] = []  # per depth: resampled means, their optima
    for j, d in enumerate(found):
        c = d.curve
        means = d.fit.resample(n_boot, rng, family_pool if j in borrowing else None)
        optima = [fit_optimum(c.log2_lr, means[b], window=window, n_diverged=c.n_diverged) for b in range(n_boot)]
        opt_boot[:, j] = [o.log2_lr for o in optima]
        d.loss_draws = np.array([o.loss for o in optima])
        d.opt_draws = opt_boot[:, j].copy()
        d.curvature_draws = np.array(
            [o.fit.a if o.method == "quadratic" and o.fit is not None else np.nan for o in optima]
        )
        draws_of.append((means, optima))
    for j, d in enumerate(found):
        d.opt_ci = _percentile_ci(opt_boot[:, j])
        for side in d.open_ends:
            end = d.usable_end(side)
            beyond, why = d.beyond_end(side)
            if why == "grid":
                text = (
                    f"the optimum's CI ends on the {side}est LR tried (log2 lr {end:g}) and nothing past it was "
                    f"tried: the interval is cut there and understates the uncertainty on that side "
                    f"(try the next LR {'up' if side == 'high' else 'down'})"
                )
            else:
                ran = "runs failed or have no row at this eval point" if why == "missing" else "runs are pending"
                text = (
                    f"the optimum's CI ends on the {side}est usable LR (log2 lr {end:g}) and the next LR tried past "
                    f"it (log2 lr {beyond:g}) has no usable loss because its {ran}, not because they diverged: the "
                    f"interval is cut there and understates the uncertainty on that side (rerun or finish that LR)"
                )
            notes.append(Note(f"{where_ff} | L={d.depth}", text))
    _bootstrap_regrets(found, draws_of, where_ff, notes)
    if len(found) >= 2:
        slopes = depth_slopes(np.log2([d.depth for d in found]), opt_boot)
        result.slope.ci_low, result.slope.ci_high = _percentile_ci(slopes)
        result.drift_ci = _percentile_ci(np.ptp(opt_boot, axis=1))


# ---------------------------------------------------------------- optimal LR at a target depth


@dataclass(frozen=True)
class DepthPrediction:
    """The optimal log2 LR predicted at ``depth`` for one family and fraction from the depth
    trend (the slope fit's line), and the regret of training there with the base depth's LR.

    ``ci``: 95% bootstrap interval of the prediction: the line refitted to every draw of the
    per-depth optima, plus the scatter of the optima about the line beyond their seed noise
    (``lack_of_fit_sd``, normal). ``regret``: curvature x (base optimum - predicted optimum)^2,
    the curvature of the quadratic fit at the measured depth nearest in log2 depth
    (``curvature_depth``); its CI takes every draw's base optimum, prediction and curvature.
    """

    family: Family
    fraction: float
    depth: int
    log2_lr: float
    ci: tuple[float, float] | None
    base_depth: int | None
    base_log2_lr: float
    regret: float
    regret_ci: tuple[float, float] | None
    curvature_depth: int | None
    lack_of_fit_sd: float
    extrapolated: bool  # beyond the swept depths
    note: str = ""
    # the target depth was swept: what was measured there (its own optimum and regret, with their CIs), so the
    # line's reading is compared with the measurement instead of standing in for it
    measured: bool = False
    measured_log2_lr: float = math.nan
    measured_ci: tuple[float, float] | None = None
    measured_method: str | None = None
    measured_regret: float = math.nan
    measured_regret_ci: tuple[float, float] | None = None
    measured_note: str = ""

    def measured_text(self) -> str:
        """``measured there: optimal log2 LR -6.78 [-7.10, -6.50] (quadratic), regret of the L=2 LR 0.0350
        [0.0002, 0.2143]; the line is 0.69 octave below it`` ('' when the depth was not swept)."""
        if not self.measured:
            return ""
        if not math.isfinite(self.measured_log2_lr):
            return f"measured there: {self.measured_note}"
        ci = (
            f" [{number(self.measured_ci[0], '.2f')}, {number(self.measured_ci[1], '.2f')}]"
            if self.measured_ci
            else " (no CI)"
        )
        text = f"measured there: optimal log2 LR {number(self.measured_log2_lr, '.2f')}{ci} ({self.measured_method})"
        if math.isfinite(self.measured_regret):
            rci = (
                f" [{number(self.measured_regret_ci[0], '.4f')}, {number(self.measured_regret_ci[1], '.4f')}]"
                if self.measured_regret_ci
                else ""
            )
            text += f", regret of the L={self.base_depth} LR {number(self.measured_regret, '.4f')}{rci}"
        diff = self.log2_lr - self.measured_log2_lr
        if math.isfinite(diff):
            text += f"; the line is {abs(diff):.2f} octave {'above' if diff > 0 else 'below'} it"
        return text


def predict_at_depths(analysis: TransferAnalysis, depths: list[int], seed: int | None = None) -> list[DepthPrediction]:
    """One prediction per family x fraction x target depth (``eval transfer --target-depth``);
    ``seed`` defaults to the analysis's ``--bootstrap-seed``."""
    if seed is None:
        seed = analysis.settings.get("bootstrap_seed", 0)
    bad = [d for d in depths if d < 1]
    if bad:
        raise AnalysisInputError(f"--target-depth must be >= 1, got {bad}")
    out = []
    for r in analysis.results:
        for depth in depths:  # one RNG per target depth: a prediction does not depend on the other depths asked for
            out.append(_predict(r, depth, curve_rng(seed, r.family, r.fraction, 7919, depth)))
    return out


def _predict(r: FractionResult, depth: int, rng: np.random.Generator) -> DepthPrediction:
    prediction = _predict_from_trend(r, depth, rng)
    swept = next((d for d in r.depths if d.depth == depth), None)
    if swept is None:
        return prediction
    if not swept.optimum.found:
        return replace(prediction, measured=True, measured_note=f"L={depth} was swept but has no usable point")
    ok = swept.regret_status == "ok"
    return replace(
        prediction,
        measured=True,
        measured_log2_lr=swept.optimum.log2_lr,
        measured_ci=swept.opt_ci,
        measured_method=swept.optimum.method + (f", {swept.optimum.edge} edge" if swept.optimum.edge else ""),
        measured_regret=swept.regret if ok else math.nan,
        measured_regret_ci=swept.regret_ci if ok else None,
        measured_note="" if ok else f"no measured regret ({swept.regret_status})",
    )


def _predict_from_trend(r: FractionResult, depth: int, rng: np.random.Generator) -> DepthPrediction:
    found = [d for d in r.depths if d.optimum.found]
    base = r.base if r.base is not None and r.base.optimum.found else None
    base_x = base.optimum.log2_lr if base else math.nan
    if not r.slope.available:
        return DepthPrediction(r.family, r.fraction, depth, math.nan, None, r.base_depth, base_x, math.nan, None,
                               None, math.nan, True, r.slope.note or "no depth trend")  # fmt: skip
    x = np.log2([d.depth for d in found])
    y = np.array([d.optimum.log2_lr for d in found])
    target = math.log2(depth)
    pred = r.slope.intercept + r.slope.slope * target
    extrapolated = not (x.min() - 1e-9 <= target <= x.max() + 1e-9)
    quad = [d for d in found if d.optimum.method == "quadratic" and d.optimum.fit is not None]
    near = min(quad, key=lambda d: (abs(math.log2(d.depth) - target), -d.depth)) if quad else None
    curv = near.optimum.fit.a if near else math.nan
    regret = curv * (base_x - pred) ** 2 if base and near else math.nan
    notes = []
    if edges := [d.depth for d in found if d.optimum.edge is not None]:
        notes.append(f"optima at L={edges} are edge bounds")
    draws = [d.opt_draws for d in found]
    ci = regret_ci = None
    lof = math.nan
    if all(v is not None for v in draws) and len(found) >= 2:
        opt = np.column_stack(draws)  # (n_boot, n_depths)
        xc = x - x.mean()
        sxx = float(xc @ xc)
        slopes = (opt - opt.mean(axis=1, keepdims=True)) @ xc / sxx
        preds = opt.mean(axis=1) + slopes * (target - x.mean())
        # scatter of the optima about the line beyond their seed noise (0 with two depths: no df)
        lof = 0.0
        if len(found) >= 3:
            resid = y - (r.slope.intercept + r.slope.slope * x)
            excess = float(resid @ resid) / (len(found) - 2) - float(np.mean(np.var(opt, axis=0, ddof=1)))
            lof = math.sqrt(max(excess, 0.0))
            if lof > 0:
                preds = preds + lof * rng.standard_normal(preds.size)
        ci = _percentile_ci(preds)
        if base is not None and near is not None and base.opt_draws is not None:
            a = near.curvature_draws if near.curvature_draws is not None else np.full(preds.size, curv)
            a = np.where(np.isfinite(a), a, curv)
            shifts = base.opt_draws - preds
            regrets = a * shifts**2
            ok = np.isfinite(regrets)
            regret_ci = _percentile_ci(regrets[ok])
            # a squared shift's percentiles sit above 0 even when the shift's own interval holds 0
            # (the base LR consistent with the optimum there): the point regret then fell below
            # its interval (0.0029 [0.0073, 0.3247]); its lower end is 0 there, as for a measured regret
            low, high = _percentile_ci(shifts[ok])
            if low <= 0.0 <= high:
                regret_ci = (0.0, regret_ci[1])
    else:
        notes.append("no bootstrap draws (one seed, or --bootstrap 0): no interval")
    if extrapolated:
        notes.append(f"L={depth} is outside the swept depths {[d.depth for d in r.depths]}: the line is extrapolated")
    if near is None:
        notes.append("no depth has a quadratic optimum: no curvature, no regret")
    return DepthPrediction(r.family, r.fraction, depth, float(pred), ci, r.base_depth, base_x, float(regret),
                           regret_ci, near.depth if near else None, lof, extrapolated, "; ".join(notes))  # fmt: skip

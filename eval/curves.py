"""Loss-vs-LR curves: the sweep's rows collapsed to seed losses per (family, fraction, depth, LR).

A *family* is a set of runs that differ only in depth, learning rate and seed (same preset,
width, block multiplier and every other swept key), so that "does the optimal LR move with
depth?" is a question about one family. Each run contributes at most one point per eval
fraction, classified as usable (a finite held-out loss), diverged or missing; pending runs
are left out and counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from eval.results import FAMILY_KEYS, FRACTION_ATOL, SweepResults
from rundir.contract import PARAMETRIZATION_KEYS, STEPS_KEY

BASE_FAMILY_COLUMNS: tuple[str, ...] = FAMILY_KEYS  # eval.results owns what a family is
# Columns a label names only where the others do not imply them: a WSD cooldown branch trains to
# training.steps = branch_of.step + scheduler.wsd_decay_steps (launch.sweep_spec's `cooldown`).
IMPLIED_COLUMNS: tuple[str, ...] = (STEPS_KEY,)
RUN_COLUMNS: tuple[str, ...] = (
    "run_id",
    "preset",
    "depth",
    "lr",
    "seed",
    "block_multiplier",
    "base_depth",
    "hidden_size",
)


@dataclass(frozen=True)
class Family:
    """Runs compared across depth. ``keys`` holds every family column; ``shown`` those that vary in the sweep."""

    preset: str
    keys: tuple[tuple[str, str], ...]
    shown: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        extras = [  # a key the family's runs do not set (e.g. alpha of a fixed preset) is not named
            f"{name}={value}" for name, value in self.keys if name in self.shown and name != "preset" and value != ""
        ]
        return self.preset + (f" ({', '.join(extras)})" if extras else "")

    def key_dict(self) -> dict[str, str]:
        return dict(self.keys)

    def value(self, name: str) -> str:
        return self.key_dict()[name]

    def sort_key(self) -> tuple:
        """Where the family comes in every report (``eval transfer``, ``eval dynamics``): by its
        column values, column by column (:func:`family_order`)."""
        return family_order(tuple(value for _, value in self.keys))


@dataclass
class DepthCurve:
    """One depth's loss against log2 LR at one eval fraction, seeds kept apart.

    ``log2_lr`` lists every LR tried at this depth (pending runs excluded), ascending;
    ``seed_losses[i]`` holds the usable per-seed losses at ``log2_lr[i]`` (possibly empty) and
    ``seed_ids[i]`` the seeds (``run.seed``) that gave them;
    ``n_diverged[i]`` / ``n_missing[i]`` count the seeds left out there and why.
    ``pending_log2_lr`` lists the LRs (log2) where a run of this depth is still pending: tried,
    with no result yet (not in ``log2_lr`` unless another run there has ended).
    """

    depth: int
    log2_lr: np.ndarray
    seed_losses: list[np.ndarray]
    n_diverged: np.ndarray
    n_missing: np.ndarray
    seed_ids: list[np.ndarray] = field(default_factory=list)
    diverged_run_ids: list[str] = field(default_factory=list)
    missing_run_ids: list[str] = field(default_factory=list)
    nonfinite_run_ids: list[str] = field(default_factory=list)  # not diverged by status, but a nan/inf loss
    pending_log2_lr: np.ndarray = field(default_factory=lambda: np.empty(0))
    # each log2_lr's LR as the table had it (0.0156, not 2^log2(0.0156) = 0.015600000000000001):
    # what reports print; the fits work in log2_lr. Empty: 2^log2_lr (a curve built without the table)
    lr: np.ndarray = field(default_factory=lambda: np.empty(0))

    def __post_init__(self) -> None:
        if len(self.lr) != len(self.log2_lr):
            self.lr = np.exp2(np.asarray(self.log2_lr, dtype=float))

    @property
    def n_seeds(self) -> np.ndarray:
        return np.array([len(v) for v in self.seed_losses], dtype=int)

    @property
    def mean_loss(self) -> np.ndarray:
        """Seed-mean loss per LR; NaN where no seed is usable."""
        return np.array([v.mean() if len(v) else math.nan for v in self.seed_losses])

    @property
    def std_loss(self) -> np.ndarray:
        """Seed std (ddof=1) per LR; NaN with fewer than two usable seeds."""
        return np.array([v.std(ddof=1) if len(v) > 1 else math.nan for v in self.seed_losses])

    @property
    def usable(self) -> np.ndarray:
        return self.n_seeds > 0


@dataclass
class CurveSet:
    """All curves of the sweep at the analysed fractions, plus the bookkeeping the warnings need."""

    families: list[Family]
    fractions: list[float]
    curves: dict[tuple[Family, float], list[DepthCurve]]
    base_depths_recorded: dict[Family, list[int]]
    n_pending_runs: int
    n_runs: int  # rows of distinct run IDs, shared base copies included
    pending_run_ids: list[str]
    n_shared: int = 0  # copies of base-depth runs standing for another preset (eval.results.share_base_depth)

    @property
    def n_trained(self) -> int:
        """Runs actually trained: every shared base-depth run once (what ``launch status`` counts)."""
        return self.n_runs - self.n_shared


def family_columns(sweep: SweepResults) -> list[str]:
    return [*BASE_FAMILY_COLUMNS, *sweep.extra_keys]


def _format_value(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


_CHUNKS = re.compile(r"(\d+)")


def natural_key(value: object) -> tuple:
    """Sort key of one family-column value: empty (a table without the column) first, then
    numbers as numbers (``6`` before ``18``, ``1e-4`` before ``0.01``), then text with its digit
    runs compared as numbers (``linear1`` before ``linear12``)."""
    text = str(value).strip()
    if text == "":
        return (0,)
    try:
        number = float(text)
    except ValueError:
        return (2, tuple((0, int(c), "") if c.isdigit() else (1, 0, c) for c in _CHUNKS.split(text) if c))
    return (1, number) if math.isfinite(number) else (2, ((1, 0, text),))


def family_order(values: tuple) -> tuple:
    """Sort key of a family's column values (:func:`natural_key` per column, in column order)."""
    return tuple(natural_key(v) for v in values)


def shown_columns(runs: pd.DataFrame, columns: list[str]) -> tuple[str, ...]:
    """The columns a family's label names: those that tell the families apart.

    A column with two or more non-empty values is shown. A column with one non-empty value that
    some runs lack (a cooldown sweep's fixed ``optimizer.min_lr_ratio=0.0`` beside a stable sweep
    that has no such column) says only which table a family came from: it is shown only where the
    other shown columns leave two families with the same label (then, in column order, until none
    do), so ``depth_mup`` and ``depth_mup (optimizer.min_lr_ratio=0.0)`` still differ. Preset
    custom's ``parametrization.alpha`` / ``gamma`` are named wherever set: they are its identity.
    A column of :data:`IMPLIED_COLUMNS` is left out where the other shown columns tell the
    families apart without it: a cooldown branch's ``training.steps`` is its ``branch_of.step``
    plus its cooldown (``scheduler.wsd_decay_steps``), so ``depth_mup (branch_of.step=6)``, not
    ``depth_mup (training.steps=8, branch_of.step=6)``."""
    varying, presence = [], []
    for c in columns:
        values = set(runs[c].astype(str).str.strip())
        named = values - {""}
        if len(named) > 1:
            varying.append(c)
        elif named and len(values) > 1 and c in PARAMETRIZATION_KEYS:
            varying.append(c)  # preset custom's alpha and gamma say which parametrization it is: always named
        elif named and len(values) > 1:
            presence.append(c)
    combos = runs[columns].astype(str).drop_duplicates()  # one row per family

    def same_labels(shown: list[str]) -> bool:
        return bool(combos.duplicated(subset=shown).any()) if shown else len(combos) > 1

    for c in presence:
        if not same_labels(varying):
            break
        varying.append(c)
    for c in IMPLIED_COLUMNS:  # named only where the other shown columns do not say it
        if c in varying and not same_labels([v for v in varying if v != c]):
            varying.remove(c)
    return tuple(c for c in columns if c in varying)


def build_families(runs: pd.DataFrame, columns: list[str]) -> dict[tuple, Family]:
    """Map each distinct tuple of family-column values to a :class:`Family`."""
    shown = shown_columns(runs, columns)
    out: dict[tuple, Family] = {}
    for values, _ in runs.groupby(columns, sort=True, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        keys = tuple((c, _format_value(v)) for c, v in zip(columns, values))
        out[values] = Family(preset=str(values[0]), keys=keys, shown=shown)
    return out


def build_curves(sweep: SweepResults, fractions: list[float], *, use_evals_before_divergence: bool = False) -> CurveSet:
    """Collapse the rows into :class:`DepthCurve` objects, one per family x fraction x depth."""
    rows = sweep.rows
    columns = family_columns(sweep)
    runs = rows.drop_duplicates("run_id").set_index("run_id", drop=False)
    pending = runs[runs["status"] == "pending"]
    active = runs[runs["status"] != "pending"]
    families = build_families(runs, columns)
    curves: dict[tuple[Family, float], list[DepthCurve]] = {}
    base_depths: dict[Family, list[int]] = {}
    at_fraction = {fraction: _rows_at_fraction(rows, fraction) for fraction in fractions}
    pending_lrs: dict[tuple, np.ndarray] = {}  # (family values..., depth) -> log2 LRs with a pending run
    for values, group in pending.groupby([*columns, "depth"], sort=False, dropna=False):
        pending_lrs[values] = np.unique(np.log2(group["lr"].to_numpy(dtype=float)))
    for values, fam_runs in active.groupby(columns, sort=True, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        family = families[values]
        base_depths[family] = sorted(int(v) for v in fam_runs["base_depth"].unique() if pd.notna(v))
        for fraction in fractions:
            curves[(family, fraction)] = [
                _depth_curve(
                    int(depth),
                    depth_runs,
                    at_fraction[fraction],
                    use_evals_before_divergence,
                    pending_lrs.get((*values, depth), np.empty(0)),
                )
                for depth, depth_runs in fam_runs.groupby("depth", sort=True)
            ]
    # Families whose runs are all pending still get an (empty) entry so they are reported.
    ordered = sorted(families.values(), key=Family.sort_key)
    for family in ordered:
        base_depths.setdefault(family, [])
        for fraction in fractions:
            curves.setdefault((family, fraction), [])
    return CurveSet(
        families=ordered,
        fractions=list(fractions),
        curves=curves,
        base_depths_recorded=base_depths,
        n_pending_runs=len(pending),
        n_runs=len(runs),
        pending_run_ids=pending["run_id"].tolist(),
        n_shared=int(runs["shared_copy"].eq(True).sum()) if "shared_copy" in runs else 0,
    )


def _rows_at_fraction(rows: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """The rows at ``fraction``, indexed by run ID (one per run: every :class:`SweepResults` comes
    from ``read_results`` or ``results_from_records``, whose ``check_duplicates`` refused repeats)."""
    sub = rows[np.isclose(rows["fraction"], fraction, rtol=0.0, atol=FRACTION_ATOL)]
    return sub.set_index("run_id", verify_integrity=True)


def _depth_curve(
    depth: int,
    depth_runs: pd.DataFrame,
    at_fraction: pd.DataFrame,
    keep_pre_div: bool,
    pending_log2_lr: np.ndarray | None = None,
) -> DepthCurve:
    """Each run of one depth at one fraction, classified on whole columns, then collected per LR:
    ``usable`` (a finite loss; a diverged run's only with ``keep_pre_div``), ``diverged`` (by
    status, or ``nonfinite``: a nan/inf loss recorded by a run not marked diverged) or
    ``missing`` (no row at the fraction, or no loss recorded)."""
    # seeds in a fixed order within each LR, whatever the row order of results.csv: the bootstrap
    # draws by position, so the same runs give the same CIs (the study planner builds its rows itself)
    depth_runs = depth_runs.sort_values(["lr", "seed"], kind="stable")
    depth_runs = depth_runs[depth_runs["lr"].notna()]  # as groupby("lr") leaves them out
    ids = depth_runs.index
    row = at_fraction.index.get_indexer(ids)  # each run's row at the fraction; -1: none
    present = row >= 0
    loss = np.full(len(ids), math.nan)
    loss[present] = at_fraction["val_loss"].to_numpy(dtype=float)[row[present]]
    recorded = np.zeros(len(ids), dtype=bool)
    recorded[present] = at_fraction["val_loss_recorded"].to_numpy(dtype=bool)[row[present]]
    div_status = depth_runs["status"].to_numpy() == "diverged"
    usable = present & np.isfinite(loss) & ~(div_status & (not keep_pre_div))
    nonfinite = present & ~usable & ~div_status & recorded
    diverged = (div_status & ~usable) | nonfinite  # a nan/inf loss from a run not marked diverged counts so
    missing = ~usable & ~diverged
    lrs = depth_runs["lr"].to_numpy(dtype=float)
    seeds = depth_runs["seed"].to_numpy()
    uniq, starts = np.unique(lrs, return_index=True)  # sorted: each LR's runs are one slice
    bounds = [*starts[1:], len(lrs)]
    slices = [slice(a, b) for a, b in zip(starts, bounds)]
    run_ids = np.array([str(i) for i in ids], dtype=object)
    return DepthCurve(
        depth=depth,
        log2_lr=np.array([math.log2(float(lr)) for lr in uniq]),
        lr=np.array(uniq, dtype=float),
        seed_losses=[np.array(loss[s][usable[s]], dtype=float) for s in slices],
        n_diverged=np.array([int(diverged[s].sum()) for s in slices], dtype=int),
        n_missing=np.array([int(missing[s].sum()) for s in slices], dtype=int),
        seed_ids=[np.array(seeds[s][usable[s]], dtype=int) for s in slices],
        diverged_run_ids=list(run_ids[diverged]),
        missing_run_ids=list(run_ids[missing]),
        nonfinite_run_ids=list(run_ids[nonfinite]),
        pending_log2_lr=np.empty(0) if pending_log2_lr is None else np.asarray(pending_log2_lr, dtype=float),
    )

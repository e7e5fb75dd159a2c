"""How one loss-vs-LR curve's seed losses become the means the optimum is fitted to, and how
those means are resampled for the bootstrap CIs (``eval transfer --seed-model``).

- ``independent`` (default): each LR cell's plain seed mean, cells treated as independent.
- ``additive``: ``loss = seed offset + LR effect + noise``, fitted by least squares with the
  offsets summing to zero, so each LR's mean is the loss of the average seed. A study trains
  every seed with the same data order at several LRs, and a seed that starts from a worse
  initialization is often worse at all of them; removing the offsets is the paired
  comparison of common random numbers, and stops a cell trained with one seed (the
  planner's far points) from inheriting that seed's offset.

Both bootstraps are residual bootstraps with the residuals pooled over the curve and the
pooled noise level drawn per sample (sqrt(df/chi2_df), the analogue of a t interval).

Seeds that diverged at an LR where other seeds finished are information about that LR, not
missing data: the cell's value is the mean over every seed that ended, with a diverged seed
counted at the curve's worst finished loss (``cap``: a run that diverged is no better than the
worst run that finished at this depth). So an LR where one seed in three diverges is not the
best LR because its two survivors were lucky, and which near-edge seeds diverge on a given
machine moves the cell by (share diverged) x (cap - survivors' mean), not from "best" to
"unusable". The bootstrap draws the number of diverged seeds of such a cell from a binomial
with the observed share. A cell where every seed diverged stays unusable (nothing finished
there: the edge of the usable LRs). Why this cap and what it does to planted optima:
docs/eval.md, "Seeds that diverge".

Why ``independent`` stays the default (measured, docs/eval.md and docs/study_design.md): on
planted curves with offsets of 0.05 nats per seed the additive model's optimum CIs are less
than half as wide (coverage 0.94 against 0.99), but on the demo study's real curves the seeds of LRs near divergence scatter
far more than at the optimum; the additive fit spreads that scatter into the offsets and the
pooled noise of every cell, and the base depth's optimum CI widened to the grid's edge. The
additive model falls back to ``independent`` when the seeds do not link the LRs (no seed at
two LRs), as in a sweep that trains each LR with its own seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

SEED_MODELS = ("additive", "independent")


@dataclass(frozen=True)
class CurveMeans:
    """The means of one curve's LR cells (NaN where no seed is usable) and their bootstrap.

    ``means`` are what the optimum is fitted to: ``survivor_means`` (the seed model's means of
    the finished seeds) with every partly diverged cell's diverged seeds counted at ``cap``.
    """

    means: np.ndarray
    model: str  # the model actually used ("independent" when "additive" had to fall back)
    seed_losses: list[np.ndarray]
    _fitted: np.ndarray  # additive model: fitted loss of every usable run, cell by cell
    _to_means: np.ndarray  # additive model: (n_cells, n_runs) linear map from losses to cell means
    _residuals: np.ndarray  # additive model: residuals scaled to unbiased variance
    _df: int
    survivor_means: np.ndarray | None = None  # the seed model's means of the finished seeds
    n_diverged: np.ndarray | None = None  # per cell: seeds that diverged
    cap: float = math.nan  # the loss a diverged seed of a partly diverged cell counts at

    @property
    def partial(self) -> np.ndarray:
        """Cells where some seeds diverged and others finished."""
        n = np.array([len(v) for v in self.seed_losses], dtype=int)
        k = np.zeros_like(n) if self.n_diverged is None else np.asarray(self.n_diverged, dtype=int)
        return (n > 0) & (k > 0)

    def noise_pool(self) -> tuple[np.ndarray, int]:
        """The curve's own seed residuals (scaled to unbiased variance) and their degrees of
        freedom, the noise its bootstrap draws from; empty with 0 df when the curve has no seed
        noise of its own (one usable seed at every LR, or an additive fit with no residual df)."""
        if self.model == "independent":
            return _independent_pool(self.seed_losses)
        return self._residuals, self._df

    def resample(
        self, n_boot: int, rng: np.random.Generator, borrowed: tuple[np.ndarray, int] | None = None
    ) -> np.ndarray:
        """``(n_boot, n_cells)`` bootstrap means. ``borrowed`` (residuals, df): the seed noise
        to draw from when the curve has none of its own (:meth:`noise_pool` empty), pooled from
        other curves of its family (``eval.transfer``); ignored when the curve has its own."""
        if borrowed is not None and (self.noise_pool()[1] > 0 or borrowed[1] <= 0):
            borrowed = None
        partial = self.partial
        if not partial.any():
            return self._resample_survivors(n_boot, rng, None, borrowed)
        n = np.array([len(v) for v in self.seed_losses], dtype=int)
        m = n + np.asarray(self.n_diverged, dtype=int)  # seeds that ended (finished or diverged)
        k = np.zeros((n_boot, n.size), dtype=int)
        k[:, partial] = rng.binomial(
            m[partial], (m[partial] - n[partial]) / m[partial], size=(n_boot, int(partial.sum()))
        )
        survivors = np.where(partial, m - k, n)
        out = self._resample_survivors(n_boot, rng, survivors, borrowed)
        share = k / m.clip(min=1)
        out = (1.0 - share) * out + share * self.cap
        out[survivors == 0] = np.nan  # every seed of the cell diverged in this draw: unusable
        return out

    def _resample_survivors(
        self,
        n_boot: int,
        rng: np.random.Generator,
        survivors: np.ndarray | None,
        borrowed: tuple[np.ndarray, int] | None = None,
    ) -> np.ndarray:
        if self.model == "independent":
            return _resampled_cell_means(self.seed_losses, n_boot, rng, survivors, borrowed)
        base = self.means if self.survivor_means is None else self.survivor_means
        residuals, df = (self._residuals, self._df) if self._residuals.size or borrowed is None else borrowed
        if not residuals.size:  # the model fits exactly and nothing is borrowed: every draw is the estimate
            return np.tile(base, (n_boot, 1))
        # losses = fitted + pooled residuals drawn with replacement (times the noise-level draw), refitted
        scale = np.sqrt(df / rng.chisquare(df, size=(n_boot, 1)))
        draws = residuals[rng.integers(0, residuals.size, size=(n_boot, self._fitted.size))] * scale
        out = np.full((n_boot, base.size), np.nan)
        usable = np.isfinite(base)
        out[:, usable] = (self._fitted + draws) @ self._to_means[usable].T
        return out


def curve_means(
    seed_losses: list[np.ndarray],
    seed_ids: list[np.ndarray],
    model: str = "independent",
    n_diverged: np.ndarray | list[int] | None = None,
) -> CurveMeans:
    """Fit ``model`` to one curve: ``seed_losses[i]`` are LR cell i's usable losses,
    ``seed_ids[i]`` the seeds that gave them and ``n_diverged[i]`` how many seeds diverged
    there (counted at the curve's worst finished loss where other seeds finished)."""
    fit = _survivor_means(seed_losses, seed_ids, model)
    if n_diverged is None:
        return fit
    k = np.asarray(n_diverged, dtype=int)
    n = np.array([len(v) for v in seed_losses], dtype=int)
    if k.shape != n.shape:
        raise ValueError(f"n_diverged has {k.size} cells, seed_losses {n.size}")
    partial = (n > 0) & (k > 0)
    if not partial.any():
        return fit
    cap = max(float(np.max(v)) for v in seed_losses if len(v))
    share = np.where(partial, k / (n + k).clip(min=1), 0.0)
    means = (1.0 - share) * fit.means + share * cap
    return replace(fit, means=means, survivor_means=fit.means, n_diverged=k, cap=cap)


def _survivor_means(seed_losses: list[np.ndarray], seed_ids: list[np.ndarray], model: str) -> CurveMeans:
    if model not in SEED_MODELS:
        raise ValueError(f"seed model must be one of {SEED_MODELS}, got {model!r}")
    n_cells = len(seed_losses)
    empty = np.empty(0)
    cells = np.concatenate([np.full(len(v), i) for i, v in enumerate(seed_losses)] or [empty]).astype(int)
    losses = np.concatenate([np.asarray(v, dtype=float) for v in seed_losses] or [empty])
    seeds = np.concatenate([np.asarray(s) for s in seed_ids] or [empty])
    if model == "additive" and _seeds_link_cells(cells, seeds):
        design = _additive_design(cells, seeds)
        used = np.unique(cells)
        to_params = np.linalg.pinv(design)
        means = np.full(n_cells, np.nan)
        to_means = np.zeros((n_cells, losses.size))
        to_means[used] = to_params[: used.size]
        means[used] = to_means[used] @ losses
        fitted = design @ (to_params @ losses)
        df = losses.size - design.shape[1]
        residuals = (losses - fitted) * math.sqrt(losses.size / df) if df > 0 else empty
        return CurveMeans(means, "additive", seed_losses, fitted, to_means, residuals, max(df, 0))
    plain = np.array([v.mean() if len(v) else math.nan for v in seed_losses])
    return CurveMeans(plain, "independent", seed_losses, empty, empty, empty, 0)


def _independent_pool(seed_losses: list[np.ndarray]) -> tuple[np.ndarray, int]:
    """Centred seed losses of every cell with two or more seeds, each scaled by
    sqrt(n_i/(n_i-1)) so their variance is unbiased, and their degrees of freedom."""
    seeded = [v for v in seed_losses if v.size >= 2]
    residuals = [(v - v.mean()) * math.sqrt(v.size / (v.size - 1)) for v in seeded]
    pool = np.concatenate(residuals) if residuals else np.empty(0)
    return pool, sum(v.size - 1 for v in seeded)


def _resampled_cell_means(
    seed_losses: list[np.ndarray],
    n_boot: int,
    rng: np.random.Generator,
    survivors: np.ndarray | None = None,
    borrowed: tuple[np.ndarray, int] | None = None,
) -> np.ndarray:
    """Bootstrap seed means of every LR cell under the independent model, ``(n_boot, n_lr)``.

    Each cell's mean plus the mean of ``n`` residuals drawn from all cells' centred seed
    losses, each scaled by sqrt(n_i/(n_i-1)) so their variance is unbiased. Resampling a
    cell's own 3 seeds instead shrinks the spread by (n-1)/n and has only 2 degrees of
    freedom: on planted sweeps its nominal 95% CIs of the optimum covered the truth 75% of the
    time (docs/eval.md). When no cell has two seeds the curve has no noise of its own: it draws
    from ``borrowed`` (residuals, df) pooled over its family's other depths, and without that
    every draw is the observed mean (a zero-width interval, which ``eval.transfer`` never
    reports: it gives no CI then). ``survivors`` (``(n_boot, n_lr)``, for partly diverged
    cells) is how many seeds finished in each draw: the mean of that many residuals is drawn
    instead.
    """
    pool, df = _independent_pool(seed_losses)
    if not df and borrowed is not None:
        pool, df = borrowed
    scale = np.sqrt(df / rng.chisquare(df, size=(n_boot, 1))) if df else np.ones((n_boot, 1))
    means = np.full((n_boot, len(seed_losses)), np.nan)
    for i, losses in enumerate(seed_losses):
        if not losses.size:
            continue
        if pool.size and survivors is not None and np.any(survivors[:, i] != losses.size):
            n_i = survivors[:, i]
            width = max(int(n_i.max()), 1)
            draws = pool[rng.integers(0, pool.size, size=(n_boot, width))] * scale
            kept = np.arange(width)[None, :] < n_i[:, None]
            means[:, i] = losses.mean() + (draws * kept).sum(axis=1) / np.maximum(n_i, 1)
        elif pool.size:
            draws = pool[rng.integers(0, pool.size, size=(n_boot, losses.size))] * scale
            means[:, i] = losses.mean() + draws.mean(axis=1)
        else:
            draws = rng.integers(0, losses.size, size=(n_boot, losses.size))
            means[:, i] = losses[draws].mean(axis=1)
    return means


def _seeds_link_cells(cells: np.ndarray, seeds: np.ndarray) -> bool:
    """Whether two or more cells form one connected group through shared seeds (every seed's
    offset, and so every cell's mean, is then identified)."""
    used = np.unique(cells)
    if used.size < 2:
        return False
    parent = {int(c): int(c) for c in used}

    def root(c: int) -> int:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    for s in np.unique(seeds):
        at = np.unique(cells[seeds == s]).astype(int)
        for c in at[1:]:
            parent[root(int(c))] = root(int(at[0]))
    return len({root(int(c)) for c in used}) == 1


def _additive_design(cells: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Columns: one per used cell (its mean over seeds), then seed offsets in effect coding
    (the last seed's offset is minus the sum of the others, so the offsets sum to zero)."""
    used = np.unique(cells)
    kinds = np.unique(seeds)
    x = np.zeros((cells.size, used.size + kinds.size - 1))
    x[np.arange(cells.size), np.searchsorted(used, cells)] = 1.0
    for j, s in enumerate(kinds[:-1]):
        x[seeds == s, used.size + j] = 1.0
    x[seeds == kinds[-1], used.size :] = -1.0
    return x

"""The optimal learning rate of one loss-vs-LR curve: a local quadratic in log2 LR.

Grid sweeps step the LR by a constant factor, so the loss basin is close to a parabola in
log2 LR near its bottom. Fitting one through the best grid point and its usable neighbours
places the optimum between grid points, which is what makes a small drift across depths
measurable at all. When the fit cannot be trusted (too few points, the best point on the
edge of the usable range, a non-convex parabola, a vertex outside the fitted bracket) the
best grid point is used instead and the reason is recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_FIT_POINTS = 3
_EPS = 1e-9


@dataclass(frozen=True)
class QuadraticFit:
    """``loss = a*(x - x0)^2 + b*(x - x0) + c`` in ``x = log2 lr``, trusted on ``[lo, hi]``."""

    a: float
    b: float
    c: float
    x0: float
    lo: float
    hi: float
    n_points: int

    def __call__(self, x: float | np.ndarray) -> float | np.ndarray:
        d = np.asarray(x, dtype=float) - self.x0
        out = self.a * d * d + self.b * d + self.c
        return float(out) if np.ndim(out) == 0 else out

    @property
    def vertex(self) -> float:
        return self.x0 - self.b / (2.0 * self.a)

    def contains(self, x: float) -> bool:
        return self.lo - _EPS <= x <= self.hi + _EPS


@dataclass(frozen=True)
class Optimum:
    """Where a curve is lowest. ``method`` is ``quadratic``, ``grid`` (fallback) or ``none`` (no usable point).

    ``edge`` is ``low``/``high`` when the best usable point has no usable neighbour on that
    side, so the true optimum may lie beyond it; ``edge_reason`` says whether that side is
    the end of the LR grid (``grid``) or LRs that were tried but ``diverged``/``missing``.
    ``fallback`` names why the best grid point was used (``few_points``, ``edge``,
    ``not_convex``, ``vertex_outside``; None when the quadratic was accepted) and ``note``
    explains it in words.
    """

    log2_lr: float
    loss: float
    method: str
    best_index: int | None
    edge: str | None = None
    edge_reason: str | None = None
    fit: QuadraticFit | None = None
    fallback: str | None = None
    note: str = ""

    @property
    def lr(self) -> float:
        return 2.0**self.log2_lr if math.isfinite(self.log2_lr) else math.nan

    @property
    def found(self) -> bool:
        return self.method != "none"


def fit_quadratic(x: np.ndarray, y: np.ndarray, x0: float) -> QuadraticFit:
    """Least-squares parabola through ``(x, y)`` (exact for three points), centred at ``x0`` for conditioning.

    Solved from the 3x3 normal equations in plain floats: the bootstrap calls this thousands
    of times on a handful of points, where ``numpy.linalg`` overhead would dominate.
    """
    xs = [float(v) - x0 for v in x]
    ys = [float(v) for v in y]
    s0 = float(len(xs))
    s1 = sum(xs)
    s2 = sum(d * d for d in xs)
    s3 = sum(d**3 for d in xs)
    s4 = sum(d**4 for d in xs)
    t0 = sum(ys)
    t1 = sum(d * v for d, v in zip(xs, ys))
    t2 = sum(d * d * v for d, v in zip(xs, ys))
    # normal equations [[s4 s3 s2] [s3 s2 s1] [s2 s1 s0]] @ (a, b, c) = (t2, t1, t0), by Cramer's rule
    det = s4 * (s2 * s0 - s1 * s1) - s3 * (s3 * s0 - s1 * s2) + s2 * (s3 * s1 - s2 * s2)
    if det == 0.0 or not math.isfinite(det):
        a = b = 0.0
        c = t0 / s0 if s0 else math.nan
    else:
        a = (t2 * (s2 * s0 - s1 * s1) - s3 * (t1 * s0 - s1 * t0) + s2 * (t1 * s1 - s2 * t0)) / det
        b = (s4 * (t1 * s0 - s1 * t0) - t2 * (s3 * s0 - s1 * s2) + s2 * (s3 * t0 - t1 * s2)) / det
        c = (s4 * (s2 * t0 - t1 * s1) - s3 * (s3 * t0 - t1 * s2) + t2 * (s3 * s1 - s2 * s2)) / det
    return QuadraticFit(a, b, c, float(x0), float(min(x)), float(max(x)), len(xs))


def fit_optimum(
    log2_lr: np.ndarray, mean_loss: np.ndarray, *, window: int = 1, n_diverged: np.ndarray | None = None
) -> Optimum:
    """Optimum of one curve (``mean_loss`` NaN where no seed is usable).

    ``window`` usable neighbours on each side of the best point enter the fit (1 -> an exact
    parabola through three points). ``n_diverged`` (per LR) only sharpens ``edge_reason``.
    """
    log2_lr = np.asarray(log2_lr, dtype=float)
    mean_loss = np.asarray(mean_loss, dtype=float)
    idx = np.flatnonzero(np.isfinite(mean_loss))
    if idx.size == 0:
        return Optimum(
            math.nan, math.nan, "none", None, note=f"no usable LR point (all {log2_lr.size} tried LRs unusable)"
        )
    xs, ys = log2_lr[idx], mean_loss[idx]
    j = int(np.argmin(ys))
    best = int(idx[j])
    edge, edge_reason = _edge(best, j, idx, log2_lr.size, n_diverged)
    grid = Optimum(float(xs[j]), float(ys[j]), "grid", best, edge, edge_reason)
    if idx.size < MIN_FIT_POINTS:
        return _fallback(
            grid, "few_points", f"only {idx.size} usable LR point(s); a quadratic fit needs {MIN_FIT_POINTS}"
        )
    if edge is not None:
        if edge_reason == "grid":
            where = f"the {edge} edge of the LR grid"
        else:
            side = "lower" if edge == "low" else "higher"
            where = f"the {edge} edge of the usable LRs ({side} LRs {edge_reason})"
        return _fallback(grid, "edge", f"best point is at {where}: optimum not bracketed, no quadratic fit")
    lo, hi = max(0, j - window), min(idx.size - 1, j + window)
    fit = fit_quadratic(xs[lo : hi + 1], ys[lo : hi + 1], x0=float(xs[j]))
    if not fit.a > 0:
        return _fallback(
            grid, "not_convex", f"fitted parabola is not convex (curvature {fit.a:.3g}); using the best grid point"
        )
    vertex = fit.vertex
    if not fit.contains(vertex):
        return _fallback(
            grid,
            "vertex_outside",
            f"fitted vertex log2 lr={vertex:.3f} leaves the bracket [{fit.lo:.3f}, {fit.hi:.3f}]; using the best grid point",
        )
    return Optimum(vertex, fit(vertex), "quadratic", best, edge, edge_reason, fit)


def _edge(
    best: int, j: int, idx: np.ndarray, n_tried: int, n_diverged: np.ndarray | None
) -> tuple[str | None, str | None]:
    def reason(beyond: slice) -> str:
        if n_diverged is not None and np.any(np.asarray(n_diverged)[beyond] > 0):
            return "diverged"
        return "missing"

    if j == 0:
        return "low", "grid" if best == 0 else reason(slice(0, best))
    if j == idx.size - 1:
        return "high", "grid" if best == n_tried - 1 else reason(slice(best + 1, n_tried))
    return None, None


def _fallback(opt: Optimum, kind: str, note: str) -> Optimum:
    return Optimum(opt.log2_lr, opt.loss, opt.method, opt.best_index, opt.edge, opt.edge_reason, None, kind, note)


@dataclass(frozen=True)
class LossAt:
    """A curve read at one LR: ``status`` is ``ok`` (then ``method`` is ``quadratic``/``linear``),
    ``outside_grid`` (the LR was never swept at this depth) or ``diverged``/``missing`` (the LR
    lies inside the grid but beyond the usable points)."""

    loss: float
    status: str
    method: str | None
    note: str = ""


def loss_at(
    log2_lr: np.ndarray, mean_loss: np.ndarray, optimum: Optimum, x: float, *, n_diverged: np.ndarray | None = None
) -> LossAt:
    """Loss of a curve at ``x = log2 lr``: the fitted quadratic inside its bracket, else linear interpolation."""
    log2_lr = np.asarray(log2_lr, dtype=float)
    mean_loss = np.asarray(mean_loss, dtype=float)
    if log2_lr.size == 0 or x < log2_lr.min() - _EPS or x > log2_lr.max() + _EPS:
        span = f"[{log2_lr.min():.3f}, {log2_lr.max():.3f}]" if log2_lr.size else "(empty)"
        return LossAt(math.nan, "outside_grid", None, f"log2 lr={x:.3f} is outside this depth's LR grid {span}")
    if optimum.fit is not None and optimum.method == "quadratic" and optimum.fit.contains(x):
        return LossAt(optimum.fit(x), "ok", "quadratic")
    finite = np.isfinite(mean_loss)
    xs, ys = log2_lr[finite], mean_loss[finite]
    if xs.size and xs.min() - _EPS <= x <= xs.max() + _EPS:
        return LossAt(float(np.interp(x, xs, ys)), "ok", "linear")
    if not xs.size:
        beyond = np.ones(log2_lr.size, dtype=bool)
    elif x > xs.max():
        beyond = log2_lr > xs.max() + _EPS
    else:
        beyond = log2_lr < xs.min() - _EPS
    status = "diverged" if n_diverged is not None and np.any(np.asarray(n_diverged)[beyond] > 0) else "missing"
    usable = f"[{xs.min():.3f}, {xs.max():.3f}]" if xs.size else "(none)"
    return LossAt(
        math.nan, status, None, f"log2 lr={x:.3f} lies beyond this depth's usable LRs {usable}: runs there {status}"
    )

"""The feature diversity exponent (TP-VI Def. 7.6) of a list of residual streams: pure numpy.

Given the streams ``h_0 .. h_L`` of one model on one batch, the distance
``D(eps) = RMS(h_{floor((lambda+eps)L)} - h_{floor(lambda L)})`` over tokens and hidden units
is measured on an eps grid and ``log D`` is fitted against ``log eps`` by least squares.
The slope ``s`` gives ``kappa = 1 - s``: a Brownian-like path (Depth-muP) has ``s = 1/2``,
``kappa = 1/2``; a smooth path has ``s = 1``, ``kappa = 0`` (redundant layers).

Two rules keep the fit honest at finite depth. Grid values whose layer pair is the same
(``floor`` maps several eps onto one offset) give one point, not several copies; and each
point is placed at its effective ``eps = offset / L``, the separation actually measured, so
the rounding of ``floor`` does not bend the line at small eps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Pair:
    """One grid point: the nominal eps, the layers compared and the separation they really have."""

    eps: float
    layer_from: int
    layer_to: int
    num_layers: int

    @property
    def eps_effective(self) -> float:
        return (self.layer_to - self.layer_from) / self.num_layers


@dataclass(frozen=True)
class LogLogFit:
    """Least-squares line ``log y = slope * log x + intercept``; stderr needs 3+ points."""

    slope: float
    intercept: float
    stderr: float
    n_points: int

    @property
    def kappa(self) -> float:
        return 1.0 - self.slope

    def predict(self, x: float | np.ndarray) -> np.ndarray:
        return np.exp(self.intercept) * np.asarray(x, float) ** self.slope


def default_eps(num_layers: int, count: int = 12, eps_max: float = 0.5) -> list[float]:
    """``count`` log-spaced eps from one layer (``1/L``) to ``eps_max``."""
    lo = 1.0 / num_layers
    if eps_max <= lo:
        return [lo]
    return [float(e) for e in np.geomspace(lo, eps_max, count)]


def layer_index(t: float, num_layers: int) -> int:
    """``floor(t L)``, robust to rounding (``0.29 * 100`` is ``28.999...`` in floating point)."""
    return math.floor(t * num_layers + 1e-9)


def layer_pairs(num_layers: int, lam: float, eps: Sequence[float]) -> list[Pair]:
    """The usable, distinct layer pairs of ``lam`` on the grid (offset >= 1, ``lam + eps <= 1``).

    Several grid values with the same offset give one pair (the smallest nominal eps is kept).
    """
    start = layer_index(lam, num_layers)
    pairs: dict[int, Pair] = {}
    for e in sorted(float(x) for x in eps):
        if lam + e > 1.0 + 1e-12:
            continue
        stop = min(layer_index(lam + e, num_layers), num_layers)
        if stop - start >= 1 and stop not in pairs:
            pairs[stop] = Pair(e, start, stop, num_layers)
    return list(pairs.values())


def rms_distance(a: Any, b: Any) -> float:
    """RMS over every token and hidden unit of ``a - b`` (``||a - b|| / sqrt(n)`` averaged over tokens)."""
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(np.sqrt(np.mean(diff * diff)))


def fit_loglog(x: Sequence[float], y: Sequence[float]) -> LogLogFit | None:
    """The log-log least-squares line through positive points; None with fewer than two."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    keep = (xs > 0) & (ys > 0) & np.isfinite(xs) & np.isfinite(ys)
    xs, ys = np.log(xs[keep]), np.log(ys[keep])
    n = len(xs)
    if n < 2 or np.ptp(xs) == 0:
        return None
    slope, intercept = np.polyfit(xs, ys, 1)
    stderr = math.nan
    if n >= 3:
        resid = ys - (slope * xs + intercept)
        stderr = math.sqrt(float(resid @ resid) / (n - 2) / float(((xs - xs.mean()) ** 2).sum()))
    return LogLogFit(float(slope), float(intercept), stderr, n)


def diversity(streams: Sequence[Any], lambdas: Sequence[float], eps: Sequence[float]) -> list[dict[str, Any]]:
    """Per lambda: the measured points and the fitted slope and kappa (None where it cannot be fitted).

    ``streams[l]`` is the residual stream after block ``l`` (``streams[0]`` the input of block 1),
    any array shape with hidden units last; ``L = len(streams) - 1``.
    """
    num_layers = len(streams) - 1
    if num_layers < 1:
        raise ValueError("diversity: need the streams h_0 .. h_L of at least one block")
    rows = []
    for lam in lambdas:
        pairs = layer_pairs(num_layers, lam, eps)
        points = [
            {
                "eps": p.eps,
                "eps_effective": p.eps_effective,
                "layer_to": p.layer_to,
                "distance": rms_distance(streams[p.layer_to], streams[p.layer_from]),
            }
            for p in pairs
        ]
        fit = fit_loglog([p["eps_effective"] for p in points], [p["distance"] for p in points])
        rows.append(
            {
                "lambda": float(lam),
                "layer_from": layer_index(lam, num_layers),
                "points": points,
                "slope": fit.slope if fit else None,
                "slope_stderr": fit.stderr if fit else None,
                "intercept": fit.intercept if fit else None,
                "kappa": fit.kappa if fit else None,
                "n_points": len(points),
            }
        )
    return rows


def mean_kappa(rows: Sequence[dict[str, Any]]) -> float | None:
    """Mean kappa over the lambdas that could be fitted."""
    values = [r["kappa"] for r in rows if r["kappa"] is not None]
    return float(np.mean(values)) if values else None


def depth_scaling(depths: Sequence[int], distances: Sequence[float]) -> dict[str, Any] | None:
    """Exponent of ``D(eps_ref)`` against depth: 0 when the distance has a depth limit (Depth-muP at
    init), -1/2 when the blocks' contributions vanish like ``L^-1/2`` (alpha = 1 at init)."""
    fit = fit_loglog(depths, distances)
    return None if fit is None else asdict(fit)

"""Where the depth-transfer study spends its runs: a pure function from results to new points.

Each (variant, preset) arm walks the depths on its own, in phases per depth:

1. **scan**: one seed at a grid of LRs (the study's base grid at L0; at deeper depths a window
   centred on the previous depth's optimum), widened by one point while the best LR sits
   on an edge (up to ``max_widen`` times);
2. **refine** (``refine_log2 > 0``): one seed at best ± ``refine_log2``, so the quadratic
   fit of ``eval transfer`` has points half a grid step from the optimum;
3. **seeds**: every seed (``base_seeds`` of them at the base depth, if larger) at the best LR
   and its nearest tried neighbours, repeated while
   the best (by seed mean) moves to a point whose neighbours lack seeds (a best point
   that moved onto the coarse lattice is refined first).

The next depth starts from this depth's best LR by seed mean once all of its runs have
finished. "Best" is by mean under the study's ``seed_model`` (eval/seed_model.py), the means
``eval transfer`` fits. Seeds are spent near the optimum, never on the far tails. Because the plan is a
function of what exists and what has finished, a study resumes after any interruption and
reruns add nothing (see ``launch.demo``, which executes the points).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from eval.seed_model import curve_means
from study.spec import Study

PENDING = "pending"
Outcome = Union[float, None, str]  # loss; None: failed or diverged; PENDING: not finished


@dataclass(frozen=True, order=True)
class Point:
    preset: str
    depth: int
    log2_lr: float
    seed: int
    variant: str = ""  # the study's variant (e.g. a block type); "" in a study without variants


def key(log2_lr: float) -> float:
    """log2 LR as a dict key that survives a float round trip (sweep.yaml, results.csv)."""
    return round(log2_lr, 6)


class Planner:
    def __init__(self, study: Study) -> None:
        self.s = study

    def owner(self, preset: str, depth: int) -> str:
        """At the base depth every preset is the same model: the first preset trains it (per variant)."""
        return self.s.presets[0] if depth == self.s.depths[0] else preset

    def next_points(self, results: Mapping[Point, Outcome]) -> list[Point]:
        """Points to add now, over all arms (none twice, none already in ``results``)."""
        out: list[Point] = []
        for variant in self.s.variants:
            for preset in self.s.presets:
                chain = self._chain(preset, variant, results)
                out += [p for p in chain if p not in results and p not in out]
        return out

    def best(self, preset: str, depth: int, results: Mapping[Point, Outcome], variant: str = "") -> Optional[float]:
        """The LR with the lowest mean loss at ``depth`` (None: nothing usable)."""
        means = self.means(preset, depth, results, variant)
        return min(means, key=means.get) if means else None

    # ---------------------------------------------------------------- internals
    def _cells(
        self, preset: str, depth: int, results: Mapping[Point, Outcome], variant: str = ""
    ) -> dict[float, dict[int, Outcome]]:
        """log2 LR -> seed -> outcome, for the runs that stand for ``preset`` at ``depth``."""
        owner = self.owner(preset, depth)
        cells: dict[float, dict[int, Outcome]] = {}
        for p, outcome in results.items():
            if p.preset == owner and p.depth == depth and p.variant == variant:
                cells.setdefault(key(p.log2_lr), {})[p.seed] = outcome
        return cells

    def means(self, preset: str, depth: int, results: Mapping[Point, Outcome], variant: str = "") -> dict[float, float]:
        """log2 LR -> mean end loss over the finished, finite seeds (LRs without one left out),
        averaged under the study's seed model, as ``eval transfer`` will average them."""
        cells = self._cells(preset, depth, results, variant)
        lrs, losses, seeds = [], [], []
        for lr, outcomes in sorted(cells.items()):
            done = {seed: o for seed, o in outcomes.items() if isinstance(o, float) and math.isfinite(o)}
            if done:
                lrs.append(lr)
                losses.append(np.array(list(done.values())))
                seeds.append(np.array(list(done.keys())))
        fitted = curve_means(losses, seeds, self.s.seed_model).means
        return {lr: float(m) for lr, m in zip(lrs, fitted)}

    def _chain(self, preset: str, variant: str, results: Mapping[Point, Outcome]) -> list[Point]:
        s = self.s
        center: Optional[float] = None
        for i, depth in enumerate(s.depths):
            owner = self.owner(preset, depth)
            if i == 0:
                planned = [key(x) for x in s.base_lrs_log2]
            else:
                if center is None:
                    return []  # nothing usable at the previous depth: the chain stops
                half = (s.window - 1) / 2
                planned = [key(center + s.step_log2 * (k - half)) for k in range(s.window)]
            todo = self._depth_todo(owner, variant, depth, planned, results)
            if todo is None:  # waiting on runs of this depth
                return []
            if todo:
                return todo if owner == preset else []  # the shared base is its owner's to run
            center = self.best(preset, depth, results, variant)
        return []

    def _depth_todo(
        self, preset: str, variant: str, depth: int, planned: list[float], results: Mapping[Point, Outcome]
    ) -> Optional[list[Point]]:
        """The points this depth needs next ([] when complete, None while runs are pending)."""
        s = self.s
        cells = self._cells(preset, depth, results, variant)
        v = variant
        if any(o == PENDING for v in cells.values() for o in v.values()):
            return None
        seeds = list(range(max(s.seeds, s.base_seeds) if depth == s.depths[0] else s.seeds))
        first = seeds[0]
        missing = [Point(preset, depth, x, first, v) for x in planned if x not in cells]
        if missing:
            return missing
        # scan: widen past an edge optimum
        best = self.best(preset, depth, results, variant)
        if best is None:
            return []
        scanned = sorted(cells)
        extra = len(scanned) - len(planned) - self._refine_count(cells, planned)
        if extra < s.max_widen and best in (scanned[0], scanned[-1]) and not self._seeded(cells):
            step = -s.step_log2 if best == scanned[0] else s.step_log2
            return [Point(preset, depth, key(best + step), first, v)]
        # refine: one seed at best +- refine_log2 around a best point on the LR lattice
        if s.refine_log2 > 0 and not self._is_refine(best, planned):
            todo = [
                Point(preset, depth, key(best + d), first, v)
                for d in (-s.refine_log2, s.refine_log2)
                if key(best + d) not in cells
            ]
            if todo:
                return todo
        # seeds: every seed at the best LR and its nearest tried neighbours on each side
        tried = sorted(cells)
        j = tried.index(best)
        return [
            Point(preset, depth, x, seed, v)
            for x in tried[max(0, j - 1) : j + 2]
            for seed in seeds
            if seed not in cells[x]
        ]

    def _is_refine(self, x: float, planned: list[float]) -> bool:
        """Off the study's LR lattice (planned points +- whole steps): a refinement point."""
        steps = (x - planned[0]) / self.s.step_log2
        return abs(steps - round(steps)) > 1e-6

    def _refine_count(self, cells: dict[float, dict[int, Outcome]], planned: list[float]) -> int:
        return sum(1 for x in cells if self._is_refine(x, planned))

    @staticmethod
    def _seeded(cells: dict[float, dict[int, Outcome]]) -> bool:
        return any(len(v) > 1 for v in cells.values())

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
``eval transfer`` fits, with seeds that diverged where others finished counted as
``eval transfer`` counts them. Seeds are spent near the optimum, never on the far tails.

4. **sequential** (a study with ``goals``): once every arm has walked every depth and nothing
   is pending, the finished runs are analysed with ``eval transfer``'s own code
   (:func:`eval.transfer.analyze`, the study's settings and bootstrap seed 0, as the report
   will be) and checked against the goals (:mod:`eval.goals`). The interval furthest over its
   goal gets the next batch: ``seed_step`` more seeds at the best LR and the ``fit_window``
   tried LRs on each side (the points of its quadratic fit) of the one depth where they
   shrink that interval most per unit of run cost. This repeats until
   every goal is met, no unmet goal can be narrowed by seeds, or the study's run budget
   (``budget_runs`` per variant: every run of the study, each shared base once) is spent; the last batch is cut to fit.
   While goals are unmet, a depth whose best LR moved since its last batch first gets its
   added seeds at the new best's fit window. **Edge rule:** where an optimum's interval is
   cut by the LRs tried (:attr:`eval.transfer.DepthResult.open_ends`: it ends on the last
   usable LR, nothing tried past it or only an LR whose runs failed), the curve is not
   bracketed there and seeds cannot move
   that end (a goal is not met while it is open, :mod:`eval.goals`), so the batch also
   tries the LR one step past it, with every seed the end point has beyond the first ones
   and the batch's new seeds (only that LR, when the interval is within its goal and only
   open). The walk goes on while the end stays open; it stops at an LR where every seed
   diverged (a real bound, not an open end) or at the budget. A slope goal takes such a
   depth first.

Phases 1-3 see only each depth's first ``seeds`` (``base_seeds``) seeds, so the seeds that
phase 4 adds never move a window or re-plan a scan; phase 4 adds seeds at LRs already
tried, and past an open end only by the edge rule. Because the plan is a function of what
exists and what has finished (the analysis is
deterministic), a study resumes after any interruption and reruns add nothing (see
``study.sweep``, which executes the points).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

import numpy as np

from eval.seed_model import curve_means
from study.spec import Study

PENDING = "pending"
DIVERGED = "diverged"


@dataclass(frozen=True)
class Finished:
    """A finished run's validation losses: ``evals`` = ((fraction, loss), ...), ascending."""

    evals: tuple[tuple[float, float], ...]

    @property
    def end(self) -> float:
        return self.evals[-1][1]


# loss at the end (or Finished: at every eval point); None: failed; DIVERGED; PENDING: not finished
Outcome = Union[float, Finished, None, str]


@dataclass(frozen=True, order=True)
class Point:
    preset: str
    depth: int
    log2_lr: float
    seed: int
    variant: str = ""  # the study's variant (e.g. a block type); "" in a study without variants


@dataclass(frozen=True)
class Stop:
    """Where the sequential phase stands: ``reason`` is ``running`` (more to do),
    ``goals_met``, ``budget_spent``, ``unreachable`` (no unmet goal can be narrowed by more
    seeds) or ``no_goals``; ``checks`` are the goal checks of the last analysis (dicts)."""

    reason: str
    runs: int
    budget: int
    checks: tuple[dict, ...] = ()


def key(log2_lr: float) -> float:
    """log2 LR as a dict key that survives a float round trip (sweep.yaml, results.csv)."""
    return round(log2_lr, 6)


def end_loss(outcome: Outcome) -> Optional[float]:
    """The finite end-of-training loss of an outcome, else None."""
    value = outcome.end if isinstance(outcome, Finished) else outcome
    return float(value) if isinstance(value, float) and math.isfinite(value) else None


class Planner:
    def __init__(self, study: Study, variant_values: Optional[Mapping[str, Mapping[str, Any]]] = None) -> None:
        """``variant_values``: variant -> the typed value of every key a variant sets, as the
        sweep records them (so the planner's analysis orders families as results.csv does)."""
        self.s = study
        self.variant_values = {
            v: dict(variant_values[v])
            if variant_values
            else {k: study.variants[v].get(k) for k in study.variant_keys()}
            for v in study.variants
        }

    def owner(self, preset: str, depth: int) -> str:
        """At the base depth every preset is the same model: the first preset trains it (per variant)."""
        return self.s.presets[0] if depth == self.s.depths[0] else preset

    def default_seeds(self, depth: int) -> int:
        """Seeds of phases 1-3 at ``depth`` (``base_seeds`` at the base depth, if larger)."""
        return max(self.s.seeds, self.s.base_seeds) if depth == self.s.depths[0] else self.s.seeds

    def next_points(self, results: Mapping[Point, Outcome]) -> list[Point]:
        """Points to add now, over all arms (none twice, none already in ``results``)."""
        out, complete = self._chains(results)
        if out or not complete:
            return out
        if not self.s.goals or any(o == PENDING for o in results.values()):
            return []
        return self._sequential(results)[0]

    def stop(self, results: Mapping[Point, Outcome]) -> Stop:
        """Why the study stops (or ``running``), with the goal checks; for the summary."""
        if not self.s.goals:
            return Stop("no_goals", len(results), self.s.run_budget)
        out, complete = self._chains(results)
        if out or not complete or any(o == PENDING for o in results.values()):
            return Stop("running", len(results), self.s.run_budget)
        return self._sequential(results)[1]

    def best(self, preset: str, depth: int, results: Mapping[Point, Outcome], variant: str = "") -> Optional[float]:
        """The LR with the lowest mean loss at ``depth`` (None: nothing usable)."""
        means = self.means(preset, depth, results, variant)
        return min(means, key=means.get) if means else None

    def means(self, preset: str, depth: int, results: Mapping[Point, Outcome], variant: str = "") -> dict[float, float]:
        """log2 LR -> mean end loss over the finished seeds (LRs without one left out), averaged
        under the study's seed model with diverged seeds counted, as ``eval transfer`` does."""
        cells = self._cells(preset, depth, results, variant)
        lrs, losses, seeds, diverged = [], [], [], []
        for lr, outcomes in sorted(cells.items()):
            done = {seed: end_loss(o) for seed, o in sorted(outcomes.items()) if end_loss(o) is not None}
            if done:
                lrs.append(lr)
                losses.append(np.array(list(done.values())))
                seeds.append(np.array(list(done.keys())))
                diverged.append(sum(1 for o in outcomes.values() if o == DIVERGED))
        fitted = curve_means(losses, seeds, self.s.seed_model, diverged).means
        return {lr: float(m) for lr, m in zip(lrs, fitted)}

    # ---------------------------------------------------------------- the analysis
    def analysis(self, results: Mapping[Point, Outcome]):
        """``eval transfer``'s analysis of the finished points, with the study's settings: the
        same numbers as the study's report (``study.analysis.analyse``) on the same runs."""
        from eval.results import results_from_records, share_base_depth
        from eval.transfer import analyze

        records = []
        for p, o in sorted(results.items()):
            if o == PENDING:
                continue
            values = {
                "run_id": f"{p.variant}/{p.preset}/L{p.depth}/lr{p.log2_lr:+g}/s{p.seed}",
                **self.s.arm_values(p.preset),  # the preset (custom for a custom arm, with its alpha and gamma)
                "model.num_layers": p.depth,
                "optimizer.lr": 2.0**p.log2_lr,
                "run.seed": p.seed,
                "parametrization.block_multiplier": 1.0,
                "parametrization.base_num_layers": self.s.depths[0],
                "model.hidden_size": self.s.hidden_size,
                **self.variant_values[p.variant],
            }
            if isinstance(o, Finished):
                evals = list(o.evals)
            elif isinstance(o, float):
                evals = [(1.0, o)]
            else:
                evals = [(1.0, None)]
            status = "completed" if evals[0][1] is not None else (DIVERGED if o == DIVERGED else "failed")
            for fraction, loss in evals:
                records.append({**values, "status": status, "step": "", "fraction": fraction, "val_loss": loss})
        sweep = results_from_records("<study planner>", records, [*self.s.variant_keys(), *self.s.arm_keys()])
        sweep = share_base_depth(sweep, self.s.arm_values(self.s.presets[0])["parametrization.preset"])
        return analyze(  # "all": a study's runs record exactly its eval_at
            sweep,
            fractions="all",
            window=self.s.fit_window,
            n_boot=self.s.bootstrap,
            boot_seed=0,
            seed_model=self.s.seed_model,
        )

    # ---------------------------------------------------------------- phases 1-3
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

    def _chains(self, results: Mapping[Point, Outcome]) -> tuple[list[Point], bool]:
        """Phases 1-3 over every arm, on each depth's first seeds: (points, every arm complete)."""
        first = {p: o for p, o in results.items() if p.seed < self.default_seeds(p.depth)}
        out: list[Point] = []
        complete = True
        for variant in self.s.variants:
            for preset in self.s.presets:
                chain, done = self._chain(preset, variant, first)
                out += [p for p in chain if p not in results and p not in out]
                complete &= done
        return out, complete

    def _chain(self, preset: str, variant: str, results: Mapping[Point, Outcome]) -> tuple[list[Point], bool]:
        s = self.s
        center: Optional[float] = None
        for i, depth in enumerate(s.depths):
            owner = self.owner(preset, depth)
            if i == 0:
                planned = [key(x) for x in s.base_lrs_log2]
            else:
                if center is None:
                    return [], True  # nothing usable at the previous depth: the chain stops
                half = (s.window - 1) / 2
                planned = [key(center + s.step_log2 * (k - half)) for k in range(s.window)]
            todo = self._depth_todo(owner, variant, depth, planned, results)
            if todo is None:  # waiting on runs of this depth
                return [], False
            if todo:
                return (todo if owner == preset else []), False  # the shared base is its owner's to run
            center = self.best(preset, depth, results, variant)
        return [], True

    def _depth_todo(
        self, preset: str, variant: str, depth: int, planned: list[float], results: Mapping[Point, Outcome]
    ) -> Optional[list[Point]]:
        """The points this depth needs next ([] when complete, None while runs are pending)."""
        s = self.s
        cells = self._cells(preset, depth, results, variant)
        v = variant
        if any(o == PENDING for v in cells.values() for o in v.values()):
            return None
        seeds = list(range(self.default_seeds(depth)))
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
        return self._seed_neighbours(preset, variant, depth, cells, best, seeds)

    @staticmethod
    def _seed_neighbours(
        preset: str,
        variant: str,
        depth: int,
        cells: dict[float, dict[int, Outcome]],
        best: float,
        seeds: list[int],
        width: int = 1,
    ) -> list[Point]:
        """``seeds`` at the best LR and its ``width`` nearest tried neighbours on each side, where missing."""
        tried = sorted(cells)
        j = tried.index(best)
        return [
            Point(preset, depth, x, seed, variant)
            for x in tried[max(0, j - width) : j + width + 1]
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

    # ---------------------------------------------------------------- phase 4
    def _arms(self) -> list[tuple[str, str]]:
        return [(variant, preset) for variant in self.s.variants for preset in self.s.presets]

    def _extra_seeds(self, depth: int, cells: dict[float, dict[int, Outcome]]) -> list[int]:
        """The seeds phase 4 has given this depth (beyond its first ones)."""
        top = max((seed for outcomes in cells.values() for seed in outcomes), default=-1)
        return list(range(self.default_seeds(depth), top + 1))

    def _fill(self, results: Mapping[Point, Outcome]) -> list[Point]:
        """Phase 4's seeds at the current best LR and its neighbours of every depth that has
        them (the best may move as seeds arrive); tried LRs only, seeds past the first ones only."""
        out: list[Point] = []
        for variant, preset in self._arms():
            for depth in self.s.depths:
                owner = self.owner(preset, depth)
                if owner != preset:
                    continue
                cells = self._cells(preset, depth, results, variant)
                extra = self._extra_seeds(depth, cells)
                best = self.best(preset, depth, results, variant)
                if not extra or best is None:
                    continue
                if any(o == PENDING for c in cells.values() for o in c.values()):
                    continue
                todo = self._seed_neighbours(owner, variant, depth, cells, best, extra, self.s.fit_window)
                out += [p for p in todo if p not in out]
        return out

    def _sequential(self, results: Mapping[Point, Outcome]) -> tuple[list[Point], Stop]:
        from eval.goals import check_goals

        s = self.s
        analysis = self.analysis(results)
        checks = check_goals(analysis, s.goals)
        as_dicts = tuple(c.as_dict() for c in checks)
        spent = len(results)
        unmet = [c for c in checks if not c.met]
        if not unmet:
            return [], Stop("goals_met", spent, s.run_budget, as_dicts)
        if spent >= s.run_budget:
            return [], Stop("budget_spent", spent, s.run_budget, as_dicts)
        fill = self._fill(results)  # the best moved since the last batch: seed its fit window first
        if fill:
            return fill[: s.run_budget - spent], Stop("running", spent, s.run_budget, as_dicts)
        for check in sorted(unmet, key=lambda c: -c.ratio):  # the widest interval over its goal first
            target = self._where(analysis, check, results)
            if target is None:
                continue
            variant, preset, depth, edge = target
            cells = self._cells(preset, depth, results, variant)
            best = self.best(preset, depth, results, variant)
            if best is None:
                continue
            owner = self.owner(preset, depth)
            top = max(seed for c in cells.values() for seed in c) + 1
            n = max(top, self.default_seeds(depth))
            seeds = list(range(n, n + s.seed_step))
            batch = []
            if edge is not None:  # the edge rule: one LR past the open end, seeded as that end is
                beyond, at = edge
                have = {seed for seed in cells[at] if seed >= self.default_seeds(depth)}
                if check.within_target:  # only open: the new LR is all this check needs
                    batch = [Point(owner, depth, beyond, seed, variant) for seed in sorted(have or seeds)]
                    return batch[: s.run_budget - spent], Stop("running", spent, s.run_budget, as_dicts)
                batch = [Point(owner, depth, beyond, seed, variant) for seed in sorted(have | set(seeds))]
            batch += self._seed_neighbours(owner, variant, depth, cells, best, seeds, s.fit_window)
            means = self.means(preset, depth, results, variant)
            batch += [
                Point(owner, depth, x, seed, variant)
                for x in self._contenders(cells, means, best)
                for seed in seeds
                if seed not in cells[x] and Point(owner, depth, x, seed, variant) not in batch
            ]
            if batch:
                return batch[: s.run_budget - spent], Stop("running", spent, s.run_budget, as_dicts)
        return [], Stop("unreachable", spent, s.run_budget, as_dicts)

    @staticmethod
    def _contenders(cells: dict[float, dict[int, Outcome]], means: dict[float, float], best: float) -> list[float]:
        """Tried LRs whose mean is within two standard errors (pooled seed noise) of the best
        one: in the bootstrap any of them can become the best point and carry the optimum's
        interval with it, so their seeds shrink it as much as the fit window's do."""
        finished = [[end_loss(o) for o in c.values() if end_loss(o) is not None] for c in cells.values()]
        resid = [v - np.mean(f) for f in finished if len(f) > 1 for v in f]
        df = sum(len(f) - 1 for f in finished if len(f) > 1)
        if not df:
            return []
        sigma = math.sqrt(float(np.sum(np.square(resid))) / df)
        out = []
        for x, mean in means.items():
            n = sum(1 for o in cells[x].values() if end_loss(o) is not None)
            if x != best and mean - 2.0 * sigma / math.sqrt(n) < means[best]:
                out.append(x)
        return out

    def _where(self, analysis, check, results: Mapping[Point, Outcome]):
        """(variant, preset, depth, edge) whose seeds shrink ``check``'s interval most per unit
        of run cost, or None (no interval to shrink: no optimum, or one seed everywhere).
        ``edge``: (untried LR, usable end LR) when the edge rule applies at that depth, else None;
        for a slope goal a depth where it applies comes first."""
        result = next(r for r in analysis.results if r.family.label == check.family and r.fraction == check.fraction)
        variant, preset = self._arm_of(result.family)
        found = [d for d in result.depths if d.optimum.found and d.opt_ci is not None]

        def edge(d):
            return self._beyond_edge(d, self._cells(preset, d.depth, results, variant))

        if check.goal == "deepest_opt_ci_width":
            deepest = [d for d in found if d.depth == check.depth]
            if not deepest:
                return None
            depth, beyond = check.depth, edge(deepest[0])
        else:
            if len(found) < 2:
                return None
            x = np.log2([d.depth for d in found])
            c = (x - x.mean()) / float(np.sum((x - x.mean()) ** 2))
            step = self.s.seed_step
            gains = []
            for cj, d in zip(c, found):
                var = ((d.opt_ci[1] - d.opt_ci[0]) / (2 * 1.959964)) ** 2  # the optimum's variance, from its CI
                n = int(d.curve.n_seeds.max() + d.curve.n_diverged.max())
                cost = d.depth + self.s.run_overhead_layers
                gains.append(cj * cj * var * step / (n + step) / cost)
            edges = [edge(d) for d in found]
            candidates = [j for j, e in enumerate(edges) if e is not None] or list(range(len(found)))
            j = max(candidates, key=lambda i: gains[i])
            depth, beyond = found[j].depth, edges[j]
        if check.within_target and beyond is None:  # only open, and no LR left to add: seeds cannot help
            return None
        return variant, preset, depth, beyond

    def _beyond_edge(self, d, cells: dict[float, dict[int, Outcome]]) -> Optional[tuple[float, float]]:
        """(the LR one step past an open end of ``d``'s CI, that end), the upper end first, or
        None (:attr:`eval.transfer.DepthResult.open_ends` says which ends are open)."""
        for side in sorted(d.open_ends, reverse=True):  # "low" < "high": high first
            end = key(d.usable_end(side))
            beyond = key(end + (self.s.step_log2 if side == "high" else -self.s.step_log2))
            if beyond not in cells and end in cells:
                return beyond, end
        return None

    def _arm_of(self, family) -> tuple[str, str]:
        """(variant, arm) of an analysed family, recognised by its recorded values as results.csv holds them."""
        from eval.results import SHORT_NAMES  # the family's columns: parametrization.preset is "preset"

        keys = family.key_dict()

        def same(values: Mapping[str, Any]) -> bool:
            return all(
                keys.get(SHORT_NAMES.get(k, k)) in (("",) if v is None else (str(v), repr(v)))
                for k, v in values.items()
            )

        variant = next((n for n, values in self.variant_values.items() if same(values)), next(iter(self.s.variants)))
        arm = next((a for a in self.s.presets if same(self.s.arm_values(a))), family.preset)
        return variant, arm

"""Precision goals of a transfer study, checked against ``eval transfer``'s own intervals.

A study file states how narrow its answers must be (``goals:``); the planner spends seeds
until every goal is met or its budget is spent, and the summary and report say, per goal,
the target, what was achieved and whether it is met. All three read the goals through
:func:`check_goals` on the same :class:`eval.transfer.TransferAnalysis`, so the number that
stopped the study is the number the report prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from eval.outputs import number
from eval.transfer import TransferAnalysis, fraction_label

# goal key -> what it measures (one check per family and analysed fraction)
GOALS: dict[str, str] = {
    "slope_ci_halfwidth": "half-width of the 95% CI of the slope of optimal log2 LR vs log2 depth (octaves per doubling)",
    "deepest_opt_ci_width": "width of the 95% CI of the optimal log2 LR at the deepest depth (octaves)",
}


@dataclass(frozen=True)
class GoalCheck:
    """One goal for one family at one fraction. ``achieved`` is None where there is no
    interval (no slope, one seed, bootstrap off): then the goal is "not measured" and never
    met. ``open`` lists
    the optima behind the interval whose CIs are cut by the LRs tried (``L=32 high``:
    :attr:`eval.transfer.DepthResult.open_ends`); such an interval is too narrow to trust,
    so the goal is not met however narrow it is."""

    goal: str
    family: str
    fraction: float
    target: float
    achieved: float | None
    depth: int | None = None  # deepest_opt_ci_width: the depth it is about
    open: tuple[str, ...] = ()

    @property
    def within_target(self) -> bool:
        """The interval is at most the target wide (open or not)."""
        return self.achieved is not None and self.achieved <= self.target + 1e-12

    @property
    def met(self) -> bool:
        return self.within_target and not self.open

    @property
    def measured(self) -> bool:
        """There is an interval to compare with the target."""
        return self.achieved is not None

    @property
    def ratio(self) -> float:
        """achieved / target (inf without an interval): how far over its goal."""
        return math.inf if self.achieved is None else self.achieved / self.target

    def as_dict(self) -> dict:
        return {
            "goal": self.goal,
            "family": self.family,
            "fraction": self.fraction,
            "fraction_label": fraction_label(self.fraction),
            "target": self.target,
            "achieved": self.achieved,
            "met": self.met,
            "measured": self.measured,
            "depth": self.depth,
            "open": list(self.open),
        }


def check_goals(analysis: TransferAnalysis, goals: Mapping[str, float]) -> list[GoalCheck]:
    """Every goal for every family and analysed fraction, in the analysis' order."""
    unknown = sorted(set(goals) - set(GOALS))
    if unknown:
        raise ValueError(f"unknown goal(s) {unknown}; known: {sorted(GOALS)}")
    out: list[GoalCheck] = []
    for r in analysis.results:
        found = [d for d in r.depths if d.optimum.found]
        for goal, target in goals.items():
            if goal == "slope_ci_halfwidth":
                s = r.slope
                achieved = (s.ci_high - s.ci_low) / 2 if s.ci_available else None
                out.append(GoalCheck(goal, r.family.label, r.fraction, float(target), achieved, open=_open(found)))
            elif goal == "deepest_opt_ci_width":
                deepest = max(r.depths, key=lambda d: d.depth) if r.depths else None
                ci = deepest.opt_ci if deepest is not None and deepest in found else None
                achieved = (ci[1] - ci[0]) if ci else None
                depth = deepest.depth if deepest else None
                shown = _open([deepest]) if ci else ()
                out.append(GoalCheck(goal, r.family.label, r.fraction, float(target), achieved, depth, shown))
    return out


def _open(depths) -> tuple[str, ...]:
    return tuple(label for d in depths for label in d.open_labels())


def met_text(check: dict) -> str:
    """``yes``, ``NO``, or ``not measured`` (no interval: never met)."""
    if check["achieved"] is None:
        return "not measured"
    return "yes" if check["met"] else "NO"


def achieved_text(check: dict) -> str:
    """A check's achieved width in words, naming the optima whose CIs the LRs tried cut."""
    text = "no interval" if check["achieved"] is None else number(check["achieved"])
    return text + (f" (CI cut by the LRs tried: {', '.join(check['open'])})" if check.get("open") else "")


def goal_table(checks: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the per-goal table (report.md and the demo summary)."""
    header = ["goal", "family", "fraction", "target", "achieved", "met"]
    rows = [
        [
            c["goal"] + (f" (L={c['depth']})" if c.get("depth") is not None else ""),
            c["family"],
            c["fraction_label"],
            f"{c['target']:.3g}",
            achieved_text(c),
            met_text(c),
        ]
        for c in checks
    ]
    return header, rows

"""The study's analysis: ``eval transfer`` (and ``eval dynamics`` where runs logged
diagnostics) on the finished sweep, with the same calls as the ``python -m eval`` commands."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from launch.errors import LaunchError
from study.log import log as _log
from study.spec import Study


def analyse(
    sweep_dir: Path,
    report_dir: Path,
    s: Study,
    goal_context: list[str] | None = None,
    depths: list[int] | None = None,
) -> dict[str, Any]:
    """Write the report into ``report_dir``; return ``{"headline": eval transfer's headline rows,
    "goals": the study's goals checked on them}``. ``goal_context``: the lines the report says
    above its goals (why the study stopped, what it spent). ``depths``: the study's depths that
    have runs (default: all of them; a walk that stopped early leaves the deeper ones empty).

    Raises :class:`LaunchError` when ``eval transfer`` rejects the results (exit 2).
    """
    from eval.report import headline_rows
    from eval.results import ResultsError
    from eval.transfer import AnalysisInputError
    from eval.transfer_cmd import write_transfer

    report_dir.mkdir(parents=True, exist_ok=True)
    try:
        with open(report_dir / "eval.log", "w") as log, contextlib.redirect_stderr(log):
            outputs = write_transfer(
                sweep_dir,
                report_dir,
                shared_base=s.arm_values(s.presets[0])["parametrization.preset"],
                depths=list(depths or s.depths),  # the sweep may hold runs at depths or presets the study file
                presets=s.config_presets(),  # no longer lists (study.sweep keeps them): not analysed; custom
                # arms are told apart by their alpha and gamma columns (study.sweep refuses a custom run of no arm)
                fractions="all",  # a study's runs record exactly its eval_at, every one analysed
                fit_window=s.fit_window,
                seed_model=s.seed_model,
                n_boot=s.bootstrap,
                goals=s.goals or None,
                goal_context=goal_context,
            )  # the same call as `python -m eval transfer SWEEP --shared-base P --depths ... --presets ...
            # --fractions all --fit-window W --seed-model M --bootstrap B --goals ...`; the planner's sequential phase analyses with the same settings
    except (ResultsError, AnalysisInputError) as exc:
        raise LaunchError(f"eval transfer: {exc}") from None
    failed = " (a figure failed: see eval.log)" if outputs.figure_failed else ""
    _log(f"eval transfer: {len(outputs.analysis.notes)} notes in {report_dir / 'report.md'}{failed}")
    if s.diagnostics_interval:
        from eval.dynamics import DynamicsError
        from eval.dynamics_cmd import write_dynamics

        try:  # the same call as `python -m eval dynamics SWEEP --out REPORT`
            dynamics = write_dynamics([sweep_dir], report_dir)
            _log(f"eval dynamics: {report_dir / 'dynamics.md'} ({len(dynamics['runs'])} runs at each depth's best LR)")
        except DynamicsError as exc:
            _log(f"eval dynamics: {exc}")
    return {"headline": headline_rows(outputs.analysis), "goals": outputs.analysis.goals}

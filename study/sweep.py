"""The study's sweep: the planner's points as one growing sweep plan, run locally or on SLURM."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Optional

import yaml

from jobscripts.atomic import atomic_write_text
from launch.errors import LaunchError
from launch.sweep_dir import SWEEP_FILE
from rundir.contract import PARAMETRIZATION_KEYS
from rundir.files import RunSummary, read_summary
from study.log import log as _log
from study.planner import DIVERGED, PENDING, Finished, Outcome, Planner, Point, key
from study.spec import Study


def _outcome(summary: Optional[RunSummary]) -> Outcome:
    """A final run's outcome for the planner: its losses at every eval point (``Finished``),
    ``DIVERGED``, or None (failed, or no finite final loss: as ``eval transfer`` reads it)."""
    if summary is not None and summary.status == "diverged":
        return DIVERGED
    if summary is None or summary.status != "completed":
        return None
    value = summary.final_val_loss
    if value is None or not math.isfinite(value):
        return DIVERGED if value is not None else None  # a nan/inf loss counts as diverged in eval transfer
    # non-finite evals stay (as nan): eval transfer counts them as diverged at that fraction
    evals = {round(e.fraction, 6): float(e.val_loss) for e in summary.evals if e.val_loss is not None}
    final = max(evals, default=None)
    if final is None or evals[final] != value:
        return Finished(((1.0, value),))
    return Finished(tuple(sorted(evals.items())))


class AdaptiveSweep:
    """Executes what :class:`launch.planner.Planner` asks for, as one growing sweep plan.

    Points are fed to the executor as runs finish (``on_done``), so both presets' chains keep
    every worker busy without a barrier per depth; the plan lives in ``sweep.yaml``, so the
    study resumes after any interruption and a rerun trains nothing twice.
    """

    def __init__(self, sweep_dir: Path, spec_path: Path, s: Study, workers: int) -> None:
        from launch.sweep_dir import check_base, read_plan
        from launch.sweep_spec import load_spec

        self.sweep_dir = sweep_dir
        self.spec_path = spec_path
        self.spec = load_spec(spec_path)
        self.s = s
        self.workers = workers
        self.variant_values = variant_values(spec_path.parent / self.spec.base_config, s)
        self.planner = Planner(s, self.variant_values)
        self.plan = None
        self.points: dict[Point, str] = {}  # point -> run id
        if (sweep_dir / SWEEP_FILE).is_file():
            self.plan = read_plan(sweep_dir)
            # how and where runs start changes no result: take them from this invocation's spec
            base = (spec_path.parent / self.spec.base_config).resolve()  # as launch.sweep_spec.expand records it
            moved_from = Path(self.plan.base_config_source).parent
            self.plan = replace(
                self.plan,
                executor=replace(
                    self.plan.executor, start=self.spec.executor.start, runs_per_gpu=self.spec.executor.runs_per_gpu
                ),
                slurm=asdict(self.spec.slurm),
                spec_file=str(spec_path),
                base_config_source=str(base),
            )
            if moved_from != base.parent:
                self._moved(moved_from, base.parent, base)
            # every run shares the base config: a study file that changed it (a width, the steps,
            # the vocabulary) no longer describes these runs, even where it adds no new point
            check_base(
                sweep_dir,
                self.plan,
                remedy=f"study {s.name!r} no longer describes the runs in {sweep_dir} (a key every run shares "
                "changed): give another --out for the new study, or restore the study file",
            )
            outside: dict[str, list[int]] = {}  # preset -> depths of runs the study no longer has
            for run in self.plan.runs:
                point = self.point_of(run.point)
                if point.depth in s.depths and point.preset in s.presets:
                    self.points[point] = run.run_id
                else:
                    outside.setdefault(point.preset, []).append(point.depth)
            if outside:
                # the study file dropped a depth or a preset: its runs are kept (a later edit back
                # reuses them) but are not this study's: not run, not counted, not analysed
                where = ", ".join(f"{p} L={sorted(set(d))}" for p, d in sorted(outside.items()))
                _log(
                    f"{sum(map(len, outside.values()))} runs in {sweep_dir} are outside study {s.name!r} "
                    f"(depths {list(s.depths)}, presets {list(s.presets)}): {where}; kept, not counted or analysed"
                )

    def _moved(self, old: Path, new: Path, base: Path) -> None:
        """The study directory was moved (or copied) from ``old`` to ``new``: the base config
        snapshot names the old place's data. Where that is its only difference from the base
        config written here, the snapshot is rewritten to the new place (the runs are the same
        runs); any other difference is refused next (:func:`launch.sweep_dir.check_base`)."""
        from launch.sweep_plan import BASE_SNAPSHOT

        snapshot = self.sweep_dir / BASE_SNAPSHOT
        if not snapshot.is_file():
            return
        text = base.read_text()
        if _repath(yaml.safe_load(snapshot.read_text()), str(old), str(new)) == yaml.safe_load(text):
            atomic_write_text(snapshot, text)
            _log(f"study directory moved from {old} to {new}: its base config now reads the data there")

    def point_of(self, values: dict[str, Any]) -> Point:
        """The study point of a planned run's grid values (its variant recognised by its values)."""
        variant = next(
            (name for name, vals in self.variant_values.items() if all(values.get(k) == v for k, v in vals.items())),
            None,
        )
        if variant is None or not {"parametrization.preset", "model.num_layers", "optimizer.lr"} <= set(values):
            raise LaunchError(
                f"{self.sweep_dir / SWEEP_FILE}: run {values} matches no variant of study {self.s.name!r} "
                f"({self.variant_values}); was the sweep directory made by another study?"
            )
        return Point(
            self._arm(values),
            int(values["model.num_layers"]),
            key(math.log2(values["optimizer.lr"])),
            int(values.get("run.seed", 0)),
            variant,
        )

    def _arm(self, values: dict[str, Any]) -> str:
        """The study arm of a planned run's grid values: its preset, or the custom arm with its
        alpha and gamma. A custom run of no arm is refused: eval transfer would analyse it as the
        study's (it tells custom arms apart by those values, not by the study's names)."""
        preset = str(values["parametrization.preset"])
        if preset != "custom":
            return preset
        for arm in self.s.presets:
            if all(values.get(k) == v for k, v in self.s.arm_values(arm).items()):
                return arm
        found = {k: values.get(k) for k in PARAMETRIZATION_KEYS}
        raise LaunchError(
            f"{self.sweep_dir / SWEEP_FILE}: a run of preset custom with {found} matches no arm of study "
            f"{self.s.name!r} (custom_presets: {self.s.custom_presets}); restore that arm in the study file, or give "
            "another --out for the changed study"
        )

    def _state(self, run_id: str):
        from launch.run_state import run_state
        from launch.sweep_dir import run_dir

        return run_state(run_dir(self.sweep_dir, run_id), self.plan.executor.max_retries)

    def results(self) -> dict[Point, Outcome]:
        """Every planned point's outcome: its losses, DIVERGED, None (failed) or PENDING."""
        from launch.sweep_dir import run_dir

        out: dict[Point, Outcome] = {}
        for point, rid in self.points.items():
            if self._state(rid).needs_work:
                out[point] = PENDING
            else:
                out[point] = _outcome(read_summary(run_dir(self.sweep_dir, rid)))
        return out

    def run_seconds(self) -> float:
        """Summed ``wall_time_s`` of every run that has a summary (core time: one thread per run)."""
        from launch.sweep_dir import run_dir

        total = 0.0
        for rid in self.points.values():
            summary = read_summary(run_dir(self.sweep_dir, rid))
            if summary is not None and summary.wall_time_s is not None and math.isfinite(summary.wall_time_s):
                total += summary.wall_time_s
        return total

    def _add(self, points: list[Point]) -> list:
        from launch.sweep_dir import write_plan
        from launch.sweep_spec import LINKED_KEY_SEPARATOR, expand

        added = []
        for point in points:
            # the arm's preset, or a custom arm's preset with its alpha and gamma: one linked entry,
            # set together (the parametrization refuses custom without them); a fixed preset sets neither
            arm = {k: v for k, v in self.s.arm_values(point.preset).items() if v is not None}
            grid = {
                "model.num_layers": [point.depth],
                LINKED_KEY_SEPARATOR.join(arm): [list(arm.values())] if len(arm) > 1 else list(arm.values()),
                "optimizer.lr": [2.0**point.log2_lr],
            }
            if point.seed:  # seed 0 is the base config's: run IDs of one-seed studies stay as they were
                grid["run.seed"] = [point.seed]
            for k, v in self.variant_values[point.variant].items():
                grid[k] = [v]
            stage = expand(self.spec_path, replace(self.spec, grid=grid))
            if self.plan is None:
                self.plan = replace(stage, runs=[], grid={})
            for k, values in stage.grid.items():  # the plan's grid: every value of every key any stage swept
                have = self.plan.grid.setdefault(k, [])  # (results.csv has a column for each key)
                have += [v for v in values if v not in have]
            known = {r.run_id for r in self.plan.runs}
            for run in stage.runs:
                if run.run_id not in known:
                    self.plan.runs.append(run)
                    added.append(run)
                self.points[point] = run.run_id
            arm = f"{point.preset}/{point.variant}" if point.variant else point.preset
            _log(f"queued {arm} L={point.depth} lr=2^{point.log2_lr:g} seed {point.seed}")
        if added:
            write_plan(self.sweep_dir, self.plan)
        return added

    def _advance(self) -> list:
        return self._add(self.planner.next_points(self.results()))

    def _work(self) -> list[str]:
        """The IDs of the planned runs that need work, after adding what the planner asks for;
        points whose run directories are already final (sweep.yaml lost, reused runs) give no
        work, so planning goes on past them until some run needs work or nothing is added."""
        while True:
            added = self._advance()
            mine = set(self.points.values())
            runs = self.plan.runs if self.plan else []
            ids = [r.run_id for r in runs if r.run_id in mine and self._state(r.run_id).needs_work]
            if ids or not added:
                return ids

    def run(self) -> None:
        """Drive every preset to the end of its chain (resumes whatever is unfinished)."""
        from launch.executor_local import execute

        while True:
            ids = self._work()
            if not ids:
                return

            def on_done(run) -> list:  # a finished run may unblock any chain (the shared base)
                return self._advance()

            result = execute(
                self.sweep_dir, self.plan, only=ids, max_parallel=self.workers, progress=False, on_done=on_done
            )
            if result.interrupted:
                raise KeyboardInterrupt
            if result.started == 0:  # nothing could start (e.g. runs held elsewhere): do not spin
                return

    def run_slurm(self, *, wait: bool, poll_s: float) -> bool:
        """Drive the study through SLURM job arrays; True once every point is final.

        Each round adds the points the planner can add now and submits the runs that need
        work and are in no live array (``squeue``). Without ``wait`` one round is done and
        the caller returns (rerun the command, e.g. from cron, to go on); with it, rounds
        repeat every ``poll_s`` seconds on this (login) node until the study is complete.
        """
        from launch.executor_slurm import queued_run_ids, submit_array

        while True:
            pending = self._work()
            if not pending:
                return True
            queued = queued_run_ids(self.sweep_dir)
            if any(rid not in queued for rid in pending):
                code = submit_array(
                    self.sweep_dir, self.plan, max_parallel=self.workers, dry_run=False, cwd=Path.cwd(), exclude=queued
                )
                if code:
                    raise LaunchError(f"sbatch failed (exit {code}); finished runs are kept, rerun to resubmit")
            if not wait:
                _log(f"{len(pending)} runs queued or running on SLURM; rerun this command to continue")
                return False
            time.sleep(poll_s)


def _repath(value: Any, old: str, new: str) -> Any:
    """``value`` (a parsed YAML tree) with every string path under ``old`` moved under ``new``."""
    if isinstance(value, dict):
        return {k: _repath(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_repath(v, old, new) for v in value]
    if isinstance(value, str) and (value == old or value.startswith(old + "/")):
        return new + value[len(old) :]
    return value


def variant_values(base_config: Path, s: Study) -> dict[str, dict[str, Any]]:
    """Variant -> the typed value of every key any variant sets (the base config's where it
    sets none), as ``expand`` stores them in a run's grid point."""
    from launch.commands import format_override
    from launch.run_configs import flat_config, load_run_config

    keys = s.variant_keys()
    out = {}
    for name, overrides in s.variants.items():
        where = f"study {s.name!r}: variants.{name}: "
        flat = flat_config(
            load_run_config(base_config, [format_override(k, v) for k, v in overrides.items()], where=where)
        )
        unknown = [k for k in overrides if k not in flat]
        if unknown:
            raise LaunchError(f"{where}{unknown} are not single run-config settings")
        out[name] = {k: flat[k] for k in keys}
    return out

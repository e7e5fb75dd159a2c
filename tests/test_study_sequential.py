"""The sequential study end to end through :class:`study.sweep.AdaptiveSweep`, with a stand-in
trainer: each submitted run's ``summary.json`` is written from a planted loss curve (mid and
end evals, seed noise, divergence above the basin), as the trainer would write it.

sbatch and squeue are stubs (tests/test_demo_slurm.py), so the test checks what the study
asks for round by round: the fixed phases, then seeds until the goals are met, the counts the
summary reports, and that rerunning the command adds nothing.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from study.spec import load_study
from study.sweep import AdaptiveSweep
from tests.launch_fixtures.helpers import FAKE_TRAIN_CMD, TINY_BASE, stub_bin

SLOPE = {"sp": 0.5, "depth_mup": 0.0}


def _planted(point, noise: float) -> dict:
    """summary.json of a run at ``point``: planted basin + seed noise (a fixed draw per run)."""
    x_opt = -7.0 - SLOPE[point.preset] * math.log2(point.depth / 2)
    rng = np.random.default_rng(zlib.crc32(repr(point).encode()))
    if point.log2_lr - x_opt > 2.5 or (point.log2_lr - x_opt > 1.5 and rng.random() < 0.5):
        return {"status": "diverged", "reason": "loss is nan at step 3", "steps": 3}
    sigma = noise * (3.0 if point.depth == 2 else 1.0)  # the base depth the noisiest, as measured
    end = 4.0 + 1.0 / math.sqrt(point.depth) + 0.1 * (point.log2_lr - x_opt) ** 2 + sigma * rng.standard_normal()
    mid = end + 0.4 + sigma * rng.standard_normal()
    evals = [{"step": 15, "fraction": 0.5, "val_loss": mid}, {"step": 30, "fraction": 1.0, "val_loss": end}]
    return {"status": "completed", "final_val_loss": end, "evals": evals, "steps": 30, "wall_time_s": 2.0}


def _drive(tmp_path: Path, monkeypatch, s, noise: float) -> tuple[AdaptiveSweep, int]:
    bin_dir = stub_bin(tmp_path, {"sbatch": "echo 4242", "squeue": "true"})  # a job id; nothing queued
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    spec = tmp_path / "demo_sweep.yaml"
    executor = {"kind": "slurm", "max_parallel": 4, "max_retries": 1, "gpus_per_run": 0}
    spec.write_text(yaml.safe_dump({"name": "seq", "base_config": str(TINY_BASE), "executor": executor}))
    sweep_dir = tmp_path / "sweep"
    rounds = 0
    while True:
        sweep = AdaptiveSweep(sweep_dir, spec, s, workers=4)  # a fresh process each round, as a rerun
        if sweep.run_slurm(wait=False, poll_s=0):
            return sweep, rounds
        for point, rid in sweep.points.items():
            rd = sweep_dir / "runs" / rid
            if not (rd / "summary.json").exists():
                rd.mkdir(parents=True, exist_ok=True)
                (rd / "summary.json").write_text(json.dumps(_planted(point, noise)))
        rounds += 1
        assert rounds < 200, "the study did not finish"


def _study(**changes):
    settings = {"depths": (2, 4, 8), "base_lrs_log2": (-9.0, -8.0, -7.0, -6.0, -5.0), "step_log2": 1.0,
                "refine_log2": 0.5, "window": 3, "max_widen": 1, "seeds": 3, "base_seeds": 6, "fit_window": 2,
                "bootstrap": 200, **changes}  # fmt: skip
    return replace(load_study("quick"), **settings)


@pytest.mark.slow  # ~90-150 runs expanded through the sweep machinery (about a second each)
def test_sequential_study_meets_its_goals_then_stops_and_reruns_add_nothing(tmp_path, monkeypatch):
    from study.summary import render_markdown, study_status

    s = _study(goals={"slope_ci_halfwidth": 0.2, "deepest_opt_ci_width": 1.0}, budget_runs=400)
    sweep, _ = _drive(tmp_path, monkeypatch, s, noise=0.04)
    results, stop, used, lines, _ = study_status(sweep, s)
    assert stop.reason == "goals_met", (stop, used)
    assert all(c["met"] for c in stop.checks) and len(stop.checks) == 8  # 2 goals x 2 presets x mid, end
    assert used["runs_sequential"] > 0, "the planted noise should need the sequential phase"
    assert used["runs"] == len(sweep.points) == len(results) < s.budget_runs
    assert used["runs_diverged"] > 0 and used["runs_at_shared_base"] == sum(p.depth == 2 for p in results)
    assert sweep.planner.next_points(results) == []
    md = render_markdown({"presets": {}, "stop_lines": lines, "goals": list(stop.checks), "corpus": "sotu"}, s, 1.0)
    assert md.splitlines()[2].startswith("**every goal met.**") and "8 of 8 met" in md
    assert "State of the Union" in md  # the corpus's attribution


@pytest.mark.slow
def test_sequential_study_stops_at_its_budget_and_says_so(tmp_path, monkeypatch):
    from study.summary import render_markdown, study_status

    s = _study(goals={"slope_ci_halfwidth": 0.01}, budget_runs=90)
    sweep, _ = _drive(tmp_path, monkeypatch, s, noise=0.04)
    results, stop, used, lines, _ = study_status(sweep, s)
    assert stop.reason == "budget_spent" and len(results) == 90 == used["runs"]
    md = render_markdown({"presets": {}, "stop_lines": lines, "goals": list(stop.checks)}, s, 1.0)
    assert md.splitlines()[2].startswith("**STOPPED ON BUDGET")
    assert "| NO |" in md


def test_a_run_summary_becomes_the_planners_outcome():
    """Finished runs give every eval (a nan eval kept: eval transfer counts it as diverged at
    that fraction), diverged runs DIVERGED, failed ones None, as results.csv and eval read them."""
    from rundir.files import EvalRecord, RunSummary
    from study.planner import DIVERGED, Finished, end_loss
    from study.sweep import _outcome

    evals = (EvalRecord(15, 0.5, math.nan), EvalRecord(30, 1.0, 4.5))
    done = RunSummary(status="completed", final_val_loss=4.5, evals=evals)
    outcome = _outcome(done)
    assert isinstance(outcome, Finished) and outcome.evals[1] == (1.0, 4.5) and math.isnan(outcome.evals[0][1])
    assert end_loss(outcome) == 4.5
    assert _outcome(RunSummary(status="diverged")) == DIVERGED
    assert _outcome(RunSummary(status="failed")) is None and _outcome(None) is None
    assert _outcome(RunSummary(status="completed", final_val_loss=math.inf)) == DIVERGED


def test_a_study_whose_sweep_yaml_is_lost_replans_from_its_final_run_dirs(tmp_path, monkeypatch):
    """The plan is a function of the run directories: with sweep.yaml deleted, a rerun (local
    or SLURM) plans every point again from the finished runs, trains nothing and submits
    nothing (it used to stop after the first batch, whose runs were all final)."""
    s = _study(depths=(2, 4), base_seeds=3)
    sweep, _ = _drive(tmp_path, monkeypatch, s, noise=0.04)
    points = dict(sweep.points)
    assert len(points) > 10
    spec, sweep_dir = tmp_path / "demo_sweep.yaml", tmp_path / "sweep"
    for run in ("run", "run_slurm"):
        (sweep_dir / "sweep.yaml").unlink()
        again = AdaptiveSweep(sweep_dir, spec, s, workers=4)
        if run == "run":
            monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", "false")  # training anything would fail the run
            again.run()
        else:
            monkeypatch.setenv(
                "PATH", f"{stub_bin(tmp_path, {'sbatch': 'exit 1', 'squeue': 'true'})}:{os.environ['PATH']}"
            )
            assert again.run_slurm(wait=False, poll_s=0)
        assert again.points == points
        assert again.results() == sweep.results()


def test_a_moved_study_directory_resumes_there(tmp_path, monkeypatch):
    """A study directory moved (or copied) elsewhere, its base config rewritten by the study to
    point there (as ``launch demo`` does): the sweep plans on there with its runs. Any other
    change of the base config is still refused (it used to fail reading the old place)."""
    import shutil

    from launch.errors import LaunchError
    from launch.sweep_dir import write_plan

    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    s = _study(depths=(2, 4), base_seeds=3)

    def write(study_dir: Path, **changes) -> Path:
        base = yaml.safe_load(TINY_BASE.read_text())
        base.setdefault("data", {})["cache_dir"] = str(study_dir / "cache")  # a path under the study dir
        for k, v in changes.items():
            section, name = k.split(".")
            base[section][name] = v
        (study_dir / "demo_base.yaml").write_text(yaml.safe_dump(base))
        spec = {"name": "moved", "base_config": "demo_base.yaml", "executor": {"kind": "local", "max_parallel": 2}}
        (study_dir / "demo_sweep.yaml").write_text(yaml.safe_dump(spec))
        return study_dir / "demo_sweep.yaml"

    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.mkdir()
    first = AdaptiveSweep(a / "sweep", write(a), s, workers=2)
    assert first._advance(), "the scan's first points"
    shutil.copytree(a, c)
    a.rename(b)
    moved = AdaptiveSweep(b / "sweep", write(b), s, workers=2)
    assert moved.points == first.points and moved.plan.base_config_source == str(b / "demo_base.yaml")
    snapshot = yaml.safe_load((b / "sweep" / "base_config.yaml").read_text())
    assert snapshot["data"]["cache_dir"] == str(b / "cache")
    write_plan(moved.sweep_dir, moved.plan)  # what adding points does: no refusal
    with pytest.raises(LaunchError, match="differs from the snapshot"):  # moved and changed
        AdaptiveSweep(c / "sweep", write(c, **{"training.steps": 31}), s, workers=2)


def test_a_study_file_that_changed_the_run_shape_is_refused_before_anything_runs(tmp_path, monkeypatch):
    """The study file's width edited between two parts of a study (the same --out): the runs
    in the directory were trained, or are queued, at the old width. The study used to go on
    without a word where the planner added no point (only adding points checked the base
    config): it ran the queued runs at the old width and reported them under the new one.
    It is refused when the sweep is opened, naming the keys that changed and what to do."""
    from launch.errors import LaunchError

    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    s = _study(depths=(2, 4), base_seeds=3)

    def write(width: int) -> Path:
        base = yaml.safe_load(TINY_BASE.read_text())
        base["model"]["hidden_size"] = base["parametrization"]["base_hidden_size"] = width
        (tmp_path / "demo_base.yaml").write_text(yaml.safe_dump(base))
        spec = {"name": "shape", "base_config": "demo_base.yaml", "executor": {"kind": "local", "max_parallel": 2}}
        (tmp_path / "demo_sweep.yaml").write_text(yaml.safe_dump(spec))
        return tmp_path / "demo_sweep.yaml"

    first = AdaptiveSweep(tmp_path / "sweep", write(64), s, workers=2)
    queued = first._advance()
    assert len(queued) == 5  # the base grid, queued; the planner adds nothing more until they finish
    assert AdaptiveSweep(tmp_path / "sweep", write(64), s, workers=2).points == first.points  # the same study
    with pytest.raises(LaunchError) as err:
        AdaptiveSweep(tmp_path / "sweep", write(96), s, workers=2)
    message = str(err.value)
    assert "model.hidden_size: 64 -> 96" in message and "parametrization.base_hidden_size: 64 -> 96" in message
    assert "give another --out" in message and "--allow-base-change" not in message  # not a flag of launch demo
    assert yaml.safe_load((tmp_path / "sweep" / "base_config.yaml").read_text())["model"]["hidden_size"] == 64


def test_a_depth_dropped_from_the_study_file_keeps_its_runs_out_of_the_study(tmp_path, monkeypatch):
    """depths [2, 4, 8] run, then the study file says [2, 8] on the same --out: the L=4 runs
    stay on disk but are not the study's. They used to be counted against its budget, analysed
    (the slope and the goals rested on L=4 while the summary's table left it out), and an
    unfinished one was trained."""
    from launch.status import collect_states, write_results
    from study.analysis import analyse

    s = _study(depths=(2, 4, 8), base_seeds=3, refine_log2=0.0, max_widen=0)
    sweep, _ = _drive(tmp_path, monkeypatch, s, noise=0.04)
    at4 = {p: rid for p, rid in sweep.points.items() if p.depth == 4}
    assert len(at4) >= 6
    unfinished = next(iter(at4.values()))
    (tmp_path / "sweep" / "runs" / unfinished / "summary.json").unlink()  # as if cut before it finished

    dropped = replace(s, depths=(2, 8))
    again = AdaptiveSweep(tmp_path / "sweep", tmp_path / "demo_sweep.yaml", dropped, workers=4)
    assert {p.depth for p in again.points} == {2, 8}
    assert again.points == {p: rid for p, rid in sweep.points.items() if p.depth != 4}
    assert unfinished not in again._work()  # not trained for a study that no longer has L=4
    assert {p.depth for p in again.results()} == {2, 8}

    write_results(again.sweep_dir, again.plan, collect_states(again.sweep_dir, again.plan))
    analyse(again.sweep_dir, tmp_path / "report", dropped)
    report = json.loads((tmp_path / "report" / "transfer.json").read_text())
    analysed = {d["depth"] for r in report["results"] for d in r["depths"]}
    assert analysed == {2, 8}
    assert "only depths [2, 8] of [2, 4, 8] analysed (--depths)" in [w["message"] for w in report["warnings"]]


def test_launch_sweep_refuses_a_studys_spec_and_leaves_its_plan_alone(tmp_path, monkeypatch, capsys):
    """``launch sweep OUT/demo_sweep.yaml --sweep-dir OUT/sweep`` (the spec a study writes) used
    to expand its empty grid into one new run, replace the study's sweep.yaml with it (every
    study run an orphan, a duplicate of the base run trained) and exit 0; ``--dry-run`` showed
    that as fine, and the next ``launch demo`` died with a KeyError traceback. The spec now says
    it is a study's and ``launch sweep`` refuses it (exit 2); a study directory whose sweep.yaml
    holds a run that is no study point is refused by name."""
    from launch.__main__ import main
    from launch.errors import LaunchError
    from study.demo import write_sweep_spec

    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    s = _study(depths=(2, 4), base_seeds=3)
    written = write_sweep_spec(tmp_path, s, tmp_path / "data", 2, "local", None)
    assert yaml.safe_load(written.read_text())["study"] == "demo_quick"

    spec = tmp_path / "demo_sweep.yaml"
    executor = {"kind": "local", "max_parallel": 2}
    spec.write_text(yaml.safe_dump({"name": "st", "study": "st", "base_config": str(TINY_BASE), "executor": executor}))
    sweep = AdaptiveSweep(tmp_path / "sweep", spec, s, workers=2)
    assert len(sweep._advance()) == 5
    before = (tmp_path / "sweep" / "sweep.yaml").read_text()
    for extra in (["--dry-run"], []):
        assert main(["sweep", str(spec), "--sweep-dir", str(tmp_path / "sweep"), *extra]) == 2
        err = capsys.readouterr().err
        assert "the runs of this sweep are planned by study 'st'" in err
        assert f"python -m launch status {tmp_path / 'sweep'}" in err
    assert (tmp_path / "sweep" / "sweep.yaml").read_text() == before
    assert not (tmp_path / "sweep" / "runs").exists() or not any((tmp_path / "sweep" / "runs").iterdir())

    plain = tmp_path / "plain.yaml"  # a spec without the mark (a study's from before it), run anyway
    plain.write_text(yaml.safe_dump({"name": "st", "base_config": str(TINY_BASE), "executor": executor}))
    assert main(["sweep", str(plain), "--sweep-dir", str(tmp_path / "sweep"), "--dry-run"]) == 0
    from launch.sweep_dir import write_plan
    from launch.sweep_spec import expand, load_spec

    write_plan(tmp_path / "sweep", expand(plain, load_spec(plain)))
    with pytest.raises(LaunchError, match="matches no variant of study 'demo_quick'"):
        AdaptiveSweep(tmp_path / "sweep", spec, s, workers=2)


def test_eval_at_points_are_recorded_analysed_and_each_held_to_the_goals():
    """Study key ``eval_at: [0.25, 0.5, 1.0]``: every run config evaluates there, the planner's
    analysis (the report's call) analyses all three, and each goal is checked at each: 2 goals x
    2 presets x 3 fractions = 12 checks. The planted optimum at f=0.25 sits 1 octave above the
    end's (-7 at L0), and the analysis finds it there."""
    from study.data import base_config
    from study.planner import DIVERGED, Finished, Planner

    s = _study(eval_at=(0.25, 0.5, 1.0), goals={"slope_ci_halfwidth": 0.3, "deepest_opt_ci_width": 2.0},
               budget_runs=300, bootstrap=100)  # fmt: skip
    assert base_config(s, Path("data"))["eval"]["at"] == [0.25, 0.5, 1.0]

    def outcome(p):
        rng = np.random.default_rng(zlib.crc32(repr(p).encode()))
        x_end = -7.0 - SLOPE[p.preset] * math.log2(p.depth / 2)
        if p.log2_lr - x_end > 2.5:
            return DIVERGED
        losses = []
        for f, shift in ((0.25, 1.0), (0.5, 0.5), (1.0, 0.0)):
            x = x_end + shift
            losses.append((f, 4.0 + 1.0 / f + 0.1 * (p.log2_lr - x) ** 2 + 0.01 * rng.standard_normal()))
        return Finished(tuple(losses))

    planner, results = Planner(s), {}
    while batch := planner.next_points(results):
        results.update({p: outcome(p) for p in batch})
        assert len(results) <= s.budget_runs
    stop = planner.stop(results)
    assert stop.reason == "goals_met", stop
    assert sorted({c["fraction"] for c in stop.checks}) == [0.25, 0.5, 1.0] and len(stop.checks) == 12
    analysis = planner.analysis(results)
    assert analysis.fractions == [0.25, 0.5, 1.0]
    base = next(d for r in analysis.results if r.fraction == 0.25 and r.family.preset == "sp" for d in r.depths
                if d.depth == 2)  # fmt: skip
    assert abs(base.optimum.log2_lr - (-6.0)) < 0.2, base.optimum


@pytest.mark.parametrize(
    "eval_at, message",
    [
        ([0.5], "must end with 1.0"),
        ([1.0, 0.5], "strictly increasing"),
        ([0.0, 1.0], "in (0, 1]"),
        ([0.01, 0.02, 1.0], "fall on steps [1, 1, 30]"),  # quick.yaml trains 30 steps
    ],
)
def test_eval_at_refuses_points_the_study_cannot_use(tmp_path, eval_at, message):
    from launch.errors import LaunchError

    study = tmp_path / "mine.yaml"
    study.write_text((Path(__file__).parents[1] / "configs/studies/quick.yaml").read_text() + f"eval_at: {eval_at}\n")
    with pytest.raises(LaunchError, match=r"mine\.yaml: eval_at: ") as info:
        load_study(str(study))
    assert message in str(info.value)

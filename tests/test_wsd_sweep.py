"""Sweeps of cooldown branches (checkpoint.init_mode=continue): a grid entry
``checkpoint.init_from: {runs_of: SWEEP_DIR, step: S}`` expands into one branch per run of another
sweep, linked with that run's grid values; results.csv names each branch's source
(branch_of.step, branch_of.run_id, branch_of.run_dir) and eval reads the source's path as a record,
not a swept setting. The example pair configs/sweeps/wsd/{stable,cooldown}.yaml runs end to end."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from eval.__main__ import main as eval_main
from eval.curves import build_curves
from eval.results import read_results
from launch import attempts
from launch.__main__ import main
from launch.errors import LaunchError
from launch.run_ids import run_id
from launch.run_state import run_state
from launch.status import results_table
from launch.sweep_dir import orphan_run_dirs, read_plan, write_plan
from launch.sweep_plan import PlannedRun, SweepPlan
from launch.sweep_spec import expand, load_spec
from rundir.contract import BRANCH_COLUMNS, INIT_FROM_KEY, ExitCode, Status
from rundir.files import (
    COMMON_FILE,
    RunSummary,
    branch_source,
    checkpoint_dir,
    read_metrics_with_source,
    with_relative_source,
    write_summary,
)
from tests.launch_fixtures.helpers import REPO, TINY_BASE, needs_train_gpt, read_csv, use_fake_trainer

WSD = REPO / "configs" / "sweeps" / "wsd"
STEP = 12


def write_spec(path: Path, **spec) -> Path:
    path.write_text(yaml.safe_dump({"name": path.stem, "base_config": str(TINY_BASE), **spec}, sort_keys=False))
    return path


@pytest.fixture
def source(tmp_path) -> Path:
    """An expanded 2 x 2 sweep (depth x LR) with no training: its runs' files are planted by the tests."""
    spec = write_spec(
        tmp_path / "stable.yaml",
        overrides={"training.steps": 24, "parametrization.base_num_layers": 2},
        grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001, 0.004]},
    )
    sweep = tmp_path / "stable"
    sweep.mkdir()
    write_plan(sweep, expand(spec, load_spec(spec)))
    return sweep


def plant_checkpoint(sweep: Path, run_id: str, step: int) -> Path:
    folder = checkpoint_dir(sweep / "runs" / run_id, step)
    folder.mkdir(parents=True)
    (folder / COMMON_FILE).write_text(json.dumps({"step": step}))
    return folder


def branches(spec: Path) -> SweepPlan:
    """The branch sweep of ``spec`` expanded for the sweep directory ``cooldown`` beside it."""
    return expand(spec, load_spec(spec), sweep_dir=spec.parent / "cooldown")


def source_of(plan: SweepPlan, run: PlannedRun) -> str:
    """The checkpoint.init_from the trainer gets: sweep.yaml's, relative to the sweep directory."""
    return plan.point(Path(plan.spec_file).parent / "cooldown", run)["checkpoint.init_from"]


def branch_spec(tmp_path: Path, source: Path, **grid) -> Path:
    return write_spec(
        tmp_path / "cooldown.yaml",
        overrides={"parametrization.base_num_layers": 2, "checkpoint.init_mode": "continue"},
        grid={"checkpoint.init_from": {"runs_of": str(source), "step": STEP}, **grid},
        allow_grid_keys=["training.steps"],
    )


def test_runs_of_expands_one_branch_per_source_run_with_its_grid_values(source, tmp_path, capsys):
    """Each source run that has its step-12 checkpoint gives one row: the folder, its depth and LR.
    A run that has not got there is refused (naming it); one that diverged before is left out,
    said on stderr. checkpoint.init_mode=continue is a fixed override although it needs the swept
    init_from (checked with the grid's first values). IDs name the branch step."""
    src = read_plan(source)
    ids = [r.run_id for r in src.runs]
    folders = {rid: plant_checkpoint(source, rid, STEP) for rid in ids[:2]}
    spec = branch_spec(tmp_path, source, **{"training.steps": [14, 18]})
    with pytest.raises(LaunchError) as refused:
        branches(spec)
    assert f"2 run(s) of {source} have no checkpoint at step {STEP}" in str(refused.value)
    assert f"{ids[2]}: has not reached step {STEP} yet" in str(refused.value)

    folders[ids[2]] = plant_checkpoint(source, ids[2], STEP)
    write_summary(source / "runs" / ids[3], RunSummary(Status.DIVERGED, steps=5))
    plan = branches(spec)
    assert f"{ids[3]} (diverged at step 5)" in capsys.readouterr().err
    assert len(plan.runs) == 3 * 2
    by_source = {r.run_id: r.point for r in src.runs}
    for run in plan.runs:
        rid = next(rid for rid, folder in folders.items() if source_of(plan, run) == str(folder))
        # sweep.yaml holds it relative to the sweep directory: the IDs do not change when both move
        assert run.point["checkpoint.init_from"] == f"../stable/runs/{rid}/checkpoints/step_{STEP:08d}"
        for key in ("model.num_layers", "optimizer.lr"):
            assert run.point[key] == by_source[rid][key]
        assert f"-from{STEP}-steps{run.point['training.steps']}-" in run.run_id
    # the same expansion twice: the same IDs (a rerun finds its runs)
    assert [r.run_id for r in branches(spec).runs] == [r.run_id for r in plan.runs]


def test_a_source_checkpoint_gone_is_refused_with_the_keys_that_keep_it(source, tmp_path):
    ids = [r.run_id for r in read_plan(source).runs]
    for rid in ids:
        plant_checkpoint(source, rid, 24)
        write_summary(source / "runs" / rid, RunSummary(Status.COMPLETED, steps=24))
    spec = branch_spec(tmp_path, source, **{"training.steps": [14]})
    with pytest.raises(LaunchError, match="checkpoint.keep keeping it"):
        branches(spec)


def test_runs_of_without_step_or_with_a_missing_sweep_is_refused(source, tmp_path):
    spec = write_spec(
        tmp_path / "bad.yaml",
        overrides={"checkpoint.init_mode": "continue"},
        grid={"checkpoint.init_from": {"runs_of": str(source)}},
    )
    with pytest.raises(LaunchError, match=r"runs_of needs exactly the keys \['runs_of', 'step'\]"):
        branches(spec)
    spec = write_spec(
        tmp_path / "bad2.yaml",
        overrides={"checkpoint.init_mode": "continue"},
        grid={"checkpoint.init_from": {"runs_of": str(tmp_path / "nowhere"), "step": 3}},
    )
    with pytest.raises(LaunchError, match="sweep.yaml not found"):
        branches(spec)


def test_results_csv_names_each_branch_source_and_eval_reads_it_as_a_record(source, tmp_path):
    """Columns: the canonical keys, the branch keys swept (not the init_from path), then
    branch_of.step / run_id / run_dir. A finished branch reads them from its summary's branch_of;
    one not started from the checkpoint folder it names. eval's read_results takes branch_of.step
    as a setting and the source's name and path as records, so curves over LR stay whole."""
    ids = [r.run_id for r in read_plan(source).runs]
    folders = {rid: plant_checkpoint(source, rid, STEP) for rid in ids}
    spec = branch_spec(tmp_path, source, **{"training.steps": [14]})
    plan = branches(spec)
    sweep = tmp_path / "cooldown"
    sweep.mkdir()
    write_plan(sweep, plan)
    done = plan.runs[0]
    record = {"run_dir": "/elsewhere/L2-src", "checkpoint": "/elsewhere/L2-src/checkpoints/step_00000012", "step": 12}
    write_summary(sweep / "runs" / done.run_id, RunSummary(Status.COMPLETED, steps=14, branch_of=record))
    states = {r.run_id: run_state(sweep / "runs" / r.run_id, 1) for r in plan.runs}
    table = results_table(sweep, plan, states)
    header = table[0]
    assert header[-7:-4] == list(BRANCH_COLUMNS)
    assert "checkpoint.init_from" not in header and "training.steps" in header
    rows = {row[0]: dict(zip(header, row)) for row in table[1:]}
    assert (rows[done.run_id]["branch_of.step"], rows[done.run_id]["branch_of.run_dir"]) == (
        "12",
        os.path.relpath("/elsewhere/L2-src", sweep),
    )
    assert rows[done.run_id]["branch_of.run_id"] == "L2-src"
    for run in plan.runs[1:]:
        rid = next(rid for rid, folder in folders.items() if source_of(plan, run) == str(folder))
        row = rows[run.run_id]
        assert (row["branch_of.step"], row["branch_of.run_id"]) == (str(STEP), rid)
        assert row["branch_of.run_dir"] == f"../stable/runs/{rid}"  # relative to the folder of results.csv

    csv_path = tmp_path / "results.csv"
    with_losses = [header] + [[*row[:-1], "3.5"] for row in table[1:]]
    csv_path.write_text("\n".join(",".join(r) for r in with_losses) + "\n")
    sweep_results = read_results(csv_path)
    assert "branch_of.step" in sweep_results.extra_keys
    assert not {"branch_of.run_id", "branch_of.run_dir"} & set(sweep_results.extra_keys)


def cooldown_spec(tmp_path: Path, source: Path, branch: dict, **spec) -> Path:
    overrides = {"parametrization.base_num_layers": 2, "checkpoint.init_mode": "continue",
                 "scheduler.decay_style": "wsd", **spec.pop("overrides", {})}  # fmt: skip
    return write_spec(
        tmp_path / "cooldown.yaml",
        overrides=overrides,
        grid={"checkpoint.init_from": {"runs_of": str(source), **branch}, **spec.pop("grid", {})},
        **spec,
    )


def test_one_runs_of_entry_branches_from_several_steps_each_with_its_cooldowns(source, tmp_path):
    """step: [6, 18], cooldown: [2, 6]: 4 sources x 2 steps x 2 cooldowns = 16 branches, each from
    its step's checkpoint with training.steps = step + cooldown and scheduler.wsd_decay_steps =
    cooldown (no allow_grid_keys needed: cooldown says it); IDs distinct and stable; results.csv
    has branch_of.step, training.steps and scheduler.wsd_decay_steps, and eval makes one family
    per (branch step, cooldown): 4, each a loss-vs-LR curve per depth."""
    src = read_plan(source)
    folders = {
        (rid, step): plant_checkpoint(source, rid, step) for rid in (r.run_id for r in src.runs) for step in (6, 18)
    }
    spec = cooldown_spec(tmp_path, source, {"step": [6, 18], "cooldown": [2, 6]})
    plan = branches(spec)
    assert len(plan.runs) == 4 * 2 * 2 == len({r.run_id for r in plan.runs})
    by_source = {r.run_id: r.point for r in src.runs}
    seen = set()
    for run in plan.runs:
        (rid, step), _ = next(kv for kv in folders.items() if str(kv[1]) == source_of(plan, run))
        cooldown = run.point["scheduler.wsd_decay_steps"]
        assert run.point["training.steps"] == step + cooldown and run.resolved["training.steps"] == step + cooldown
        assert (run.point["model.num_layers"], run.point["optimizer.lr"]) == (
            by_source[rid]["model.num_layers"],
            by_source[rid]["optimizer.lr"],
        )
        assert f"-from{step}-" in run.run_id and f"-steps{step + cooldown}-" in run.run_id
        seen.add((rid, step, cooldown))
    assert len(seen) == 16
    assert plan.grid["training.steps"] == [8, 12, 20, 24] and plan.grid["scheduler.wsd_decay_steps"] == [2, 6]
    assert [r.run_id for r in branches(spec).runs] == [r.run_id for r in plan.runs]

    sweep = tmp_path / "cooldown"
    sweep.mkdir()
    write_plan(sweep, plan)
    table = results_table(sweep, plan, {r.run_id: run_state(sweep / "runs" / r.run_id, 1) for r in plan.runs})
    header = table[0]
    assert {"branch_of.step", "training.steps", "scheduler.wsd_decay_steps"} <= set(header)
    csv_path = tmp_path / "results.csv"
    done = [[*row[:-4], "completed", *row[-3:-1], "3.5"] for row in table[1:]]  # as if every branch had ended
    csv_path.write_text("\n".join(",".join(r) for r in [header, *done]) + "\n")
    curves = build_curves(read_results(csv_path), [1.0])
    families = {(f.value("branch_of.step"), f.value("training.steps"), f.value("scheduler.wsd_decay_steps"))
                for f in curves.families}  # fmt: skip
    assert families == {("6", "8", "2"), ("6", "12", "6"), ("18", "20", "2"), ("18", "24", "6")}
    for (family, _), per_depth in curves.curves.items():
        assert [(c.depth, len(c.log2_lr)) for c in per_depth] == [(2, 2), (4, 2)], family.label


def test_several_steps_refuse_a_missing_checkpoint_a_steps_value_not_past_it_and_cooldown_without_wsd(source, tmp_path):
    ids = [r.run_id for r in read_plan(source).runs]
    for rid in ids:
        plant_checkpoint(source, rid, 6)
    for rid in ids[:3]:
        plant_checkpoint(source, rid, 18)
    spec = cooldown_spec(tmp_path, source, {"step": [6, 18], "cooldown": 2})
    with pytest.raises(LaunchError, match=rf"1 run\(s\) of {source} have no checkpoint at step 18:\n  {ids[3]}: has"):
        branches(spec)
    plant_checkpoint(source, ids[3], 18)
    assert len(branches(spec).runs) == 8
    # no cooldown: training.steps from another entry, which must pass every branch step
    spec = cooldown_spec(tmp_path, source, {"step": [6, 18]}, grid={"training.steps": [14]},
                         allow_grid_keys=["training.steps"], overrides={"scheduler.wsd_decay_steps": 4})  # fmt: skip
    with pytest.raises(LaunchError, match=r"training.steps=14 is not past the branch step 18: a branch trains on"):
        branches(spec)
    spec = cooldown_spec(tmp_path, source, {"step": [6, 18]}, grid={"training.steps": [24]},
                         allow_grid_keys=["training.steps"], overrides={"scheduler.wsd_decay_steps": 4})  # fmt: skip
    assert {r.point["training.steps"] for r in branches(spec).runs} == {24}
    spec = cooldown_spec(tmp_path, source, {"step": 6, "cooldown": [2]}, overrides={"scheduler.decay_style": "cosine"})
    with pytest.raises(LaunchError, match=r"'cooldown' sets scheduler.wsd_decay_steps, .* this point's is 'cosine'"):
        branches(spec)
    spec = cooldown_spec(tmp_path, source, {"step": 6, "cooldown": [2]}, overrides={"training.steps": 8})
    with pytest.raises(LaunchError, match=r"cooldown sets \['training.steps'\] \(training.steps = step \+ cooldown"):
        branches(spec)
    spec = cooldown_spec(tmp_path, source, {"step": [6, 6]})
    with pytest.raises(LaunchError, match=r"step: lists a value twice: \[6, 6\]"):
        branches(spec)
    spec = cooldown_spec(tmp_path, source, {"step": 6, "cooldown": 0})
    with pytest.raises(LaunchError, match=r"cooldown: must be a positive integer or a list of them"):
        branches(spec)


@needs_train_gpt
def test_the_example_wsd_sweeps_run_end_to_end(tmp_path, monkeypatch, capsys):
    """configs/sweeps/wsd/stable.yaml, then cooldown.yaml (one floor LR and one 2-step cooldown, to
    keep it short) from the directory holding sweeps/wsd_stable: every branch completes from its
    source's step-6 or step-18 checkpoint with its source's depth and LR and trains to step + 2;
    results.csv names the source; a rerun of the sweep starts nothing (no new attempt) and writes
    the same results.csv; eval transfer finds one family per branch step, and read with the
    stable sweep one more (the stable runs' own ends)."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    monkeypatch.chdir(tmp_path)
    specs = tmp_path / "configs" / "sweeps" / "wsd"
    specs.mkdir(parents=True)
    shutil.copy(WSD / "stable.yaml", specs / "stable.yaml")
    cooldown_yaml = yaml.safe_load((WSD / "cooldown.yaml").read_text())
    assert cooldown_yaml["grid"]["checkpoint.init_from"] == {
        "runs_of": "sweeps/wsd_stable",
        "step": [6, 18],
        "cooldown": [2, 6],
    }
    cooldown_yaml["grid"]["checkpoint.init_from"]["cooldown"] = [2]
    (specs / "cooldown.yaml").write_text(yaml.safe_dump(cooldown_yaml, sort_keys=False))
    shutil.copy(TINY_BASE, tmp_path / "configs" / "tiny_cpu.yaml")
    assert main(["sweep", str(specs / "stable.yaml"), "--no-progress"]) == 0
    cooldown = [str(specs / "cooldown.yaml"), "grid.optimizer.min_lr_ratio=[0.0]", "--no-progress"]
    assert main(["sweep", *cooldown]) == 0
    stable, branches = read_plan(tmp_path / "sweeps" / "wsd_stable"), read_plan(tmp_path / "sweeps" / "wsd_cooldown")
    assert len(branches.runs) == 2 * len(stable.runs)
    rows = read_csv(tmp_path / "sweeps" / "wsd_cooldown" / "results.csv")
    assert len(rows) == len(branches.runs)
    source_of = {r.run_id: r.point for r in stable.runs}
    for row in rows:
        src = source_of[row["branch_of.run_id"]]
        assert (int(row["model.num_layers"]), float(row["optimizer.lr"])) == (
            src["model.num_layers"],
            src["optimizer.lr"],
        )
        step = int(row["branch_of.step"])
        assert row["status"] == "completed" and row["val_loss"]
        assert int(row["step"]) == int(row["training.steps"]) == step + 2 and row["scheduler.wsd_decay_steps"] == "2"
        summary = json.loads(
            (tmp_path / "sweeps" / "wsd_cooldown" / "runs" / row["run_id"] / "summary.json").read_text()
        )
        assert summary["branch_of"]["step"] == step
        assert summary["branch_of"]["run_dir"] == str(
            tmp_path / "sweeps" / "wsd_stable" / "runs" / row["branch_of.run_id"]
        )
    assert sorted(int(row["branch_of.step"]) for row in rows) == [6] * 4 + [18] * 4
    before = (tmp_path / "sweeps" / "wsd_cooldown" / "results.csv").read_text()
    assert main(["sweep", *cooldown]) == 0
    assert (tmp_path / "sweeps" / "wsd_cooldown" / "results.csv").read_text() == before
    for run in branches.runs:
        assert len(attempts.read(tmp_path / "sweeps" / "wsd_cooldown" / "runs" / run.run_id).attempts) == 1

    capsys.readouterr()
    report = ["--out", "report", "--no-figures", "--bootstrap", "0"]
    assert eval_main(["transfer", "sweeps/wsd_cooldown", *report]) == 0

    def families() -> list[tuple[str, str]]:
        record = json.loads((tmp_path / "report" / "transfer.json").read_text())
        return [(f["keys"]["branch_of.step"], f["keys"]["training.steps"]) for f in record["families"]]

    assert families() == [("6", "8"), ("18", "20")]  # one per branch step (and length), in order of their values
    assert eval_main(["transfer", "sweeps/wsd_stable", "sweeps/wsd_cooldown", *report]) == 0
    assert families() == [("", ""), ("6", "8"), ("18", "20")]  # the stable runs (no such columns) first
    record = json.loads((tmp_path / "report" / "transfer.json").read_text())
    assert record["sources"] == [
        {"file": "sweeps/wsd_stable/results.csv", "runs": 4},
        {"file": "sweeps/wsd_cooldown/results.csv", "runs": 8},
    ]


def moved_pair(tmp_path: Path) -> tuple[Path, Path]:
    """A source sweep with checkpoints at step 12 (2 x 2 runs) and its branch sweep beside it,
    expanded and written under tmp/a/sweeps, then moved (with the original path gone) to
    tmp/b/elsewhere by the test: (old sweeps folder, new one)."""
    old = tmp_path / "a" / "sweeps"
    old.mkdir(parents=True)
    spec = write_spec(old / "stable.yaml", overrides={"training.steps": 24, "parametrization.base_num_layers": 2},
                      grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001, 0.004]})  # fmt: skip
    (old / "stable").mkdir()
    write_plan(old / "stable", expand(spec, load_spec(spec)))
    for rid in (r.run_id for r in read_plan(old / "stable").runs):
        plant_checkpoint(old / "stable", rid, STEP)
    return old, tmp_path / "b" / "elsewhere"


def test_a_branch_sweep_moved_with_its_source_keeps_its_ids_and_finds_its_sources(tmp_path):
    """Expanded at A, both sweeps moved to B (A gone): sweep.yaml's init_from is relative to the
    sweep directory, so the trainer is given B's checkpoint folders, re-expanding at B gives the
    same 4 IDs, and results.csv names each source relative to it (the same bytes at A and B)."""
    old, new = moved_pair(tmp_path)
    spec = branch_spec(old, old / "stable", **{"training.steps": [14]})
    plan = expand(spec, load_spec(spec), sweep_dir=old / "cooldown")
    (old / "cooldown").mkdir()
    write_plan(old / "cooldown", plan)
    table_at_a = results_table(old / "cooldown", plan, {r.run_id: run_state(old / "cooldown" / "runs" / r.run_id, 1)
                                                      for r in plan.runs})  # fmt: skip
    shutil.move(old.parent, new.parent)
    (new.parent / "sweeps").rename(new)
    moved = read_plan(new / "cooldown")
    for run in moved.runs:
        argv = moved.train_invocation(new / "cooldown", run).argv()
        (given,) = [a.split("=", 1)[1] for a in argv if a.startswith("checkpoint.init_from=")]
        assert json.loads(given).startswith(str(new / "stable" / "runs")) and Path(json.loads(given)).is_dir()
    assert moved.missing_sources(new / "cooldown", moved.runs) == []
    spec_b = branch_spec(new, new / "stable", **{"training.steps": [14]})
    again = expand(spec_b, load_spec(spec_b), sweep_dir=new / "cooldown")
    assert [r.run_id for r in again.runs] == [r.run_id for r in plan.runs]
    table_at_b = results_table(new / "cooldown", moved, {r.run_id: run_state(new / "cooldown" / "runs" / r.run_id, 1)
                                                       for r in moved.runs})  # fmt: skip
    assert table_at_b == table_at_a
    assert {row[-5] for row in table_at_b[1:]} == {f"../stable/runs/{r.run_id}" for r in read_plan(new / "stable").runs}


def test_a_sweep_expanded_with_absolute_sources_keeps_its_ids_when_expanded_again_after_a_move(
    tmp_path, monkeypatch, capsys
):
    """A sweep.yaml written before sources were relative (absolute init_from, IDs hashing it),
    moved: `launch run` refuses it (exit 2, naming sweep.yaml, the run and the path) instead of
    failing every branch at its start; `launch sweep SPEC` from B keeps every ID (a finished branch
    is not run again), writes the relative form, and then `launch run` finds the sources."""
    old, new = moved_pair(tmp_path)
    spec = branch_spec(old, old / "stable", **{"training.steps": [14]})
    plan = expand(spec, load_spec(spec), sweep_dir=old / "cooldown")
    absolute = [replace(r, point={**r.point, INIT_FROM_KEY: source_of_dir(old / "cooldown", r)}) for r in plan.runs]
    legacy = replace(plan, sweep_relative=[], runs=[replace(r, run_id=run_id(r.point, plan.fixed)) for r in absolute])
    (old / "cooldown").mkdir()
    write_plan(old / "cooldown", legacy)
    done = legacy.runs[0].run_id
    write_summary(old / "cooldown" / "runs" / done, RunSummary(Status.COMPLETED, steps=14))
    shutil.move(old.parent, new.parent)
    (new.parent / "sweeps").rename(new)

    use_fake_trainer(monkeypatch)
    capsys.readouterr()
    assert main(["run", str(new / "cooldown"), "--no-progress"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"{new / 'cooldown' / 'sweep.yaml'}: checkpoint.init_from of 3 run(s) not found" in err
    assert f"{legacy.runs[1].run_id}: {old / 'stable' / 'runs'}" in err and "launch sweep SPEC" in err
    assert not (new / "cooldown" / "runs" / legacy.runs[1].run_id).exists()  # nothing started

    spec_b = branch_spec(new, new / "stable", **{"training.steps": [14]})
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(spec_b), "--sweep-dir", str(new / "cooldown"), "--dry-run"]) == ExitCode.OK
    out = capsys.readouterr()
    assert "4 run(s) keep their ID" in out.err
    assert f"skip completed {done}" in " ".join(out.out.split())
    kept = read_plan(new / "cooldown")
    assert [r.run_id for r in kept.runs] == [r.run_id for r in legacy.runs]  # a dry run writes nothing
    assert [r.run_id for r in expand(spec_b, load_spec(spec_b), sweep_dir=new / "cooldown").runs] != [
        r.run_id for r in legacy.runs
    ]  # a fresh expansion has other IDs (relative paths hashed): the kept ones are the old ones
    assert main(["sweep", str(spec_b), "--sweep-dir", str(new / "cooldown"), "--no-progress"]) == ExitCode.OK
    rewritten = read_plan(new / "cooldown")
    assert [r.run_id for r in rewritten.runs] == [r.run_id for r in legacy.runs]
    assert rewritten.sweep_relative == [INIT_FROM_KEY]
    assert attempts.read(new / "cooldown" / "runs" / done).attempts == []  # the finished one: not run again
    assert all(len(attempts.read(new / "cooldown" / "runs" / r.run_id).attempts) == 1 for r in legacy.runs[1:])
    assert orphan_run_dirs(new / "cooldown", rewritten) == []


def source_of_dir(sweep_dir: Path, run: PlannedRun) -> str:
    return os.path.normpath(sweep_dir / run.point[INIT_FROM_KEY])


def test_a_branch_finds_its_moved_source_from_its_record_old_or_new(tmp_path):
    """summary.json's branch_of: with relative_run_dir (written now) the source is found where the
    pair moved; a record without it (written before) is moved as the branch's config.yaml run.dir
    moved. Old code read the absolute path of the gone place. The joined curve: the source's rows
    up to the branch step (2 of 3), then the branch's own."""
    a = tmp_path / "a"
    src, branch = a / "stable" / "runs" / "S", a / "cooldown" / "runs" / "B"
    for folder, steps in ((src, (5, 10, 15)), (branch, (12, 14))):
        folder.mkdir(parents=True)
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"kind": "train", "step": s, "loss": 1.0 * s}) + "\n"
                                                      for s in steps))  # fmt: skip
    (branch / "config.yaml").write_text(yaml.safe_dump({"run": {"dir": str(branch)}}))
    old_record = {"run_dir": str(src), "checkpoint": str(src / "checkpoints" / "step_00000010"), "step": 10}
    for record in (old_record, with_relative_source(old_record, branch)):
        write_summary(branch, RunSummary(Status.COMPLETED, steps=14, branch_of=record))
        b = tmp_path / "b"
        shutil.copytree(a, b)
        moved = b / "cooldown" / "runs" / "B"
        shutil.rmtree(a)
        assert branch_source(moved, None) == {"run_dir": str(b / "stable" / "runs" / "S"), "step": 10}
        assert [r["step"] for r in read_metrics_with_source(moved)] == [5, 10, 12, 14]
        shutil.move(b, a)
    assert with_relative_source(old_record, branch)["relative_run_dir"] == "../../../stable/runs/S"


@needs_train_gpt
def test_the_wsd_pair_carried_to_another_path_resumes_there_and_is_read_there(tmp_path, monkeypatch, capsys):
    """As a sweep carried to a GPU node: both example sweeps (one depth, one branch step and
    cooldown: 2 runs, 2 branches) at A, one branch not yet run; A tarred... moved to B/deep/C (A
    gone). `launch run` from another directory trains that branch from B's source checkpoint (on
    the old code it named A's and failed, exit 1) and nothing else; the same `launch sweep` from
    C starts nothing; results.csv is byte for byte the one A had once every branch was done; and
    `eval loss-curves` joins each branch to its source at C."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    a = tmp_path / "a"
    specs = a / "configs" / "sweeps" / "wsd"
    specs.mkdir(parents=True)
    shutil.copy(WSD / "stable.yaml", specs / "stable.yaml")
    shutil.copy(WSD / "cooldown.yaml", specs / "cooldown.yaml")
    shutil.copy(TINY_BASE, a / "configs" / "tiny_cpu.yaml")
    monkeypatch.chdir(a)
    assert main(["sweep", "configs/sweeps/wsd/stable.yaml", "grid.model.num_layers=[2]", "--no-progress"]) == 0
    cooldown = ["sweep", "configs/sweeps/wsd/cooldown.yaml", "grid.optimizer.min_lr_ratio=[0.0]", "--no-progress",
                'grid.checkpoint.init_from={"runs_of": "sweeps/wsd_stable", "step": 6, "cooldown": 2}']  # fmt: skip
    assert main(cooldown) == 0
    whole = (a / "sweeps" / "wsd_cooldown" / "results.csv").read_bytes()
    ids = sorted(p.name for p in (a / "sweeps" / "wsd_cooldown" / "runs").iterdir())
    assert len(ids) == 3 and ids[0] == ".index_cache"
    shutil.rmtree(a / "sweeps" / "wsd_cooldown" / "runs" / ids[1])  # not run yet when it was carried
    c = tmp_path / "b" / "deep" / "c"
    c.parent.mkdir(parents=True)
    shutil.move(a, c)

    monkeypatch.chdir(tmp_path)
    assert main(["run", str(c / "sweeps" / "wsd_cooldown"), "--no-progress"]) == 0
    runs = c / "sweeps" / "wsd_cooldown" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ids
    assert [len(attempts.read(runs / rid).attempts) for rid in ids[1:]] == [1, 1]
    assert json.loads((runs / ids[1] / "summary.json").read_text())["branch_of"]["run_dir"].startswith(str(c))
    assert (c / "sweeps" / "wsd_cooldown" / "results.csv").read_bytes() == whole
    monkeypatch.chdir(c)
    assert main(cooldown) == 0
    assert [len(attempts.read(runs / rid).attempts) for rid in ids[1:]] == [1, 1]  # nothing run again
    assert (c / "sweeps" / "wsd_cooldown" / "results.csv").read_bytes() == whole
    capsys.readouterr()
    assert eval_main(["loss-curves", "sweeps/wsd_cooldown", "--out", "curves", "--no-figures"]) == 0
    assert "2 runs (2 with their source's rows up to the branch step)" in capsys.readouterr().out

"""Sweeps of cooldown branches (checkpoint.init_mode=continue): a grid entry
``checkpoint.init_from: {runs_of: SWEEP_DIR, step: S}`` expands into one branch per run of another
sweep, linked with that run's grid values; results.csv names each branch's source
(branch_of.step, branch_of.run_id, branch_of.run_dir) and eval reads the source's path as a record,
not a swept setting. The example pair configs/sweeps/wsd/{stable,cooldown}.yaml runs end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from eval.results import read_results
from launch import attempts
from launch.__main__ import main
from launch.errors import LaunchError
from launch.run_state import run_state
from launch.status import results_table
from launch.sweep_dir import read_plan, write_plan
from launch.sweep_spec import expand, load_spec
from rundir.contract import BRANCH_COLUMNS, Status
from rundir.files import COMMON_FILE, RunSummary, checkpoint_dir, write_summary
from tests.launch_fixtures.helpers import REPO, TINY_BASE, needs_train_gpt, read_csv

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
        expand(spec, load_spec(spec))
    assert f"2 run(s) of {source} have no checkpoint at step {STEP}" in str(refused.value)
    assert f"{ids[2]}: has not reached step {STEP} yet" in str(refused.value)

    folders[ids[2]] = plant_checkpoint(source, ids[2], STEP)
    write_summary(source / "runs" / ids[3], RunSummary(Status.DIVERGED, steps=5))
    plan = expand(spec, load_spec(spec))
    assert f"{ids[3]} (diverged at step 5)" in capsys.readouterr().err
    assert len(plan.runs) == 3 * 2
    by_source = {r.run_id: r.point for r in src.runs}
    for run in plan.runs:
        rid = next(rid for rid, folder in folders.items() if run.point["checkpoint.init_from"] == str(folder))
        assert Path(run.point["checkpoint.init_from"]).is_absolute()
        for key in ("model.num_layers", "optimizer.lr"):
            assert run.point[key] == by_source[rid][key]
        assert f"-from{STEP}-steps{run.point['training.steps']}-" in run.run_id
    # the same expansion twice: the same IDs (a rerun finds its runs)
    assert [r.run_id for r in expand(spec, load_spec(spec)).runs] == [r.run_id for r in plan.runs]


def test_a_source_checkpoint_gone_is_refused_with_the_keys_that_keep_it(source, tmp_path):
    ids = [r.run_id for r in read_plan(source).runs]
    for rid in ids:
        plant_checkpoint(source, rid, 24)
        write_summary(source / "runs" / rid, RunSummary(Status.COMPLETED, steps=24))
    spec = branch_spec(tmp_path, source, **{"training.steps": [14]})
    with pytest.raises(LaunchError, match="checkpoint.keep keeping it"):
        expand(spec, load_spec(spec))


def test_runs_of_without_step_or_with_a_missing_sweep_is_refused(source, tmp_path):
    spec = write_spec(
        tmp_path / "bad.yaml",
        overrides={"checkpoint.init_mode": "continue"},
        grid={"checkpoint.init_from": {"runs_of": str(source)}},
    )
    with pytest.raises(LaunchError, match=r"runs_of needs exactly the keys \['runs_of', 'step'\]"):
        expand(spec, load_spec(spec))
    spec = write_spec(
        tmp_path / "bad2.yaml",
        overrides={"checkpoint.init_mode": "continue"},
        grid={"checkpoint.init_from": {"runs_of": str(tmp_path / "nowhere"), "step": 3}},
    )
    with pytest.raises(LaunchError, match="sweep.yaml not found"):
        expand(spec, load_spec(spec))


def test_results_csv_names_each_branch_source_and_eval_reads_it_as_a_record(source, tmp_path):
    """Columns: the canonical keys, the branch keys swept (not the init_from path), then
    branch_of.step / run_id / run_dir. A finished branch reads them from its summary's branch_of;
    one not started from the checkpoint folder it names. eval's read_results takes branch_of.step
    as a setting and the source's name and path as records, so curves over LR stay whole."""
    ids = [r.run_id for r in read_plan(source).runs]
    folders = {rid: plant_checkpoint(source, rid, STEP) for rid in ids}
    spec = branch_spec(tmp_path, source, **{"training.steps": [14]})
    plan = expand(spec, load_spec(spec))
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
    assert (rows[done.run_id]["branch_of.step"], rows[done.run_id]["branch_of.run_dir"]) == ("12", "/elsewhere/L2-src")
    assert rows[done.run_id]["branch_of.run_id"] == "L2-src"
    for run in plan.runs[1:]:
        rid = next(rid for rid, folder in folders.items() if run.point["checkpoint.init_from"] == str(folder))
        row = rows[run.run_id]
        assert (row["branch_of.step"], row["branch_of.run_id"]) == (str(STEP), rid)
        assert row["branch_of.run_dir"] == str(source / "runs" / rid)

    csv_path = tmp_path / "results.csv"
    with_losses = [header] + [[*row[:-1], "3.5"] for row in table[1:]]
    csv_path.write_text("\n".join(",".join(r) for r in with_losses) + "\n")
    sweep_results = read_results(csv_path)
    assert "branch_of.step" in sweep_results.extra_keys
    assert not {"branch_of.run_id", "branch_of.run_dir"} & set(sweep_results.extra_keys)


@needs_train_gpt
def test_the_example_wsd_sweeps_run_end_to_end(tmp_path, monkeypatch):
    """configs/sweeps/wsd/stable.yaml, then cooldown.yaml (one floor LR, to keep it short) from the
    directory holding sweeps/wsd_stable: every branch completes from its source's step-12
    checkpoint with its source's depth and LR; results.csv names the source; a rerun of the sweep
    starts nothing (no new attempt) and writes the same results.csv."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    monkeypatch.chdir(tmp_path)
    specs = tmp_path / "configs" / "sweeps" / "wsd"
    specs.mkdir(parents=True)
    for name in ("stable.yaml", "cooldown.yaml"):
        shutil.copy(WSD / name, specs / name)
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
        assert row["branch_of.step"] == str(STEP) and row["status"] == "completed"
        assert int(row["step"]) == int(row["training.steps"]) and row["val_loss"]
        summary = json.loads(
            (tmp_path / "sweeps" / "wsd_cooldown" / "runs" / row["run_id"] / "summary.json").read_text()
        )
        assert summary["branch_of"]["step"] == STEP
        assert summary["branch_of"]["run_dir"] == str(
            tmp_path / "sweeps" / "wsd_stable" / "runs" / row["branch_of.run_id"]
        )
    before = (tmp_path / "sweeps" / "wsd_cooldown" / "results.csv").read_text()
    assert main(["sweep", *cooldown]) == 0
    assert (tmp_path / "sweeps" / "wsd_cooldown" / "results.csv").read_text() == before
    for run in branches.runs:
        assert len(attempts.read(tmp_path / "sweeps" / "wsd_cooldown" / "runs" / run.run_id).attempts) == 1

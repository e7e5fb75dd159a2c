"""Sweep specs: expansion, deterministic run IDs, validation errors that name the culprit."""

from __future__ import annotations

import re
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from launch.__main__ import main
from launch.commands import format_override, trainer_command
from launch.errors import LaunchError
from launch.run_ids import run_id
from launch.sweep_dir import read_plan, write_plan
from launch.sweep_spec import expand, load_spec
from runconfig.loader import parse_overrides
from tests.launch_fixtures.helpers import TINY_SPEC, TRAIN_GPT, derived_spec

ID_PATTERN = re.compile(r"L[24]-(sp|depth_mup)-lr2\^-(8|7|6|5)-s0-[0-9a-f]{8}")


def test_tiny_spec_expands_to_sixteen_distinct_deterministic_runs():
    plan = expand(TINY_SPEC, load_spec(TINY_SPEC))
    assert len(plan.runs) == 16
    ids = [r.run_id for r in plan.runs]
    assert len(set(ids)) == 16
    assert all(ID_PATTERN.fullmatch(i) for i in ids), ids
    assert plan.grid["optimizer.lr"] == [2.0**-8, 2.0**-7, 2.0**-6, 2.0**-5]
    assert {r.resolved["training.steps"] for r in plan.runs} == {40}  # same token budget at every depth
    assert {r.resolved["parametrization.base_num_layers"] for r in plan.runs} == {2}
    assert [r.run_id for r in expand(TINY_SPEC, load_spec(TINY_SPEC)).runs] == ids


def test_run_id_is_readable_prefix_plus_hash_of_all_overrides():
    point = {"model.num_layers": 8, "parametrization.preset": "depth_mup", "optimizer.lr": 2.0**-9, "run.seed": 0}
    rid = run_id(point, {"training.steps": 60})
    assert re.fullmatch(r"L8-depth_mup-lr2\^-9-s0-[0-9a-f]{8}", rid)
    assert run_id(point, {"training.steps": 60}) == rid
    assert run_id(point, {"training.steps": 61}) != rid  # a fixed override is part of the identity
    assert run_id({**point, "optimizer.lr": 0.003}, {}).startswith("L8-depth_mup-lr0.003-s0-")
    assert run_id({"model.num_attention_heads": 2}, {}).startswith("num_attention_heads2-")


@pytest.mark.parametrize(
    "value",
    [
        '/tmp/my run\'s "dir"',
        "a: b # not a comment",
        "yes",
        "null",
        "",
        "caf\u00e9",
        1e-05,
        2.0**-9,
        3,
        True,
        [0.5, 1.0],
    ],
)
def test_override_values_read_back_exactly(value):
    parsed = OmegaConf.to_container(parse_overrides([format_override("x.y", value)]))
    assert parsed == {"x": {"y": value}}


def _run_main(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"grid": {"model.num_layerz": [2, 4]}}, ["grid entry 'model.num_layerz'", "num_layerz"]),
        ({"grid": {"optimizer.lr": [0.001, -1.0]}}, ["grid entry 'optimizer.lr' value -1.0", "optimizer.lr"]),
        (
            {"grid": {"training.steps": [10, 20]}, "overrides": {}},
            ["grid entry 'training.steps' is not allowed", "allow_grid_keys"],
        ),
        ({"overrides": {"run.dir": "/x"}}, ["'run.dir' may not be set"]),
        ({"overrides": {"model.num_layers": 3}}, ["grid entry 'model.num_layers' is also a fixed override"]),
        ({"grid": {"model.num_layers": [2, 2]}}, ["lists the value 2 twice"]),
        ({"grid": {"parametrization.preset": ["ode", "completep"]}}, ["lists the value 'ode' twice"]),
        ({"grid": {"optimizer.lr": {"log2_range": [-6, -10, 1]}}}, ["log2_range needs start <= stop"]),
        ({"grid": {"optimizer.lr": {"linear": [1, 2]}}}, ["grid entry 'optimizer.lr': a mapping must be one of"]),
        ({"grid": {"model.num_layers": []}}, ["grid entry 'model.num_layers': has no values"]),
        ({"grid": {"model": [{"num_layers": 2}]}}, ["'model' is a section"]),
        ({"executor": {"max_parallel": 0}}, ["executor.max_parallel"]),
        ({"gird": {"model.num_layers": [2]}}, ["gird"]),
        ({"base_config": "missing.yaml"}, ["base_config 'missing.yaml' not found"]),
    ],
)
def test_bad_specs_exit_2_naming_file_and_entry(tmp_path, capsys, changes, expected):
    spec = derived_spec(tmp_path, **changes)
    code, err = _run_main(capsys, "sweep", str(spec), "--sweep-dir", str(tmp_path / "sw"), "--dry-run")
    assert code == 2
    assert str(spec) in err
    for text in expected:
        assert text in err
    assert not (tmp_path / "sw").exists()  # nothing written, nothing run


def test_bad_grid_point_is_named(tmp_path, capsys):
    # Each value alone is valid (the base has 4 layers and a device chosen at run time);
    # 3 layers on 2 pipeline stages is not.
    grid = {"parallel.pipeline_model_parallel_size": [1, 2], "model.num_layers": [2, 3]}
    overrides = {"training.steps": 40, "parametrization.base_num_layers": 2, "parallel.device": "auto"}
    spec = derived_spec(tmp_path, grid=grid, overrides=overrides, executor={"kind": "local", "gpus_per_run": 2})
    code, err = _run_main(capsys, "sweep", str(spec), "--sweep-dir", str(tmp_path / "sw"), "--dry-run")
    assert code == 2
    assert "grid point {parallel.pipeline_model_parallel_size=2, model.num_layers=3}" in err
    assert "pipeline_model_parallel_size" in err


def test_a_run_config_key_given_to_the_spec_says_where_it_goes(tmp_path, capsys):
    """`launch sweep SPEC training.steps=50` overrides the spec, which has no 'training' key: the
    error says the run-config key goes under the spec's fixed overrides, and that form works."""
    sweep_dir = str(tmp_path / "sw")
    code, err = _run_main(capsys, "sweep", str(TINY_SPEC), "training.steps=50", "--sweep-dir", sweep_dir, "--dry-run")
    assert code == 2
    assert err == (
        "error: sweep spec command-line overrides: key 'training': Key 'training' not in 'SweepSpec'; "
        "run-config keys go under the spec's overrides: write overrides.training.steps=50\n"
    )
    spec = load_spec(TINY_SPEC, ["overrides.training.steps=50"])
    assert spec.overrides["training"]["steps"] == 50


def test_a_grid_entry_overridden_on_the_command_line_replaces_the_files(tmp_path, capsys):
    """`launch sweep SPEC grid.model.num_layers=[2]` split the run-config key at its dots into a
    nested `grid: {model: {num_layers: [2]}}` beside the file's `model.num_layers` entry and
    failed: "grid entry 'model': a mapping must be one of [...], got keys ['num_layers']". The
    key after `grid.` is one grid entry's key, dots (and a linked entry's commas) included."""
    spec = load_spec(TINY_SPEC, ["grid.model.num_layers=[2]", "grid.run.seed=[0, 1]"])
    assert spec.grid["model.num_layers"] == [2] and spec.grid["run.seed"] == [0, 1]
    assert list(spec.grid) == ["model.num_layers", "parametrization.preset", "optimizer.lr", "run.seed"]
    plan = expand(TINY_SPEC, spec)
    assert len(plan.runs) == 1 * 2 * 4 * 2 and {r.point["model.num_layers"] for r in plan.runs} == {2}
    linked = load_spec(TINY_SPEC, ["grid.model.hidden_size,model.num_layers=[[64, 2], [128, 4]]"])
    assert linked.grid["model.hidden_size,model.num_layers"] == [[64, 2], [128, 4]]
    code = main(
        ["sweep", str(TINY_SPEC), "grid.model.num_layers=[2]", "--sweep-dir", str(tmp_path / "sw"), "--dry-run"]
    )
    assert code == 0 and "sweep tiny_cpu: 8 runs" in capsys.readouterr().out


def test_a_grid_entry_given_as_a_list_or_mapping_replaces_the_files_range(tmp_path, capsys):
    """The tiny spec's `optimizer.lr: {log2_range: [-8, -5, 1]}` overridden as docs/launch.md says
    (`grid.KEY=...` replaces that entry's values): a list crashed with OmegaConf's bare TypeError
    ("Cannot merge incompatible container types", a traceback), and `{values: [...]}` was merged
    beside the file's range and refused ("got keys ['log2_range', 'values']")."""
    assert load_spec(TINY_SPEC, ["grid.optimizer.lr=[0.004, 0.008]"]).grid["optimizer.lr"] == [0.004, 0.008]
    assert load_spec(TINY_SPEC, ["grid.optimizer.lr={values: [0.004]}"]).grid["optimizer.lr"] == {"values": [0.004]}
    spec = load_spec(TINY_SPEC, ["grid[optimizer.lr]={log2_range: [-7, -6, 1]}"])
    assert expand(TINY_SPEC, spec).grid["optimizer.lr"] == [2.0**-7, 2.0**-6]
    assert list(spec.grid) == ["model.num_layers", "parametrization.preset", "optimizer.lr", "run.seed"]
    code = main(["sweep", str(TINY_SPEC), "grid.optimizer.lr=[0.004]", "--sweep-dir", str(tmp_path / "s"), "--dry-run"])
    assert code == 0 and "sweep tiny_cpu: 4 runs" in capsys.readouterr().out
    # a list where the spec holds a mapping that is not a grid entry: exit 2 naming the key
    with pytest.raises(LaunchError, match=r"overrides: a list given where the config holds a mapping, got \[1\]"):
        load_spec(TINY_SPEC, ["overrides=[1]"])


def test_training_key_may_be_swept_when_allowed(tmp_path):
    spec = derived_spec(tmp_path, grid={"training.steps": [10, 20]}, allow_grid_keys=["training.steps"], overrides={})
    plan = expand(spec, load_spec(spec))
    assert [r.resolved["training.steps"] for r in plan.runs] == [10, 20]


def test_values_are_normalized_before_hashing(tmp_path):
    a = expand(*(lambda s: (s, load_spec(s)))(derived_spec(tmp_path, "a.yaml", grid={"optimizer.lr": ["1e-3"]})))
    b = expand(*(lambda s: (s, load_spec(s)))(derived_spec(tmp_path, "b.yaml", grid={"optimizer.lr": [0.001]})))
    assert a.grid["optimizer.lr"] == [0.001]
    assert [r.run_id for r in a.runs] == [r.run_id for r in b.runs]


def test_plan_round_trips_and_base_change_is_refused(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(yaml.safe_load((TINY_SPEC.parent.parent / "tiny_cpu.yaml").read_text())))
    spec = derived_spec(tmp_path, base_config=str(base))
    plan = expand(spec, load_spec(spec))
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, plan)
    again = read_plan(sweep_dir)
    assert again.to_dict() == plan.to_dict()
    assert (sweep_dir / "base_config.yaml").read_text() == base.read_text()

    base.write_text(base.read_text().replace("hidden_size: 64", "hidden_size: 32"))
    changed = expand(spec, load_spec(spec))
    with pytest.raises(LaunchError, match="differs from the snapshot"):
        write_plan(sweep_dir, changed)
    for executor in ("local", "slurm"):  # a dry run refuses what the real command would
        argv = ["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", executor, "--dry-run"]
        assert main(argv) == 2
        assert main([*argv, "--allow-base-change"]) == 0
    assert "hidden_size: 64" in (sweep_dir / "base_config.yaml").read_text()  # dry runs write nothing
    write_plan(sweep_dir, changed, allow_base_change=True)
    assert "hidden_size: 32" in (sweep_dir / "base_config.yaml").read_text()


def test_dry_run_lists_runs_and_writes_nothing(tmp_path, capsys):
    code = main(["sweep", str(TINY_SPEC), "--sweep-dir", str(tmp_path / "sw"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("\n  run  pending") == 16
    assert not (tmp_path / "sw").exists()


def test_trainer_command_precedence(monkeypatch):
    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", "python 'my trainer.py'")
    assert trainer_command(["a", "b"]) == ["a", "b"]  # --train-cmd / spec train_cmd first
    assert trainer_command("x 'y z'") == ["x", "y z"]
    assert trainer_command(None) == ["python", "my trainer.py"]  # then the environment
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD")
    assert trainer_command(None) == [sys.executable, str(TRAIN_GPT)]  # then train_gpt.py
    with pytest.raises(LaunchError, match="empty command"):
        trainer_command("   ")


def test_linked_grid_entry_fixed_gamma_shapes():
    """configs/sweeps/yaida_fixed_gamma.yaml: one axis of (width, depth) rows at fixed
    gamma = L / n^(1-s) (s=1/2: 64x2, 256x4, 1024x8) crossed with 4 LRs, not 3x3x4 shapes."""
    spec_path = TINY_SPEC.parent / "yaida_fixed_gamma.yaml"
    plan = expand(spec_path, load_spec(spec_path))
    shapes = sorted({(r.point["model.hidden_size"], r.point["model.num_layers"]) for r in plan.runs})
    assert shapes == [(64, 2), (256, 4), (1024, 8)]
    assert len(plan.runs) == 12
    assert plan.grid["model.num_layers"] == [2, 4, 8]
    gammas = {r.point["model.num_layers"] / r.point["model.hidden_size"] ** 0.5 for r in plan.runs}
    assert max(gammas) == pytest.approx(min(gammas))


def test_linked_grid_entry_rows_and_errors(tmp_path):
    spec = derived_spec(
        tmp_path, grid={"model.hidden_size,model.num_layers": [[64, 2], [128, 4]], "optimizer.lr": [1e-3]}
    )
    plan = expand(spec, load_spec(spec))
    assert [(r.point["model.hidden_size"], r.point["model.num_layers"]) for r in plan.runs] == [(64, 2), (128, 4)]
    bad = {
        "row 1 must list 2 values": {"model.hidden_size,model.num_layers": [[64, 2], [128]]},
        "appears in two grid entries": {"model.hidden_size,model.num_layers": [[64, 2]], "model.num_layers": [2]},
        "fixed_gamma.s: must be in": {
            "model.hidden_size,model.num_layers": {
                "fixed_gamma": {"s": 2, "base_hidden_size": 64, "base_num_layers": 2, "hidden_sizes": [64]}
            }
        },
        "fixed_gamma links exactly": {
            "model.hidden_size,optimizer.lr": {
                "fixed_gamma": {"s": 0.5, "base_hidden_size": 64, "base_num_layers": 2, "hidden_sizes": [64]}
            }
        },
    }
    for i, (message, grid) in enumerate(bad.items()):
        with pytest.raises(LaunchError, match=message):
            path = derived_spec(tmp_path, name=f"bad{i}.yaml", grid=grid)
            expand(path, load_spec(path))


def test_a_linked_entry_is_typed_as_one_setting_preset_custom_with_its_alpha_and_gamma(tmp_path):
    """``parametrization.preset,parametrization.alpha,parametrization.gamma: [[custom, 0.5, 0.5], ...]``:
    each key used to be typed alone against the base config, so custom was refused for lacking
    the alpha and gamma its own row gives (and alpha for a preset that fixes it); a linked row
    is one setting, loaded together."""
    key = "parametrization.preset,parametrization.alpha,parametrization.gamma"
    spec = derived_spec(tmp_path, grid={key: [["custom", 0.5, 0.5], ["custom", 1, 0]], "optimizer.lr": [1e-3]})
    plan = expand(spec, load_spec(spec))
    got = [tuple(r.point[k] for k in key.split(",")) for r in plan.runs]
    assert got == [("custom", 0.5, 0.5), ("custom", 1.0, 0.0)]  # typed as the schema stores them
    assert plan.grid["parametrization.alpha"] == [0.5, 1.0]
    bad = derived_spec(tmp_path, name="bad.yaml", grid={key: [["custom", 0.5, None]], "optimizer.lr": [1e-3]})
    with pytest.raises(LaunchError, match=r"grid entry '.*' value \['custom', 0.5, None\]: .*parametrization.gamma: "
                       "preset 'custom' needs an explicit finite gamma"):  # fmt: skip
        expand(bad, load_spec(bad))

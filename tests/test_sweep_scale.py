"""A large sweep's bookkeeping: the files ``status`` and re-expansion read for every run, at scale.

Run directories are written through the toolkit's own writers (``runconfig.dump_yaml``,
``rundir.files``, ``launch.attempts``), so these tests exercise the real readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launch.__main__ import main
from launch.errors import LaunchError
from launch.run_configs import load_run_config
from launch.sweep_dir import read_plan, run_dir, write_plan
from launch.sweep_spec import expand, load_spec
from runconfig import dump_yaml, load_config
from runconfig.schema import RunConfig
from tests.launch_fixtures.helpers import derived_spec, read_csv, use_fake_trainer

GRID = {"model.num_layers": [2, 4], "optimizer.lr": {"log2_range": [-10, -6, 1]}}


@pytest.fixture(autouse=True)
def fake_trainer(monkeypatch):
    use_fake_trainer(monkeypatch)


def _sweep(tmp_path: Path, grid: dict | None = None) -> tuple[Path, Path]:
    spec = derived_spec(
        tmp_path, grid=grid or GRID, overrides={"training.steps": 8, "parametrization.base_num_layers": 2}
    )
    return spec, tmp_path / "sw"


def _no_python_yaml_parser(monkeypatch) -> None:
    """Any YAML parsed by PyYAML's pure-Python reader fails (libyaml's parser does not use it)."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("YAML parsed with PyYAML's pure-Python parser")

    monkeypatch.setattr(yaml.reader.Reader, "__init__", refuse)


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_status_parses_sweep_and_run_configs_with_libyaml(tmp_path, monkeypatch, capsys):
    # The pure-Python parser took ~33 ms per config.yaml: `status` over 2000 runs spent 44 s of
    # its time there (benchmarks/status_scale.py); libyaml's parser gives the same values.
    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    write_plan(sweep_dir, plan)
    first = plan.runs[0]
    cfg = load_config(RunConfig, sweep_dir / "base_config.yaml", plan.train_invocation(sweep_dir, first).overrides)
    cfg.model.hidden_size = 128  # what the run's own config.yaml says wins over the expansion's value
    run_dir(sweep_dir, first.run_id).mkdir(parents=True)
    (run_dir(sweep_dir, first.run_id) / "config.yaml").write_text(dump_yaml(cfg))
    _no_python_yaml_parser(monkeypatch)
    assert main(["status", str(sweep_dir)]) == 75
    assert "pending    10" in capsys.readouterr().out
    rows = read_csv(sweep_dir / "results.csv")
    assert {r["model.hidden_size"] for r in rows if r["run_id"] == first.run_id} == {"128"}
    assert {r["model.hidden_size"] for r in rows if r["run_id"] != first.run_id} == {"64"}
    assert len(read_plan(sweep_dir).runs) == 10


def test_expansion_reads_and_merges_the_base_config_once(tmp_path, monkeypatch):
    # Re-expanding a 2000-point spec (every `launch sweep` rerun) took 227 s on the 2-core
    # machine, ~0.1 s per point, most of it building the schema's defaults and merging the base
    # file again for each point and each grid value; now they are built once (63 s).
    from omegaconf import OmegaConf

    built = []
    structured = OmegaConf.structured
    monkeypatch.setattr(OmegaConf, "structured", lambda *a, **k: built.append(a) or structured(*a, **k))
    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    assert len(plan.runs) == 10
    assert len(built) == 2  # the spec's schema (load_spec) and the run config's, once each
    # the same values and the same refusals as one load per point
    point = plan.runs[-1]
    args = [f"{k}={v}" for k, v in {**plan.fixed, **point.point}.items()]
    one = load_config(RunConfig, plan.base_config_source, args)
    assert one.model.num_layers == 4 and one.optimizer.lr == 2.0**-6 == point.resolved["optimizer.lr"]
    fixed = {"training.steps": 8, "parametrization.base_num_layers": 2, "parallel.pipeline_model_parallel_size": 2}
    bad = derived_spec(tmp_path, name="bad.yaml", grid={"model.num_layers": [2, 3]}, overrides=fixed)
    with pytest.raises(LaunchError) as refused:
        expand(bad, load_spec(bad))
    with pytest.raises(LaunchError) as alone:
        load_run_config(plan.base_config_source, [*(f"{k}={v}" for k, v in fixed.items()), "model.num_layers=3"])
    assert str(refused.value) == (
        f"sweep spec {bad}: grid entry 'model.num_layers' value 3: command-line overrides: "
        "parallel.pipeline_model_parallel_size: 2 does not divide model.num_layers=3"
    )
    assert str(refused.value).endswith(str(alone.value))

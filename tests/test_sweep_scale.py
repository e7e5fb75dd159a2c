"""A large sweep's bookkeeping: the files ``status`` and re-expansion read for every run, at scale.

Run directories are written through the toolkit's own writers (``runconfig.dump_yaml``,
``rundir.files``, ``launch.attempts``), so these tests exercise the real readers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launch.__main__ import main
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

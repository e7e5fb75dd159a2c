"""Named arms of preset custom in a study (``custom_presets``): CompleteP's comparison of the
depth exponent alpha as `python -m launch demo --study FILE`.

Each arm is its own family in results.csv (``parametrization.preset=custom`` with its
``parametrization.alpha`` / ``parametrization.gamma`` columns) and in ``eval transfer``; the
base depth is trained once for every arm. A planted study runs them end to end through the
real sweep, planner (its sequential phase included) and analysis, with a stand-in trainer.
"""

from __future__ import annotations

import json
import math
import re
import zlib

import numpy as np
import pytest
import yaml

from launch.errors import LaunchError
from study.spec import load_study, study_path
from tests.launch_fixtures.helpers import TINY_BASE
from tests.test_study_sequential import _drive

# planted optimum: log2 LR = -7 - slope * log2(L / L0), per arm
SLOPE = {"sp": 0.5, "a050": 0.0, "a100": -0.4}


def _planted(point, noise: float) -> dict:
    x_opt = -7.0 - SLOPE[point.preset] * math.log2(point.depth / 2)
    rng = np.random.default_rng(zlib.crc32(repr(point).encode()))
    end = 4.0 + 0.1 * (point.log2_lr - x_opt) ** 2 + noise * rng.standard_normal()
    mid = end + 0.4 + noise * rng.standard_normal()
    evals = [{"step": 15, "fraction": 0.5, "val_loss": mid}, {"step": 30, "fraction": 1.0, "val_loss": end}]
    return {"status": "completed", "final_val_loss": end, "evals": evals, "steps": 30, "wall_time_s": 1.0}


def _study_file(tmp_path, **changes):
    settings = yaml.safe_load(study_path("quick").read_text())
    settings.update(
        presets=["sp", "a050", "a100"],
        custom_presets={"a050": {"alpha": 0.5, "gamma": 0.5}, "a100": {"alpha": 1.0, "gamma": 0.0}},
        depths=[2, 4],
        base_lrs_log2=[-9.0, -8.0, -7.0, -6.0, -5.0],
        step_log2=1.0,
        window=3,
        max_widen=1,
        refine_log2=0.0,
        seeds=2,
        fit_window=1,
        bootstrap=100,
        diagnostics_interval=0,
    )
    settings.update(changes)
    path = tmp_path / "arms.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


def test_custom_arms_run_end_to_end_each_its_own_family(tmp_path, monkeypatch):
    """sp and two custom arms through the sweep, the planner's sequential phase and the
    report: results.csv records each arm's alpha and gamma, eval transfer analyses three
    families (each with the shared base), and the planted slopes come back per arm."""
    from launch.status import collect_states, write_results
    from study.analysis import analyse
    from study.summary import headline, render_markdown, study_status

    path = _study_file(tmp_path, goals={"deepest_opt_ci_width": 0.5}, budget_runs=60)
    s = load_study(str(path))
    monkeypatch.setattr("tests.test_study_sequential._planted", _planted)
    sweep, _ = _drive(tmp_path, monkeypatch, s, noise=0.02)
    status = study_status(sweep, s)
    results, stop, used, lines, _ = status
    assert {p.preset for p in results} == {"sp", "a050", "a100"}
    assert {p.preset for p in results if p.depth == 2} == {"sp"}  # the base depth: trained once, by the first arm
    assert used["runs_sequential"] > 0 and stop.reason in ("goals_met", "budget_spent")
    assert len(stop.checks) == 6  # 1 goal x 3 arms x mid, end: each arm a family of its own
    assert sweep.planner.next_points(results) == []

    write_results(sweep.sweep_dir, sweep.plan, collect_states(sweep.sweep_dir, sweep.plan))
    with open(sweep.sweep_dir / "results.csv") as f:
        header = f.readline().strip().split(",")
        rows = [dict(zip(header, line.strip().split(","))) for line in f]
    assert "parametrization.alpha" in header and "parametrization.gamma" in header
    recorded = {(r["parametrization.preset"], r["parametrization.alpha"], r["parametrization.gamma"]) for r in rows}
    assert recorded == {("sp", "", ""), ("custom", "0.5", "0.5"), ("custom", "1.0", "0.0")}

    report = analyse(sweep.sweep_dir, tmp_path / "report", s, goal_context=lines)
    transfer = json.loads((tmp_path / "report" / "transfer.json").read_text())
    families = {r["family"] for r in transfer["results"]}
    a050 = "custom (parametrization.alpha=0.5, parametrization.gamma=0.5)"
    a100 = "custom (parametrization.alpha=1.0, parametrization.gamma=0.0)"
    assert families == {"sp", a050, a100}
    # the numbers that stopped the study are the report's (the same call on the same runs)
    assert [(g["family"], g["achieved"]) for g in report["goals"]] == [
        (c["family"], c["achieved"]) for c in stop.checks
    ]
    slopes = {r["family"]: r["slope"]["value"] for r in transfer["results"] if r["fraction"] == 1.0}
    for label, arm in (("sp", "sp"), (a050, "a050"), (a100, "a100")):
        assert slopes[label] == pytest.approx(-SLOPE[arm], abs=0.25), (label, slopes)
    for r in transfer["results"]:  # every family has the shared base depth
        assert {d["depth"] for d in r["depths"] if d["optimum"]["log2_lr"] is not None} == {2, 4}
    # the loss gaps compare every family with the first (sorted: a050), arms as presets are compared
    assert {(g["reference"], g["family"]) for g in transfer["preset_gaps"]} == {(a050, "sp"), (a050, a100)}

    h = headline(report, sweep, s, status)
    assert set(h["presets"]) == {"sp", "a050", "a100"}
    md = render_markdown(h, s, 1.0)
    assert "| a100 |" in md and "a050 = parametrization.alpha=0.5, parametrization.gamma=0.5" in md


def test_a_custom_arm_resolves_to_exactly_the_table_of_its_fixed_preset():
    """alpha 1/2, gamma 1/2 is depth_mup and alpha 1, gamma 0 is ode (docs/parametrization.md,
    "Presets"): the run configs the study builds for those arms resolve to the same numbers,
    role by role and parameter by parameter (patches.table), the preset's name aside; the
    example study's a075 sits between them."""
    from launch.commands import format_override
    from launch.run_configs import load_run_config
    from patches.rules import ROLES
    from patches.table import build_table
    from runconfig.schema import resolve

    s = load_study("alpha_quick")
    assert s.custom_presets == {
        "a050": {"alpha": 0.5, "gamma": 0.5},
        "a075": {"alpha": 0.75, "gamma": 0.25},
        "a100": {"alpha": 1.0, "gamma": 0.0},
    }
    params = [(f"param_{role}", [8, 8], role) for role in ROLES]

    def table(values: dict, *extra: str) -> dict:
        args = [format_override(k, v) for k, v in values.items() if v is not None]
        cfg = load_run_config(TINY_BASE, [*args, *extra])
        return build_table(resolve(cfg), params)

    for arm, preset in (("a050", "depth_mup"), ("a100", "ode")):
        for shape in (
            ["model.num_layers=16", "parametrization.base_num_layers=2"],
            ["model.num_layers=8", "parametrization.base_num_layers=2", "model.hidden_size=128",
             "parametrization.base_hidden_size=64"],
            ["model.num_layers=8", "parametrization.base_num_layers=2", "optimizer.name=sgd",
             "parallel.use_distributed_optimizer=false"],
        ):  # fmt: skip
            mine = table(s.arm_values(arm), *shape)
            theirs = table({"parametrization.preset": preset}, *shape)
            assert (mine.pop("preset"), theirs.pop("preset")) == ("custom", preset)
            assert mine == theirs, (arm, shape)
    # hand-computed at L/L0 = 8: a075's branch multiplier 8^-0.75, its in-block Adam LR factor 8^-0.25
    t = table(s.arm_values("a075"), "model.num_layers=16", "parametrization.base_num_layers=2")
    assert t["branch_multiplier"] == pytest.approx(8**-0.75, rel=1e-12)
    assert t["roles"]["hidden_in"]["lr_factor"] == pytest.approx(8**-0.25, rel=1e-12)
    assert t["roles"]["embedding"]["lr_factor"] == 1.0


def test_custom_arms_are_checked_when_the_study_file_loads(tmp_path, capsys):
    """Every bad custom arm is refused naming the file and the key (exit 2 from the command),
    before anything is prepared or trained."""
    from launch.__main__ import main

    arms = {"a050": {"alpha": 0.5, "gamma": 0.5}, "a100": {"alpha": 1.0, "gamma": 0.0}}
    cases = [
        ({"presets": ["sp", "custom"]}, "presets: 'custom' needs its alpha and gamma: name each custom arm under "
         "custom_presets"),
        ({"presets": ["sp", "a050"]}, "custom_presets: ['a100'] not listed in presets ['sp', 'a050']"),
        ({"presets": ["sp", "a050", "a10"]}, "presets: unknown preset 'a10'; choose from"),
        ({"custom_presets": {**arms, "a050": {"alpha": 0.5}}}, "custom_presets.a050: missing ['gamma']"),
        ({"custom_presets": {**arms, "a050": {"alpha": 0.5, "gamma": 0.5, "width": "sp"}}},
         "custom_presets.a050: unknown key(s) ['width']"),
        ({"custom_presets": {**arms, "a050": {"alpha": math.nan, "gamma": 0.5}}},
         "custom_presets.a050: parametrization.alpha: preset 'custom' needs an explicit finite alpha"),
        ({"custom_presets": {**arms, "a050": {"alpha": "half", "gamma": 0.5}}},
         "custom_presets.a050.alpha: expected a number, got 'half'"),
        ({"custom_presets": {**arms, "a050": {"alpha": 1, "gamma": 0}}},
         "custom_presets.a100: the same {'alpha': 1.0, 'gamma': 0.0} as custom_presets.a050"),
        ({"custom_presets": ["a050", "a100"]}, "custom_presets: expected a mapping name -> {alpha: A, gamma: G}"),
        ({"presets": ["sp", "ode"], "custom_presets": {"ode": {"alpha": 1.0, "gamma": 0.0}}},
         "custom_presets.ode: 'ode' is a preset's name"),
        ({"variants": {"v": {"parametrization.gamma": 0.0}}},
         "variants.v: ['parametrization.gamma'] belong to a preset"),
    ]  # fmt: skip
    for i, (changes, message) in enumerate(cases):
        path = _study_file(tmp_path, **changes)
        path = path.rename(tmp_path / f"case{i}.yaml")
        with pytest.raises(LaunchError, match=re.escape(message)) as err:
            load_study(str(path))
        assert str(err.value).startswith(f"{path}: ")
        assert main(["demo", "--study", str(path), "--plan"]) == 2
        assert capsys.readouterr().err.startswith(f"error: {path}: ")


def test_plan_shows_the_arms(capsys):
    from launch.__main__ import main

    assert main(["demo", "--study", "alpha_quick", "--plan"]) == 0
    out = capsys.readouterr().out
    assert (
        "presets a050 (custom: alpha 0.5, gamma 0.5), a075 (custom: alpha 0.75, gamma 0.25), a100 (custom: alpha 1, gamma 0)"
        in out
    )
    assert re.search(r"^  a050: \d+ runs \(L=2: \d+, L=4: \d+\)$", out, re.M)
    assert re.search(r"^  a100: \d+ runs \(L=4: \d+\)$", out, re.M)
    assert "6 run configs (variant x preset x depth) checked" in out


def test_a_custom_arm_changed_on_the_same_out_is_refused(tmp_path, monkeypatch):
    """The study directory holds runs of arm a100 (alpha 1, gamma 0); the study file now gives
    a100 alpha 0.9. The analysis tells custom arms apart by their values, so the old runs would
    be analysed as the study's: the sweep is refused when opened, naming what no arm matches."""
    from study.sweep import AdaptiveSweep
    from tests.launch_fixtures.helpers import FAKE_TRAIN_CMD

    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    arms = {"a100": {"alpha": 1.0, "gamma": 0.0}, "a050": {"alpha": 0.5, "gamma": 0.5}}
    s = load_study(str(_study_file(tmp_path, presets=["a100", "a050"], custom_presets=arms)))
    spec = tmp_path / "demo_sweep.yaml"
    spec.write_text(yaml.safe_dump({"name": "arms", "base_config": str(TINY_BASE), "executor": {"kind": "local"}}))
    first = AdaptiveSweep(tmp_path / "sweep", spec, s, workers=1)
    assert len(first._advance()) == 5  # the base grid, as the first arm a100
    assert {p.preset for p in first.points} == {"a100"}
    renamed = {"alpha1": arms["a100"], "a050": arms["a050"]}  # a new name, the same values: the same runs
    again = load_study(str(_study_file(tmp_path, presets=["alpha1", "a050"], custom_presets=renamed)))
    assert {p.preset for p in AdaptiveSweep(tmp_path / "sweep", spec, again, workers=1).points} == {"alpha1"}
    changed = load_study(str(_study_file(tmp_path, custom_presets={**arms, "a100": {"alpha": 0.9, "gamma": 0.1}},
                                         presets=["a100", "a050"])))  # fmt: skip
    with pytest.raises(LaunchError, match=re.escape("a run of preset custom with {'parametrization.alpha': 1.0, "
                                                    "'parametrization.gamma': 0.0} matches no arm of study")):  # fmt: skip
        AdaptiveSweep(tmp_path / "sweep", spec, changed, workers=1)

"""Depth coordinate check, cheap enough for CI (depths 2..16, width 64, 3 AdamW steps at LR 0.003).

Every quantity of eval/coord_check_rules.py (stream, block contribution, (Delta W) x per block,
attention and MLP outputs, output and attention logits, at init and their change) is judged
against its preset's expected slope of log2 RMS against log2 depth. Correctly patched models
pass; a planted wrong rule in the model (not in the expectations) fails on the quantity it
moves. The measured slopes are printed with -s.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tests.conftest import TINY, tiny_config

DEPTHS = [2, 4, 8, 16]
SHAPE = ("parametrization.base_num_layers=2", "model.hidden_size=64", "model.seq_length=32", "optimizer.lr=0.003")


def check(preset, expect=None):
    from eval.coord_check import run_check

    cfg = tiny_config(f"parametrization.preset={preset}", *SHAPE, "optimizer.weight_decay=0.0")
    return run_check(cfg, DEPTHS, None, steps=3, progress=False, expect=expect)


@pytest.fixture(scope="module")
def results(megatron):
    return {preset: check(preset) for preset in ("sp", "depth_mup", "ode")}


@pytest.mark.parametrize("preset", ["sp", "depth_mup", "ode"])
def test_each_preset_scales_as_its_table_column_says(results, preset):
    r = results[preset]
    slopes = r["slopes"]["64"]
    print(preset, {k: round(v, 2) for k, v in slopes.items()})
    assert r["violations"] == []
    # At init the branch multiplier is all the block contribution's depth scaling: L^-1/2
    # (sp: Megatron's 1/sqrt(2L) output init; depth_mup: 1/sqrt(L)), L^-1 (ode: 1/L).
    assert slopes["block"] == pytest.approx({"sp": -0.5, "depth_mup": -0.5, "ode": -1.0}[preset], abs=0.05)
    # The branch outputs before the multiplier: Megatron's 1/sqrt(2L) init under sp only.
    assert slopes["mlp_out"] == pytest.approx({"sp": -0.5, "depth_mup": 0.0, "ode": 0.0}[preset], abs=0.05)
    # (Delta W) x per block: L^-(alpha+gamma): Theta(1/L) for both depth presets (CompleteP's claim).
    assert slopes["block_update"] == pytest.approx({"sp": 0.0, "depth_mup": -1.0, "ode": -1.0}[preset], abs=0.2)
    if preset == "sp":  # every block moves Theta(1): the stream change adds up over L blocks
        assert slopes["stream_change"] > 0.75
    else:
        assert abs(slopes["stream_change"]) < 0.15


def test_sp_judged_as_depth_mup_fails_on_the_stream_change(megatron):
    r = check("sp", expect="depth_mup")
    names = {line.split(":")[1].split()[0] for line in r["violations"]}
    assert {"stream_change", "block_update", "mlp_out"} <= names
    assert r["expected"]["depth"]["rule"] == "depth_mup (alpha 0.5, gamma 0.5)"


def _planted(monkeypatch, change):
    """The model (only: the expectations still come from the config) built with a wrong rule."""
    import training.model

    resolve = training.model.resolve
    monkeypatch.setattr(training.model, "resolve", lambda cfg: change(resolve(cfg)))


def test_a_branch_multiplier_of_1_over_L_for_depth_mup_fails_on_the_block(megatron, monkeypatch):
    # 1/L instead of 1/sqrt(L): the block contribution at init scales like L^-1, not L^-1/2.
    _planted(monkeypatch, lambda r: dataclasses.replace(r, branch_multiplier=r.branch_multiplier / r.depth_ratio**0.5))
    r = check("depth_mup")
    slopes = r["slopes"]["64"]
    assert slopes["block"] == pytest.approx(-1.0, abs=0.05)
    assert any(line.startswith("width 64: block (") for line in r["violations"]), r["violations"]
    assert not any(line.startswith("width 64: stream (") for line in r["violations"])  # the stream is fine at init


def test_hidden_lr_not_scaled_for_depth_mup_fails_on_the_update(megatron, monkeypatch):
    # Block LR eta instead of eta/sqrt(L) (TP-VI's branch_only): each block moves L^-1/2, not L^-1,
    # and their sum, the stream change, grows like sqrt(L).
    def unscaled(r):
        roles = {k: dataclasses.replace(v, lr_factor=v.lr_factor * math.sqrt(r.depth_ratio)) if k in
                 ("hidden_in", "hidden_out", "block_vector") else v for k, v in r.roles.items()}  # fmt: skip
        return dataclasses.replace(r, roles=roles)

    _planted(monkeypatch, unscaled)
    r = check("depth_mup")
    slopes = r["slopes"]["64"]
    print({k: round(v, 2) for k, v in slopes.items()})
    assert slopes["block_update"] == pytest.approx(-0.5, abs=0.15)
    failed = {line.split(":")[1].split()[0] for line in r["violations"]}
    assert {"block_update", "stream_change"} <= failed


def test_both_presets_agree_at_base_depth(results):
    # At L = L0 = 2 both presets are the same model: identical trajectories.
    sp, mup = results["sp"]["shapes"][0]["records"], results["depth_mup"]["shapes"][0]["records"]
    assert [r["layer_delta_rms"] for r in sp] == [r["layer_delta_rms"] for r in mup]
    assert [r["block_update_rms"] for r in sp] == [r["block_update_rms"] for r in mup]


def test_the_table_by_hand():
    from eval.coord_check_rules import breaks, describe, expectations

    assert [describe(c) for c in (-1.0, (-1.0, -0.5), (None, 0.0), (1.0, None), None)] == [
        "-1.00", "-1.00..-0.50", "<= +0.00", ">= +1.00", "not judged",
    ]  # fmt: skip
    assert breaks(-0.74, -1.0, 0.25) is True and breaks(-0.76, -1.0, 0.25) is False
    assert breaks(-0.3, (-1.0, -0.5), 0.25) is False and breaks(-0.2, (-1.0, -0.5), 0.25) is True
    assert breaks(-5.0, (None, 0.0), 0.25) is False and breaks(9.0, None, 0.25) is False
    ode = expectations(1.0, 0.0, "mup", "adam", "ode")
    assert ode["depth"]["cells"]["block_update"] == -1.0 and ode["depth"]["cells"]["block"] == -1.0
    assert ode["width"]["cells"]["stream_change"] == 0.0
    # Under SGD the alpha = 0 column (Adam's) is not used; the depth presets' columns are.
    sgd = expectations(0.0, 0.0, "sp", "sgd", "sp")
    assert sgd["depth"]["cells"] is None and "derived for Adam" in sgd["depth"]["why"]
    assert expectations(0.5, 0.5, "mup", "sgd", "depth_mup")["depth"]["cells"]["block_update"] == -1.0
    assert expectations(0.25, 0.25, "mup", "adam", "custom")["depth"]["cells"] is None


def test_an_unset_base_depth_is_the_smallest_depth():
    from eval.coord_check import prepare

    # Unset, every depth would be its own base (m_L = 1): depth_mup would be SP at every depth.
    cfg = prepare(tiny_config("parametrization.base_num_layers=null"), [4, 8, 16], None)
    assert cfg.parametrization.base_num_layers == 4


def test_the_cli_prints_the_table_and_writes_the_figure(megatron, tmp_path, capsys):
    from eval.__main__ import main

    args = ["coord-check", "--config", str(TINY), "parametrization.preset=ode", *SHAPE, "--depths", "2", "4",
            "--steps", "1", "--out", str(tmp_path)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "expected: ode (alpha 1, gamma 0), tolerance 0.25" in out
    assert [line.split()[0] for line in out.splitlines() if line.startswith("  block")] == [
        "block", "block_change", "block_update",
    ]  # fmt: skip
    assert "PASS: every slope is what ode (alpha 1, gamma 0) predicts" in out
    results = json.loads((tmp_path / "coord_check.json").read_text())
    assert results["expected"]["depth"]["cells"]["block"] == -1.0 and results["passed"] is True
    assert (tmp_path / "coord_check.png").stat().st_size > 10_000
    assert main([*args, "--expect", "nonsense"]) == 2
    assert "error: --expect: unknown preset 'nonsense'; choose from" in capsys.readouterr().err

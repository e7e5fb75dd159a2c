"""Depth coordinate check, cheap enough for CI (depths 2..64, width 64, 5 Adam steps).

Measured slopes of log2 RMS against log2 depth (this file's own numbers are printed with -s):
Megatron's 1/sqrt(2L) output init keeps SP flat at init, but the change of the last residual
stream after 5 Adam steps grows with depth under SP, and stays flat under depth-muP.
"""

from __future__ import annotations

import pytest

from tests.conftest import tiny_config

DEPTHS = [2, 4, 8, 16, 32, 64]


def check(preset):
    from eval.coord_check import run_check

    cfg = tiny_config(
        f"parametrization.preset={preset}",
        "parametrization.base_num_layers=2",
        "model.hidden_size=64",
        "model.seq_length=32",
        "optimizer.lr=0.01",
        "optimizer.weight_decay=0.0",
    )
    return run_check(cfg, DEPTHS, None, steps=5, progress=False)


@pytest.fixture(scope="module")
def results(megatron):
    return {preset: check(preset) for preset in ("sp", "depth_mup")}


def last(results, step, metric):
    return [s["records"][step][metric][-1] for s in results["shapes"]]


def test_depth_mup_stays_in_a_band(results):
    r = results["depth_mup"]
    slopes = r["slopes"]["64"]
    print("depth_mup slopes", slopes)
    assert abs(slopes["init_rms"]) < 0.1
    assert abs(slopes["final_rms"]) < 0.25
    assert abs(slopes["delta_rms"]) < 0.25
    deltas = last(r, -1, "layer_delta_rms")
    assert max(deltas) / min(deltas) < 2.5


def test_sp_update_grows_with_depth(results):
    r = results["sp"]
    slopes = r["slopes"]["64"]
    print("sp slopes", slopes)
    assert abs(slopes["init_rms"]) < 0.1  # flat at init (Megatron's 1/sqrt(2L) output init)
    assert slopes["delta_rms"] > 0.5  # but the update grows with depth
    deltas = last(r, -1, "layer_delta_rms")
    assert deltas[-1] / deltas[0] > 8


def test_both_presets_agree_at_base_depth(results):
    # At L = L0 = 2 both presets are the same model: identical trajectories.
    sp, mup = results["sp"]["shapes"][0]["records"], results["depth_mup"]["shapes"][0]["records"]
    assert [r["layer_delta_rms"] for r in sp] == [r["layer_delta_rms"] for r in mup]

"""Width coordinate check (microsoft/mup's coord check): slopes of log2 RMS against log2 width.

Before it, ``coord-check --widths 64 128 256 --depths 2`` fitted a "slope vs depth" through one
depth per width (polyfit on one point: -2.4 for every preset) and failed muP and SP alike;
nothing was compared across widths.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import TINY


def _record(step, stream, delta, logits, logits_delta, attn):
    return {
        "step": step,
        "layer_rms": [stream],
        "layer_delta_rms": [delta],
        "logits_rms": logits,
        "logits_delta_rms": logits_delta,
        "attn_logits_rms": [attn],
        "attn_logits_delta_rms": [0.0],
    }


def test_width_slopes_and_rules_by_hand():
    from eval.coord_check import violations, width_slopes

    # Widths 64 and 256 (log2 ratio 2): a value x4 is slope +1, /2 is -1/2, equal is 0.
    shapes = [
        {"num_layers": 2, "hidden_size": 256, "records": [_record(0, 1.0, 0.0, 0.1, 0.0, 0.05),
                                                          _record(1, 1.0, 0.4, 0.3, 0.8, 0.05)]},
        {"num_layers": 2, "hidden_size": 64, "records": [_record(0, 1.0, 0.0, 0.2, 0.0, 0.1),
                                                         _record(1, 1.0, 0.1, 0.3, 0.2, 0.1)]},
    ]  # fmt: skip
    slopes = width_slopes(shapes, 2)
    assert slopes == pytest.approx(
        {
            "init_rms": 0.0,
            "final_rms": 0.0,
            "delta_rms": 1.0,  # log2(0.4 / 0.1) / log2(256 / 64)
            "logits_init_rms": -0.5,  # log2(0.1 / 0.2) / 2: reported, not judged
            "logits_delta_rms": 1.0,  # log2(0.8 / 0.2) / 2
            "attn_logits_rms": -0.5,  # log2(0.05 / 0.1) / 2: shrinking is allowed
        }
    )
    results = {"slopes": {}, "width_slopes": {"2": slopes}}
    assert violations(results, 0.25) == [
        "depth 2: delta_rms slope vs width +1.000, |slope| > 0.25",
        "depth 2: logits_delta_rms slope vs width +1.000, slope > 0.25",
    ]
    # A shrinking stream change (features stop learning with width) fails too; shrinking logits do not.
    results["width_slopes"]["2"] = {**slopes, "delta_rms": -0.5, "logits_delta_rms": -0.5}
    assert violations(results, 0.25) == ["depth 2: delta_rms slope vs width -0.500, |slope| > 0.25"]


def test_one_depth_one_width_is_refused(tmp_path, capsys):
    from eval.__main__ import main

    code = main(["coord-check", "--config", str(TINY), "--depths", "2", "--steps", "1", "--out", str(tmp_path)])
    assert code == 2
    assert "a slope needs two points" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    assert main(["coord-check", "--config", str(TINY), "--widths", "64", "64", "--depths", "2"]) == 2
    assert "--widths: [64, 64] repeats a value" in capsys.readouterr().err
    # A width the 4 heads do not divide: exit 2 naming it (was a traceback from inside the run).
    assert main(["coord-check", "--config", str(TINY), "--widths", "64", "66", "--depths", "2"]) == 2
    assert "--depths 2 --widths 66: model.hidden_size: 66 is not divisible by model.num_attention_heads=4" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("preset, code", [("sp", 1), ("mup", 0)])
def test_width_check_fails_sp_and_passes_mup(megatron, tmp_path, capsys, preset, code):
    from eval.__main__ import main

    args = ["coord-check", "--config", str(TINY), f"parametrization.preset={preset}",
            "parametrization.base_hidden_size=null", "model.seq_length=16", "optimizer.lr=0.01",
            "--widths", "32", "64", "128", "--depths", "2", "--steps", "2", "--out", str(tmp_path)]  # fmt: skip
    assert main(args) == code
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "coord_check.json").read_text())
    assert results["slopes"] == {}  # one depth: no slope against depth is fitted
    assert results["base_hidden_size"] == 32  # unset in the config: the smallest width (m_d = 1, 2, 4)
    slopes = results["width_slopes"]["2"]
    print(preset, slopes)
    assert (tmp_path / "coord_check_width.png").is_file() and not (tmp_path / "coord_check.png").exists()
    if preset == "sp":  # Adam on SP: the update of every hidden matrix adds up over a fan-in that grows
        assert slopes["delta_rms"] > 0.75 and slopes["logits_delta_rms"] > 0.5
        assert "depth 2: delta_rms slope vs width" in out and "FAIL" in out
    else:
        assert abs(slopes["init_rms"]) < 0.1 and abs(slopes["delta_rms"]) < 0.25
        assert slopes["logits_init_rms"] == pytest.approx(-0.5, abs=0.05)  # sigma readout / m_d
        assert results["violations"] == [] and "PASS" in out

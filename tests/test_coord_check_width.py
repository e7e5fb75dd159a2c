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
    """A record with every quantity; the block and branch rows copy the stream's numbers."""
    return {
        "step": step,
        "layer_rms": [stream],
        "layer_delta_rms": [delta],
        "logits_rms": logits,
        "logits_delta_rms": logits_delta,
        "attn_logits_rms": [attn],
        "attn_logits_delta_rms": [attn],
        **{f"{k}_rms": [stream] for k in ("block", "attn_out", "mlp_out")},
        **{f"{k}_delta_rms": [delta] for k in ("block", "attn_out", "mlp_out")},
        "block_update_rms": [delta],
    }


def test_width_slopes_and_rules_by_hand():
    from eval.coord_check_rules import expectations, slopes, violations

    # Widths 64 and 256 (log2 ratio 2): a value x4 is slope +1, /2 is -1/2, equal is 0.
    shapes = [
        {"num_layers": 2, "hidden_size": 256, "records": [_record(0, 1.0, 0.0, 0.1, 0.0, 0.05),
                                                          _record(1, 1.0, 0.4, 0.3, 0.8, 0.05)]},
        {"num_layers": 2, "hidden_size": 64, "records": [_record(0, 1.0, 0.0, 0.2, 0.0, 0.1),
                                                         _record(1, 1.0, 0.1, 0.3, 0.2, 0.1)]},
    ]  # fmt: skip
    measured = slopes(shapes, "hidden_size", "num_layers", 2)
    assert measured == pytest.approx(
        {
            "stream": 0.0,
            "stream_final": 0.0,
            "stream_change": 1.0,  # log2(0.4 / 0.1) / log2(256 / 64)
            "block": 0.0,
            "block_change": 1.0,
            "block_update": 1.0,
            "attn_out": 0.0,
            "attn_out_change": 1.0,
            "mlp_out": 0.0,
            "mlp_out_change": 1.0,
            "logits": -0.5,  # log2(0.1 / 0.2) / 2: reported, not judged
            "logits_change": 1.0,  # log2(0.8 / 0.2) / 2
            "attn_logits": -0.5,  # log2(0.05 / 0.1) / 2: muP's 1/d scale at init
            "attn_logits_change": -0.5,  # shrinking is allowed
        }
    )
    results = {"slopes": {}, "width_slopes": {"2": measured}, "expected": expectations(0.0, 0.0, "mup", "adam", "mup")}
    rule = "expected +0.00 under mup (width mup)"
    assert violations(results, 0.25) == [
        f"depth 2: stream_change (change of the residual stream) slope vs width +1.00, {rule}",
        f"depth 2: block_change (change of each block's contribution) slope vs width +1.00, {rule}",
        f"depth 2: block_update ((Delta W) x: each block's own weight change on its input) slope vs width +1.00, {rule}",
        f"depth 2: attn_out_change (change of the attention output) slope vs width +1.00, {rule}",
        f"depth 2: mlp_out_change (change of the MLP output) slope vs width +1.00, {rule}",
        "depth 2: logits_change (change of the output logits) slope vs width +1.00, expected <= +0.00 under mup "
        "(width mup)",
    ]
    # A shrinking stream change (features stop learning with width) fails too; shrinking logits do not.
    results["width_slopes"]["2"] = {"stream_change": -0.5, "logits_change": -0.5}
    assert violations(results, 0.25) == [
        f"depth 2: stream_change (change of the residual stream) slope vs width -0.50, {rule}"
    ]


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


@pytest.mark.parametrize("preset, expect, code", [("mup", None, 0), ("sp", None, 0), ("sp", "mup", 1)])
def test_width_check_judges_each_rule_by_its_column(megatron, tmp_path, capsys, preset, expect, code):
    from eval.__main__ import main

    args = ["coord-check", "--config", str(TINY), f"parametrization.preset={preset}",
            "parametrization.base_hidden_size=null", "model.seq_length=16", "optimizer.lr=0.003",
            "--widths", "32", "64", "128", "--depths", "2", "--steps", "3", "--out", str(tmp_path)]  # fmt: skip
    assert main(args + (["--expect", expect] if expect else [])) == code
    out = capsys.readouterr().out
    results = json.loads((tmp_path / "coord_check.json").read_text())
    assert results["slopes"] == {}  # one depth: no slope against depth is fitted
    assert results["base_hidden_size"] == 32  # unset in the config: the smallest width (m_d = 1, 2, 4)
    slopes = results["width_slopes"]["2"]
    print(preset, {k: round(v, 2) for k, v in slopes.items()})
    assert (tmp_path / "coord_check_width.png").is_file() and not (tmp_path / "coord_check.png").exists()
    if preset == "sp":  # Adam on SP: the update of every hidden matrix adds up over a fan-in that grows
        assert slopes["stream_change"] > 0.75 and slopes["logits_change"] > 0.5
        assert slopes["block"] == pytest.approx(1.0, abs=0.1)  # two sigma-init matrices: sqrt(n) each
    else:
        assert abs(slopes["stream"]) < 0.1 and abs(slopes["stream_change"]) < 0.15
        assert abs(slopes["block_update"]) < 0.15 and abs(slopes["mlp_out_change"]) < 0.25
        assert slopes["logits"] == pytest.approx(-0.5, abs=0.05)  # sigma readout / m_d
    if code:
        assert "depth 2: stream_change (change of the residual stream) slope vs width" in out and "FAIL" in out
    else:
        assert results["violations"] == [] and "PASS" in out
    if preset == "sp" and not expect:
        assert "not stable: the stream change grows with width (>= +1.00) by design; --expect mup judges it" in out


def test_an_override_after_the_depths_says_where_overrides_go(capsys):
    from eval.__main__ import main

    # --depths takes a list, so an override after it was read as a depth: before, only
    # "invalid int value: 'model.seq_length=16'".
    with pytest.raises(SystemExit) as stop:
        main(["coord-check", "--config", str(TINY), "--depths", "2", "4", "model.seq_length=16"])
    assert stop.value.code == 2
    assert "argument --depths: 'model.seq_length=16' is a key=value override, read here as one more value" in (
        capsys.readouterr().err
    )

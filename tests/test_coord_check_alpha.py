"""Depth coordinate check of CompleteP's alpha family (branch multiplier L^-alpha, Adam block LR
L^-gamma) and of TP-VI's one-matrix block (model.block=linear1).

The expected depth slopes are one rule evaluated at (alpha, gamma) (eval/coord_check_rules.py
DEPTH_ROWS); REFERENCE below is the table of the four preset columns it replaced, which the rule
must give cell for cell. Custom arms are measured on the shapes of tests/test_coord_check.py
(depths 2..16, width 64, 3 AdamW steps at LR 0.003) and must pass; a planted wrong LR rule must
fail on the quantity it moves.
"""

from __future__ import annotations

import dataclasses

import pytest

from tests.conftest import tiny_config
from tests.test_coord_check import DEPTHS, SHAPE

# The literal table of the four (alpha, gamma) columns docs/eval.md derived by hand.
#                                    sp/mup (0, 0)  depth_mup (1/2, 1/2)  branch_only (1/2, 0)  ode (1, 0)
REFERENCE = {
    "stream":             (0.0,        0.0,          0.0,         0.0),
    "stream_final":       ((0.5, 1.0), 0.0,          0.5,         0.0),
    "stream_change":      ((0.5, 1.0), 0.0,          0.5,         0.0),
    "block":              (-0.5,       -0.5,         -0.5,        -1.0),
    "block_change":       (0.0,        (-1.0, -0.5), -0.5,        -1.0),
    "block_update":       (0.0,        -1.0,         -0.5,        -1.0),
    "attn_out":           (-0.5,       0.0,          0.0,         0.0),
    "attn_out_change":    (0.0,        (-0.5, 0.0),  0.0,         0.0),
    "mlp_out":            (-0.5,       0.0,          0.0,         0.0),
    "mlp_out_change":     (0.0,        (-0.5, 0.0),  0.0,         0.0),
    "logits":             (0.0,        0.0,          0.0,         0.0),
    "logits_change":      (0.0,        0.0,          0.0,         0.0),
    "attn_logits":        (0.0,        0.0,          0.0,         0.0),
    "attn_logits_change": (0.0,        (-0.5, 0.0),  0.0,         0.0),
}  # fmt: skip
COLUMNS = [(0.0, 0.0), (0.5, 0.5), (0.5, 0.0), (1.0, 0.0)]


@pytest.mark.parametrize("i", range(4))
def test_the_rule_gives_every_cell_of_the_preset_columns(i):
    from eval.coord_check_rules import QUANTITIES, depth_column

    column = depth_column(*COLUMNS[i])
    assert list(column) == list(QUANTITIES)
    assert column == {row: cells[i] for row, cells in REFERENCE.items()}


def test_the_rule_at_custom_alphas_by_hand():
    from eval.coord_check_rules import depth_column, depth_domain, expectations

    # alpha 3/4, gamma 1/4 (gamma = 1 - alpha): the block L^-3/4 at init, its own update
    # L^-(alpha+gamma) = L^-1, its change between that and the input's change through the
    # init L^-3/4; the outputs' own update L^-1/4 against their input part L^0.
    c = depth_column(0.75, 0.25)
    assert (c["block"], c["block_update"], c["block_change"]) == (-0.75, -1.0, (-1.0, -0.75))
    assert (c["mlp_out"], c["mlp_out_change"], c["attn_logits_change"]) == (0.0, (-0.25, 0.0), (-0.25, 0.0))
    assert c["stream_change"] == 0.0  # L updates of L^-1
    # alpha 3/4, gamma 0: L updates of L^-3/4 add up to L^1/4.
    c = depth_column(0.75, 0.0)
    assert (c["stream_change"], c["block_update"], c["block_change"], c["mlp_out_change"]) == (0.25, -0.75, -0.75, 0.0)
    assert depth_column(0.7, 0.3)["stream_change"] == 0.0  # 1 - 0.7 - 0.3 in floats is 5.6e-17
    # 0 < alpha < 1/2: L blocks of L^-alpha at init make the stream grow like L^(1/2 - alpha).
    assert depth_column(0.25, 0.25) is None
    assert depth_domain(0.25, 0.25) == "alpha=0.25: the rows are derived for alpha = 0 or 1/2 <= alpha <= 1"
    custom = expectations(0.75, 0.25, "mup", "adam", "custom")["depth"]
    assert custom["rule"] == "custom (alpha 0.75, gamma 0.25)" and custom["cells"] == depth_column(0.75, 0.25)
    assert "alpha=0.25" in expectations(0.25, 0.0, "mup", "adam", "custom")["depth"]["why"]


def check(*overrides):
    from eval.coord_check import run_check

    cfg = tiny_config(*overrides, *SHAPE, "optimizer.weight_decay=0.0")
    return run_check(cfg, DEPTHS, None, steps=3, progress=False)


def custom(alpha, gamma, *more):
    return check("parametrization.preset=custom", f"parametrization.alpha={alpha}", f"parametrization.gamma={gamma}",
                 *more)  # fmt: skip


@pytest.mark.parametrize(
    "alpha,gamma,block,block_update,stream_change",
    [(0.5, 0.5, -0.5, -1.0, 0.0), (0.75, 0.25, -0.75, -1.0, 0.0), (1.0, 0.0, -1.0, -1.0, 0.0),
     (0.75, 0.0, -0.75, -0.75, 0.25)],
)  # fmt: skip
def test_custom_alpha_arms_are_judged_and_pass(megatron, alpha, gamma, block, block_update, stream_change):
    r = custom(alpha, gamma)
    slopes = r["slopes"]["64"]
    print(alpha, gamma, {k: round(v, 2) for k, v in slopes.items()})
    assert r["expected"]["depth"]["cells"] is not None and r["violations"] == []
    assert slopes["block"] == pytest.approx(block, abs=0.05)  # measured -0.49, -0.75, -1.00, -0.75
    assert slopes["block_update"] == pytest.approx(block_update, abs=0.1)  # -0.96, -1.00, -1.01, -0.73
    assert slopes["stream_change"] == pytest.approx(stream_change, abs=0.1)  # +0.04, -0.03, -0.05, +0.22


def test_gamma_planted_as_1_minus_alpha_over_2_fails_on_the_update(megatron, monkeypatch):
    # The optimizer (only: the model and the expectations keep gamma = 1 - alpha = 1/4) scales
    # the block LR by L^-(1 - alpha/2) = L^-0.625: each block's own update moves L^-1.375.
    import training.model

    resolve = training.model.resolve
    hidden = ("hidden_in", "hidden_out", "block_vector")

    def planted(cfg):
        r = resolve(cfg)
        wrong = r.depth_ratio ** -(1 - r.alpha / 2 - r.gamma)
        roles = {k: dataclasses.replace(v, lr_factor=v.lr_factor * wrong) if k in hidden else v
                 for k, v in r.roles.items()}  # fmt: skip
        return dataclasses.replace(r, roles=roles)

    monkeypatch.setattr(training.model, "resolve", planted)
    r = custom(0.75, 0.25)
    slopes = r["slopes"]["64"]
    assert slopes["block_update"] == pytest.approx(-1.375, abs=0.1)  # measured -1.42
    failed = {line.split(":")[1].split()[0] for line in r["violations"]}
    print(r["violations"])
    assert "block_update" in failed, r["violations"]
    assert not failed & {"block", "mlp_out", "attn_out", "stream"}  # init is untouched


def test_linear1_is_judged_but_for_the_stream_rows(megatron, capsys):
    from eval.coord_check import table_lines

    # ode with the one-matrix block: the blocks outweigh the embedding in the stream at the base
    # depth, and their independent sum falls like L^(1/2 - alpha): measured -0.31 (the column's
    # 0 +- 0.25 would break); the other rows hold.
    r = check("parametrization.preset=ode", "model.block=linear1")
    slopes, expected = r["slopes"]["64"], r["expected"]["depth"]
    assert slopes["stream"] == pytest.approx(-0.31, abs=0.05)
    assert {k for k, v in expected["cells"].items() if v is None} == {"stream", "stream_final", "stream_change"}
    assert expected["why"].startswith("model.block=linear1: stream rows not judged")
    assert r["violations"] == []
    assert slopes["block"] == pytest.approx(-1.0, abs=0.05) and slopes["block_update"] == pytest.approx(-1.0, abs=0.15)
    header = table_lines(r)[0]
    assert "tolerance 0.25; model.block=linear1: stream rows not judged" in header

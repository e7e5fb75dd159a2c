"""The rule engine against numbers computed by hand from docs/parametrization.md."""

import math

import pytest

from patches.parametrization import Parametrization
from patches.rules import ModelShape, resolve

SHAPE = ModelShape(num_layers=8, hidden_size=256, num_attention_heads=4)  # d = 64
SIGMA = 0.02


def par(preset, **kw):
    return Parametrization(preset=preset, base_num_layers=2, base_hidden_size=128, base_head_dim=32, **kw)


def test_depth_mup_adam_by_hand():
    # m_L = 8/2 = 4, m_d = 256/128 = 2, d = 64, d0 = 32.
    r = resolve(par("depth_mup"), SHAPE, "adamw", init_method_std=SIGMA)
    assert (r.depth_ratio, r.width_ratio) == (4.0, 2.0)
    assert r.branch_multiplier == pytest.approx(0.5)  # 4^-1/2
    assert r.softmax_scale == pytest.approx(math.sqrt(32) / 64)
    assert r.output_multiplier == pytest.approx(0.5)  # 1/m_d
    lr = {role: rule.lr_factor for role, rule in r.roles.items()}
    assert lr == pytest.approx(
        {
            "embedding": 1.0,
            "output": 1.0,
            "final_norm": 1.0,
            "hidden_in": 0.5 * 0.5,  # 1/m_d * m_L^-1/2
            "hidden_out": 0.25,
            "block_vector": 0.5,  # m_L^-1/2
        }
    )
    std = {role: rule.init_std for role, rule in r.roles.items()}
    assert std["embedding"] == std["output"] == SIGMA
    assert std["hidden_in"] == pytest.approx(SIGMA / math.sqrt(2))
    # alpha > 0: branch-output init uses the BASE depth, sigma/sqrt(m_d)/sqrt(2*L0).
    assert std["hidden_out"] == pytest.approx(SIGMA / math.sqrt(2) / math.sqrt(4))
    assert std["final_norm"] is None and std["block_vector"] is None
    assert {role: rule.wd_factor for role, rule in r.roles.items()} == {
        "embedding": 1.0,
        "output": 1.0,
        "final_norm": 0.0,
        "hidden_in": 1.0,
        "hidden_out": 1.0,
        "block_vector": 0.0,
    }


def test_depth_mup_sgd_block_lr_is_constant():
    r = resolve(par("depth_mup"), SHAPE, "sgd")
    lr = {role: rule.lr_factor for role, rule in r.roles.items()}
    # SGD: embeddings/output/final norm m_d; hidden matrices m_L^(alpha-gamma) = 1; vectors m_d * 1.
    assert lr == pytest.approx(
        {"embedding": 2.0, "output": 2.0, "final_norm": 2.0, "hidden_in": 1.0, "hidden_out": 1.0, "block_vector": 2.0}
    )
    assert all(rule.eps is None for rule in r.roles.values())


@pytest.mark.parametrize(
    "preset,alpha,gamma,branch,hidden_lr_adam,hidden_lr_sgd",
    [
        ("sp", 0, 0, 1.0, 1.0, 1.0),
        ("mup", 0, 0, 1.0, 0.5, 1.0),
        ("depth_mup", 0.5, 0.5, 0.5, 0.25, 1.0),
        ("branch_only", 0.5, 0, 0.5, 0.5, 2.0),  # SGD: 4^(1/2 - 0)
        ("ode", 1, 0, 0.25, 0.5, 4.0),  # SGD: 4^(1 - 0)
        ("completep", 1, 0, 0.25, 0.5, 4.0),
    ],
)
def test_presets_table(preset, alpha, gamma, branch, hidden_lr_adam, hidden_lr_sgd):
    adam = resolve(par(preset), SHAPE, "adam")
    sgd = resolve(par(preset), SHAPE, "sgd")
    assert (adam.alpha, adam.gamma) == (alpha, gamma)
    assert adam.branch_multiplier == pytest.approx(branch)
    assert adam.roles["hidden_in"].lr_factor == pytest.approx(hidden_lr_adam)
    assert sgd.roles["hidden_out"].lr_factor == pytest.approx(hidden_lr_sgd)


def test_sp_width_keeps_megatron_init_and_no_width_scaling():
    r = resolve(par("sp"), SHAPE, "adamw", init_method_std=SIGMA)
    assert r.width == "sp" and r.output_multiplier == 1.0 and r.softmax_scale is None
    assert r.roles["hidden_in"].init_std == SIGMA
    # alpha = 0: Megatron's own sigma/sqrt(2L) with the model's L = 8.
    assert r.roles["hidden_out"].init_std == pytest.approx(SIGMA / math.sqrt(16))


def test_depth_preset_with_sp_width():
    r = resolve(par("depth_mup", width="sp"), SHAPE, "adamw", init_method_std=SIGMA)
    assert r.width_ratio == 2.0 and r.output_multiplier == 1.0 and r.softmax_scale is None
    assert r.roles["hidden_in"].lr_factor == pytest.approx(0.5)  # depth only: 4^-1/2
    assert r.roles["hidden_out"].init_std == pytest.approx(SIGMA / math.sqrt(4))  # sigma/sqrt(2 L0)


def test_custom_alpha_gamma_and_block_multiplier():
    r = resolve(par("custom", alpha=0.25, gamma=0.75, block_multiplier=2.0), SHAPE, "adamw")
    assert r.branch_multiplier == pytest.approx(2.0 * 4**-0.25)
    assert r.roles["block_vector"].lr_factor == pytest.approx(4**-0.75)
    assert resolve(par("custom", alpha=0.25, gamma=0.75), SHAPE, "sgd").roles["hidden_in"].lr_factor == pytest.approx(
        4**-0.5
    )


def test_epsilon_and_independent_weight_decay_options():
    r = resolve(par("depth_mup", scale_epsilon=True, independent_weight_decay=True), SHAPE, "adamw", adam_eps=1e-8)
    assert r.roles["hidden_in"].eps == pytest.approx(1e-8 * 0.25)
    assert r.roles["embedding"].eps == pytest.approx(1e-8)
    # lr * wd kept equal to eta * wd: wd factor = 1 / lr factor for decayed roles.
    assert r.roles["hidden_in"].wd_factor == pytest.approx(4.0)
    assert r.roles["block_vector"].wd_factor == 0.0


def test_base_shape_reduces_to_identity():
    for preset in ("sp", "mup", "depth_mup", "branch_only", "ode"):
        r = resolve(Parametrization(preset=preset, block_multiplier=1.0), SHAPE, "adamw")
        assert r.branch_multiplier == 1.0 and r.output_multiplier == 1.0 and r.softmax_scale is None
        assert all(rule.lr_factor == 1.0 for rule in r.roles.values())


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"preset": "nope"}, "parametrization.preset"),
        ({"preset": "custom", "alpha": 0.5}, "parametrization.gamma"),
        ({"preset": "depth_mup", "alpha": 0.5}, "parametrization.alpha"),
        ({"width": "wide"}, "parametrization.width"),
        ({"base_num_layers": 0}, "parametrization.base_num_layers"),
        ({"block_multiplier": -1.0}, "parametrization.block_multiplier"),
    ],
)
def test_invalid_parametrization_names_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Parametrization(**kwargs)


def test_base_head_dim_defaults_to_the_base_models():
    # Only base_hidden_size set (as in configs/*.yaml): the base model is this one at width n0
    # with the same 4 heads, so d0 = 64 / 4 = 16. Before, d0 defaulted to the model's own d
    # and muP's attention scale stayed SP's 1/sqrt(d) at every width.
    mup = Parametrization(preset="mup", base_hidden_size=64)
    r = resolve(mup, ModelShape(num_layers=2, hidden_size=256, num_attention_heads=4), "adamw")
    assert (r.base_head_dim, r.shape.kv_channels) == (16, 64)
    assert r.softmax_scale == pytest.approx(math.sqrt(16) / 64) == 0.0625  # sqrt(d0) / d
    assert r.output_multiplier == 0.25 and r.roles["hidden_in"].lr_factor == 0.25
    # At the base width d = d0: megatron's own 1/sqrt(d), bit-exact (None).
    base = resolve(mup, ModelShape(num_layers=2, hidden_size=64, num_attention_heads=4), "adamw")
    assert base.base_head_dim == 16 and base.softmax_scale is None and base.effective_softmax_scale == 0.25
    # model.kv_channels set: the base model has the same head dim (width grows by heads).
    fixed = resolve(mup, ModelShape(num_layers=2, hidden_size=256, num_attention_heads=16, head_dim=16), "adamw")
    assert fixed.base_head_dim == 16 and fixed.softmax_scale is None
    # An explicit base_head_dim still wins.
    explicit = Parametrization(preset="mup", base_hidden_size=64, base_head_dim=32)
    assert resolve(explicit, ModelShape(2, 256, 4), "adamw").softmax_scale == pytest.approx(math.sqrt(32) / 64)
    with pytest.raises(ValueError, match=r"parametrization.base_hidden_size: 66 is not divisible by "
                       r"model.num_attention_heads=4.*set parametrization.base_head_dim"):  # fmt: skip
        resolve(Parametrization(preset="mup", base_hidden_size=66), ModelShape(2, 256, 4), "adamw")
    # SP's softmax does not move with d0: no base head dim is needed, the model's own is recorded.
    sp = resolve(Parametrization(preset="sp", base_hidden_size=64), ModelShape(2, 96, 3), "adamw")
    assert (sp.base_head_dim, sp.softmax_scale, sp.width_ratio) == (32, None, 1.5)

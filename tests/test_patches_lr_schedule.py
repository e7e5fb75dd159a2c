"""Each group's LR through megatron's OptimizerParamScheduler equals the table, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import tiny_config

VOCAB = 128
ETA, RATIO, WARMUP, STEPS = 0.01, 0.1, 10, 110

# depth_mup with L = 8, L0 = 2 (m_L = 4) and n = 128, n0 = 64 (m_d = 2), by hand from the spec:
EXPECTED_FACTOR = {
    "adamw": {
        "embedding": 1.0,
        "output": 1.0,
        "final_norm": 1.0,
        "hidden_in": 0.5 * 0.5,
        "hidden_out": 0.5 * 0.5,
        "block_vector": 0.5,
    },
    "sgd": {
        "embedding": 2.0,
        "output": 2.0,
        "final_norm": 2.0,
        "hidden_in": 1.0,
        "hidden_out": 1.0,
        "block_vector": 2.0,
    },
}


def cosine_lr(peak: float, step: int) -> float:
    """Megatron's warmup + cosine: linear 0 -> peak over WARMUP, then cosine to RATIO * peak."""
    if step <= WARMUP:
        return peak * step / WARMUP
    ratio = (step - WARMUP) / (STEPS - WARMUP)
    low = RATIO * peak
    return low + 0.5 * (peak - low) * (1 + math.cos(math.pi * ratio))


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_group_lrs_follow_table_through_scheduler(megatron, optimizer):
    from patches.roles import role_of
    from training.model import build_model, resolve
    from training.optim import CpuOptimizer, build_scheduler

    cfg = tiny_config(
        "model.num_layers=8",
        "model.hidden_size=128",
        "model.num_attention_heads=4",
        f"model.vocab_size={VOCAB}",
        "parametrization.preset=depth_mup",
        "parametrization.base_num_layers=2",
        "parametrization.base_hidden_size=64",
        f"optimizer.name={optimizer}",
        f"optimizer.lr={ETA}",
        f"optimizer.min_lr_ratio={RATIO}",
        "optimizer.weight_decay=0.1",
        "scheduler.decay_style=cosine",
        f"scheduler.warmup_steps={WARMUP}",
        f"training.steps={STEPS}",
    )
    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    opt = CpuOptimizer(cfg, [model], resolve(cfg))
    sched = build_scheduler(cfg, opt)
    role_by_param = {id(p): role_of(n, p) for n, p in model.named_parameters()}
    # Roles with equal (LR factor, WD factor) share a group: Adam {emb, output}, {final_norm},
    # {hidden_in, hidden_out}, {block_vector}; SGD {emb, output}, {final_norm, block_vector}, {hidden}.
    assert len(opt.param_groups) == {"adamw": 4, "sgd": 3}[optimizer]
    expected = EXPECTED_FACTOR[optimizer]
    done = 0
    for step in (WARMUP, 60, STEPS):  # end of warmup, mid cosine decay, end of decay
        sched.step(step - done)
        done = step
        for group in opt.param_groups:
            roles = {role_by_param[id(p)] for p in group["params"]}
            assert roles, "empty group"
            for role in roles:
                want = cosine_lr(ETA * expected[role], step)
                assert group["lr"] == pytest.approx(want, rel=1e-12), (step, role)
                decayed = role not in ("final_norm", "block_vector")
                assert group["weight_decay"] == pytest.approx(0.1 if decayed else 0.0)
    # the groups are distinguishable by megatron's checkpoint key (wd_mult, lr_mult, ...)
    keys = [(g["wd_mult"], g["lr_mult"]) for g in opt.param_groups]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize("style", ["constant", "linear", "cosine", "wsd"])
def test_a_warmup_as_long_as_training_is_refused_for_every_style(style):
    # megatron's OptimizerParamScheduler asserts warmup < decay steps for every style: constant was let
    # through and crashed with an AssertionError (exit 1, status failed) before the first step
    from runconfig import ConfigError

    with pytest.raises(ConfigError, match=r"scheduler.warmup_steps: 40 must be < training.steps=40"):
        tiny_config(f"scheduler.decay_style={style}", "scheduler.wsd_decay_steps=1", "scheduler.warmup_steps=40")


def test_a_wsd_decay_that_would_start_inside_the_warmup_is_refused():
    from runconfig import ConfigError

    wsd = ("scheduler.decay_style=wsd", "training.steps=40", "scheduler.warmup_steps=5")
    with pytest.raises(ConfigError, match=r"scheduler.wsd_decay_steps: 36 must be <= training.steps=40 - "):
        tiny_config(*wsd, "scheduler.wsd_decay_steps=36")
    assert tiny_config(*wsd, "scheduler.wsd_decay_steps=35").scheduler.wsd_decay_steps == 35
    # the decay style set on the command line is where the missing length is blamed (was: the file)
    with pytest.raises(ConfigError, match=r"^command-line overrides: scheduler.wsd_decay_steps: required"):
        tiny_config("scheduler.decay_style=wsd")


def _scheduler(*overrides: str):
    from training.model import build_model, resolve
    from training.optim import CpuOptimizer, build_scheduler

    cfg = tiny_config("parametrization.preset=sp", "optimizer.lr=2e-3", "optimizer.min_lr_ratio=0.1", *overrides)
    return build_scheduler(cfg, CpuOptimizer(cfg, [build_model(cfg, 512)], resolve(cfg)))


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        # warmup 5 (0 -> 2e-3 over scheduler steps 0..5), then the style over steps 5..40 down to 2e-4
        ("constant", {0: 0.0, 3: 1.2e-3, 5: 2e-3, 39: 2e-3}),
        ("linear", {5: 2e-3, 12: 2e-3 - 1.8e-3 * 7 / 35, 40: 2e-4}),
        # wsd: the peak until 40 - 10 = 30, then linear to the floor over the last 10
        ("wsd", {5: 2e-3, 30: 2e-3, 35: 1.1e-3, 40: 2e-4}),
    ],
)
def test_constant_linear_and_wsd_by_hand(megatron, style, expected):
    sched = _scheduler(
        f"scheduler.decay_style={style}",
        "scheduler.warmup_steps=5",
        "scheduler.wsd_decay_steps=10",
        "training.steps=40",
    )
    for step, lr in expected.items():
        sched.num_steps = 0
        sched.step(step)
        assert sched.get_lr({}) == pytest.approx(lr, rel=1e-12, abs=1e-15), step


def test_a_constant_schedule_warms_up_until_the_last_step(megatron):
    sched = _scheduler("scheduler.decay_style=constant", "scheduler.warmup_steps=39", "training.steps=40")
    sched.step(13)
    assert sched.get_lr({}) == pytest.approx(2e-3 / 3, rel=1e-12)
    sched.step(26)
    assert sched.get_lr({}) == pytest.approx(2e-3, rel=1e-12)

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

"""The GPU backend's checkpoint-loading preparation, checked on CPU through megatron's own
``FP32Optimizer`` (built without its CUDA loss-scale tensor, which loading never reads;
``get_megatron_optimizer`` itself needs CUDA).

megatron-core 0.16.1 calls ``init_state_fn`` when it builds the sharded state dict to load
into, and that function is None for SGD; its distributed optimizer also reads each torch
Adam state's ``step`` before any step ran. ``prime_optimizer_state_for_loading`` must make
both loadable without changing what a first step computes.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import tiny_config


def _model_and_groups(cfg):
    from training.model import build_model
    from training.optim import build_param_groups

    torch.manual_seed(0)
    model = build_model(cfg, vocab_size=cfg.model.vocab_size)
    return model, build_param_groups(cfg, [model], None)


def _fp32_optimizer(inner: torch.optim.Optimizer, cfg):
    """megatron's FP32Optimizer as get_megatron_optimizer builds it for SGD (init_state_fn=None)."""
    from megatron.core.optimizer import FP32Optimizer, MegatronOptimizer

    from training.optim import megatron_optimizer_config

    opt = FP32Optimizer.__new__(FP32Optimizer)
    MegatronOptimizer.__init__(opt, inner, megatron_optimizer_config(cfg), None)
    opt.is_stub_optimizer = False
    return opt


def _step(model, optimizer, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 100, (2, 16), generator=g)
    position_ids = torch.arange(16).expand(2, 16)
    loss = model(tokens, position_ids, None, labels=tokens).mean()
    loss.backward()
    optimizer.step()


def test_sgd_optimizer_can_build_its_loading_state_dict(megatron):
    from training.backends import prime_optimizer_state_for_loading

    cfg = tiny_config("optimizer.name=sgd", "optimizer.sgd_momentum=0.9", "model.seq_length=16")
    model, groups = _model_and_groups(cfg)
    inner = torch.optim.SGD(groups, lr=cfg.optimizer.lr, momentum=0.9)
    opt = _fp32_optimizer(inner, cfg)
    with pytest.raises(TypeError):  # what megatron 0.16.1 does unprimed
        opt.sharded_state_dict(model.sharded_state_dict(), is_loading=True)

    prime_optimizer_state_for_loading(opt)
    sharded = opt.sharded_state_dict(model.sharded_state_dict(), is_loading=True)
    n_params = sum(len(g["params"]) for g in inner.param_groups)
    buffers = [s["momentum_buffer"] for s in inner.state.values()]
    assert len(buffers) == n_params and all(float(b.abs().sum()) == 0.0 for b in buffers)
    assert len(sharded["state"]) == n_params  # one sharded momentum buffer per parameter


def test_primed_adam_state_is_what_a_first_step_starts_from(megatron):
    from training.backends import prime_optimizer_state_for_loading

    cfg = tiny_config("model.seq_length=16")
    results = []
    for prime in (False, True):
        model, groups = _model_and_groups(cfg)
        inner = torch.optim.AdamW(groups, lr=1e-3)
        opt = _fp32_optimizer(inner, cfg)
        if prime:
            prime_optimizer_state_for_loading(opt)
            steps = {float(s["step"]) for s in inner.state.values()}
            assert steps == {0.0} and len(inner.state) == sum(len(g["params"]) for g in groups)
        _step(model, inner)
        results.append([p.detach().clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*results))

    # and a loaded state replaces the primed one
    model, groups = _model_and_groups(cfg)
    stepped = torch.optim.AdamW(groups, lr=1e-3)
    _step(model, stepped)
    fresh = torch.optim.AdamW(groups, lr=1e-3)
    prime_optimizer_state_for_loading(_fp32_optimizer(fresh, cfg))
    fresh.load_state_dict(stepped.state_dict())
    assert {float(s["step"]) for s in fresh.state.values()} == {1.0}


def test_distributed_optimizer_with_sgd_is_a_config_error():
    """Checked by runconfig.validate for the device the trainer resolved (the GPU backend
    no longer re-checks it); on CPU the distributed optimizer is never built, so it passes."""
    from runconfig.validate import validate

    cfg = tiny_config("optimizer.name=sgd", "parallel.use_distributed_optimizer=true")
    with pytest.raises(ValueError, match="parallel.use_distributed_optimizer"):
        validate(cfg, "cuda")
    validate(cfg, "cpu")


def test_dist_checkpoint_round_trip_records_its_layout(megatron, tmp_path, monkeypatch):
    """save/load_dist_checkpoint (the GPU backend's checkpoint) through megatron's optimizer
    on CPU: weights and Adam moments come back bit-equal, and the sharding format is stored
    in the checkpoint and read back on load instead of megatron 0.16.1's default
    ('fully_sharded_model_space', which 0.16.1's own validation rejects)."""
    from megatron.core import dist_checkpointing

    from training.backends import (
        DIST_CKPT_METADATA,
        load_dist_checkpoint,
        prime_optimizer_state_for_loading,
        save_dist_checkpoint,
    )

    # megatron's saver synchronizes CUDA unconditionally; stubbed for the CPU-only torch
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    cfg = tiny_config("model.seq_length=16")
    model, groups = _model_and_groups(cfg)
    inner = torch.optim.AdamW(groups, lr=1e-3)
    _step(model, inner)
    save_dist_checkpoint(model, _fp32_optimizer(inner, cfg), tmp_path / "dist")
    assert dist_checkpointing.load_content_metadata(str(tmp_path / "dist")) == DIST_CKPT_METADATA

    torch.manual_seed(123)  # a different init: everything must come from the checkpoint
    fresh_model, fresh_groups = _model_and_groups(cfg)
    with torch.no_grad():
        for p in fresh_model.parameters():
            p.add_(1.0)
    fresh_inner = torch.optim.AdamW(fresh_groups, lr=1e-3)
    fresh = _fp32_optimizer(fresh_inner, cfg)
    seen = []
    original = fresh.sharded_state_dict
    monkeypatch.setattr(fresh, "sharded_state_dict", lambda *a, **k: seen.append(k["metadata"]) or original(*a, **k))
    prime_optimizer_state_for_loading(fresh)
    load_dist_checkpoint(fresh_model, fresh, tmp_path / "dist")

    assert [{k: m[k] for k in DIST_CKPT_METADATA} for m in seen] == [DIST_CKPT_METADATA]
    for (name, a), b in zip(model.state_dict().items(), fresh_model.state_dict().values()):
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), name
    want = [inner.state[p] for g in inner.param_groups for p in g["params"]]
    got = [fresh_inner.state[p] for g in fresh_inner.param_groups for p in g["params"]]
    assert len(got) == len(want) > 0
    for w, g in zip(want, got):
        assert float(g["step"]) == float(w["step"]) == 1.0
        assert torch.equal(g["exp_avg"], w["exp_avg"]) and torch.equal(g["exp_avg_sq"], w["exp_avg_sq"])

"""training.diagnostics against planted answers: Adam's first step moves every entry by its
group's LR, SGD moves by lr * gradient, the probe's residual stream is the layers' outputs,
and a run logs the same losses with diagnostics on or off."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import tiny_config

VOCAB = 128


def _model_and_optimizer(*overrides: str):
    from training.model import build_model, resolve
    from training.optim import CpuOptimizer

    cfg = tiny_config(
        "model.num_layers=3", "model.hidden_size=64", "model.seq_length=16", f"model.vocab_size={VOCAB}",
        "parametrization.base_hidden_size=32", "parametrization.base_num_layers=2", "optimizer.clip_grad=0",
        "optimizer.weight_decay=0", *overrides,
    )  # fmt: skip
    torch.manual_seed(0)
    resolved = resolve(cfg)
    model = build_model(cfg, VOCAB, resolved=resolved)
    opt = CpuOptimizer(cfg, [model], resolved)
    for group in opt.param_groups:
        group["lr"] = group["max_lr"]
    return cfg, resolved, model, opt


def _batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (4, 17), generator=g)
    positions = torch.arange(16).unsqueeze(0).expand(4, 16)
    return tokens, positions


def _one_step(model, opt, diagnostics):
    tokens, positions = _batch()
    loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
    opt.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    diagnostics.before_step(1)
    opt.step()
    return diagnostics.after_step(1), grads


def test_adam_first_step_update_is_the_group_lr(megatron):
    """Bias-corrected Adam's first step is lr * g / (|g| + eps): every entry with a gradient
    moves by the group's LR, so the logged update RMS is eta * the role's LR factor (within 1%;
    the word embedding only on the rows the batch used: lr * sqrt(used rows / rows))."""
    from training.diagnostics import Diagnostics

    cfg, resolved, model, opt = _model_and_optimizer("optimizer.adam_eps=1e-12", "parametrization.preset=depth_mup")
    tokens, positions = _batch()
    rows, grads = _one_step(model, opt, Diagnostics(model, 1, {"tokens": tokens[:, :-1], "position_ids": positions}))
    params = [r for r in rows if "param" in r]
    assert len(params) == len(list(model.parameters()))
    eta = cfg.optimizer.lr
    whole = 0
    for row in params:
        lr = eta * resolved.roles[row["role"]].lr_factor
        g = grads[row["param"]].double()
        exact = lr * float((g / (g.abs() + 1e-12)).pow(2).mean().sqrt())  # Adam's first step, entry by entry
        assert row["update_rms"] == pytest.approx(exact, rel=0.01), row
        if bool((g.abs() > 1e-6).all()):  # every entry has a gradient: the update RMS is the LR itself
            assert row["update_rms"] == pytest.approx(lr, rel=0.01), row
            whole += 1
        if row["weight_rms"] > 0:
            assert row["update_ratio"] == pytest.approx(row["update_rms"] / row["weight_rms"], rel=1e-9)
        else:  # biases start at zero: no ratio
            assert row["update_ratio"] != row["update_ratio"]
    assert whole >= 20  # the matrices, norms and most biases (the key bias gets no gradient: softmax shift)
    word = next(r for r in params if r["param"] == "embedding.word_embeddings.weight")
    used, total = len(torch.unique(tokens[:, :-1])), model.embedding.word_embeddings.weight.shape[0]
    assert word["update_rms"] == pytest.approx(eta * (used / total) ** 0.5, rel=0.01)  # only the rows in the batch
    hidden = {r["role"]: r["update_rms"] for r in params if r["layer"] == 1}
    assert hidden["hidden_in"] == pytest.approx(eta * (32 / 64) * (3 / 2) ** -0.5, rel=0.01)  # 1/m_d * m_L^-1/2


def test_sgd_update_is_lr_times_gradient(megatron):
    from training.diagnostics import Diagnostics

    cfg, resolved, model, opt = _model_and_optimizer(
        "optimizer.name=sgd", "optimizer.sgd_momentum=0", "optimizer.lr=0.1", "parametrization.preset=depth_mup"
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows, grads = _one_step(model, opt, Diagnostics(model, 1, None))
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    by_name = dict(model.named_parameters())
    for row in rows:
        p0, g, lr = before[row["param"]], grads[row["param"]], lr_of[id(by_name[row["param"]])]
        # p - lr * g in the parameter's float32, as the optimizer computes it; minus p
        expected = float((p0.add(g, alpha=-lr) - p0).double().pow(2).mean().sqrt())
        assert row["update_rms"] == pytest.approx(expected, rel=1e-6), row["param"]  # float32 norm
        # and that is lr * RMS(g) up to float32 rounding of p (|p| ~ 1 for norm weights)
        assert row["update_rms"] == pytest.approx(lr * float(g.double().pow(2).mean().sqrt()), rel=1e-3)
    assert not any("kind" in r for r in rows)  # no probe: no activation rows


def test_update_is_read_from_the_fp32_main_params(megatron):
    """Under bf16, megatron's optimizers keep an fp32 ``main_param`` per parameter and copy it
    back rounded. A planted update of 1e-4 on unit-size weights is below bf16's resolution
    (2^-8): the bf16 copy does not move, and the row must report the fp32 update exactly."""
    from training.diagnostics import Diagnostics

    _cfg, _resolved, model, _opt = _model_and_optimizer()
    model.to(torch.bfloat16)
    for p in model.parameters():
        p.data.fill_(1.0)
        p.main_param = p.detach().float().clone()  # megatron's Float16Optimizer contract
    diagnostics = Diagnostics(model, 1, None)
    diagnostics.before_step(1)
    for p in model.parameters():
        p.main_param.add_(1e-4)
        p.data.copy_(p.main_param)  # the optimizer's copy back to bf16: 1.0001 rounds to 1.0
    assert all(bool((p == 1.0).all()) for p in model.parameters())
    rows = diagnostics.after_step(1)
    assert len(rows) == len(list(model.parameters()))
    for row in rows:
        assert row["weight_rms"] == pytest.approx(1.0, rel=1e-6)
        assert row["update_rms"] == pytest.approx(1e-4, rel=1e-3)  # float32 spacing near 1 is 1.2e-7


def test_activation_rows_are_the_residual_stream(megatron):
    """``residual`` rows equal the RMS of each layer's output on the probe, measured after the
    step (with the updated weights); the branch rows are there and non-zero."""
    from eval.coord_check import layer_outputs
    from training.diagnostics import Diagnostics

    _cfg, _resolved, model, opt = _model_and_optimizer()
    tokens, positions = _batch()
    rows, _ = _one_step(model, opt, Diagnostics(model, 1, {"tokens": tokens[:, :-1], "position_ids": positions}))
    model.eval()
    with torch.no_grad():
        outs = layer_outputs(model, tokens[:, :-1])
    residual = [r["rms"] for r in rows if r.get("kind") == "residual"]
    assert residual == pytest.approx([float(o.double().pow(2).mean().sqrt()) for o in outs], rel=1e-6)
    for kind in ("attention_branch", "mlp_branch"):
        values = [r["rms"] for r in rows if r.get("kind") == kind]
        assert len(values) == 3 and all(v > 0 for v in values)


def _train(tmp_path, name: str, *extra: str) -> tuple[list, object]:
    """A trainer process (in-process, its shutdown would end this session's megatron state)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    run_dir = tmp_path / name
    cmd = [sys.executable, "train_gpt.py", "--config", "configs/tiny_cpu.yaml", f"run.dir={run_dir}",
           "training.steps=6", "logging.interval=1", "eval.at=[1.0]", "logging.progress_bar=false", *extra]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"], run_dir


def test_training_is_bit_identical_with_diagnostics_and_rows_follow_the_contract(tmp_path):
    off, _ = _train(tmp_path, "off")
    on, run_dir = _train(tmp_path, "on", "logging.diagnostics_interval=2")
    assert on == off
    from rundir.files import read_diagnostics

    rows = read_diagnostics(run_dir)
    assert sorted({r["step"] for r in rows}) == [2, 4, 6]
    params = [r for r in rows if "param" in r]
    acts = [r for r in rows if "kind" in r]
    assert {"step", "layer", "role", "param", "weight_rms", "update_rms", "update_ratio"} <= set(params[0])
    assert {r["kind"] for r in acts} == {"residual", "attention_branch", "mlp_branch"}
    assert {r["layer"] for r in acts} == {0, 1, 2, 3}  # tiny_cpu: 4 layers, 0-based
    assert {r["role"] for r in params if r["layer"] is None} == {"embedding", "output", "final_norm"}
    per_step = len(rows) // 3
    assert all(sum(r["step"] == s for r in rows) == per_step for s in (2, 4, 6))


def test_truncate_diagnostics_keeps_rows_up_to_the_checkpoint(tmp_path):
    from rundir.files import DIAGNOSTICS_FILE, read_diagnostics, truncate_diagnostics

    lines = [{"step": s, "layer": 0, "kind": "residual", "rms": float("nan") if s == 4 else 1.0} for s in (2, 4, 6)]
    (tmp_path / DIAGNOSTICS_FILE).write_text("".join(json.dumps(r).replace("NaN", '"nan"') + "\n" for r in lines))
    truncate_diagnostics(tmp_path, 4)
    rows = read_diagnostics(tmp_path)
    assert [r["step"] for r in rows] == [2, 4] and rows[1]["rms"] != rows[1]["rms"]  # "nan" read back as nan
    truncate_diagnostics(tmp_path / "missing", 4)  # no file: nothing to do


def test_distributed_optimizer_shards_combine_over_data_parallel_ranks():
    """Two gloo ranks with uneven fp32 main-param shards, rank 0 holding none of some: the
    logged RMS equal the whole tensors' (tests/scripts/dp_shard_sums.py)."""
    import subprocess
    import sys

    from tests.conftest import REPO, env, free_port

    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "tests/scripts/dp_shard_sums.py"]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rows"] == got["params"] > 10
    assert got["max_rel_error"] < 1e-4  # float32: (w + u) - w rounds u by ~1e-7 * |w| / |u|

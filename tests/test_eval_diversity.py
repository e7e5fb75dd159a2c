"""``python -m eval diversity``: planted exponents for the fit, the real model at init, checkpoints, bad input.

Measured (width 64, seq 32, batch 4, seeds 0-4, at init): depth_mup kappa 0.493-0.508 at L=64 for
lambda 0.25 and 0.5; ode the same at init (independent random blocks are a random walk whatever
their size) but its D(eps=0.25) falls like L^-0.47..-0.52 between L=16 and 64, depth_mup's like
L^-0.02..+0.03. Tolerances below are several times those spreads.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest

from eval import diversity_fit as fit
from tests.conftest import REPO, TINY, tiny_config


# ----------------------------------------------------------------------------- the fit, planted answers
def test_layer_pairs_floor_dedup_and_bounds():
    # L=10, lambda=0.3: start layer 3; eps 0.05 -> offset 0 (dropped), 0.1 and 0.15 -> layer 4 (one pair),
    # 0.29 -> layer 5 (floor), 0.7 -> layer 10 (lambda+eps = 1 is allowed), 0.8 -> beyond the end (dropped)
    pairs = fit.layer_pairs(10, 0.3, [0.15, 0.05, 0.1, 0.29, 0.7, 0.8])
    assert [(p.layer_from, p.layer_to) for p in pairs] == [(3, 4), (3, 5), (3, 10)]
    assert [p.eps for p in pairs] == [0.1, 0.29, 0.7]  # the smallest nominal eps of a duplicate is kept
    assert [p.eps_effective for p in pairs] == pytest.approx([0.1, 0.2, 0.7])
    assert fit.layer_index(0.29, 100) == 29  # 0.29 * 100 = 28.999... in floating point


def test_fit_recovers_an_exact_power_law():
    eps = np.geomspace(0.01, 0.5, 9)
    line = fit.fit_loglog(eps, 3.0 * eps**0.37)
    assert line.slope == pytest.approx(0.37, abs=1e-12)
    assert line.kappa == pytest.approx(0.63, abs=1e-12)
    assert line.stderr < 1e-10
    assert fit.fit_loglog([0.1], [1.0]) is None  # one point: no line


def _brownian(num_layers: int, width: int, tokens: int, seed: int) -> np.ndarray:
    """h_0 = 0, h_l = h_{l-1} + N(0, 1/L) per coordinate: D(eps)^2 = eps exactly in expectation."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(0.0, 1.0 / math.sqrt(num_layers), (num_layers, tokens, width))
    return np.concatenate([np.zeros((1, tokens, width)), np.cumsum(steps, axis=0)])


def test_brownian_path_has_kappa_one_half():
    streams = _brownian(256, 256, 4, seed=0)
    rows = fit.diversity(streams, [0.25, 0.5], fit.default_eps(256, 12, 0.5))
    for row in rows:
        assert row["n_points"] >= 10
        assert row["kappa"] == pytest.approx(0.5, abs=0.05), row
    # the scale is right too: D(eps)^2 = eps
    for p in rows[1]["points"]:
        assert p["distance"] ** 2 == pytest.approx(p["eps_effective"], rel=0.1)


def test_smooth_path_has_kappa_zero():
    num_layers, width = 256, 512
    rng = np.random.default_rng(1)
    omega, phase = rng.uniform(0.5, 1.5, width), rng.uniform(0, 2 * np.pi, width)
    t = np.arange(num_layers + 1)[:, None] / num_layers
    streams = np.sin(omega * t + phase)[:, None, :]  # [L+1, 1 token, width]: h_l = f(l / L), f smooth
    rows = fit.diversity(streams, [0.25, 0.5], fit.default_eps(num_layers, 12, 0.5))
    for row in rows:
        assert row["kappa"] == pytest.approx(0.0, abs=0.05), row
    assert fit.mean_kappa(rows) == pytest.approx(0.0, abs=0.05)


def test_fractional_brownian_path_has_kappa_one_minus_hurst():
    """An intermediate answer: fBm with Hurst H has D(eps) ~ eps^H, so kappa = 1 - H = 0.25."""
    num_layers, width, hurst = 128, 512, 0.75
    t = np.arange(1, num_layers + 1) / num_layers
    cov = 0.5 * (t[:, None] ** (2 * hurst) + t[None, :] ** (2 * hurst) - np.abs(t[:, None] - t[None, :]) ** (2 * hurst))
    chol = np.linalg.cholesky(cov + 1e-12 * np.eye(num_layers))
    path = chol @ np.random.default_rng(2).normal(size=(num_layers, width))
    streams = np.concatenate([np.zeros((1, width)), path])[:, None, :]
    rows = fit.diversity(streams, [0.25, 0.5], fit.default_eps(num_layers, 12, 0.5))
    for row in rows:
        assert row["kappa"] == pytest.approx(0.25, abs=0.05), row


def test_depth_scaling_fit():
    depths = [16, 32, 64]
    out = fit.depth_scaling(depths, [2.0 * d**-0.5 for d in depths])
    assert out["slope"] == pytest.approx(-0.5, abs=1e-12)


# ----------------------------------------------------------------------------- the real model at init
@pytest.fixture(scope="module")
def at_init(megatron):
    from eval.diversity import Grid, analyse
    from eval.diversity_inputs import init_model, random_tokens, with_depth

    grid = Grid([0.25, 0.5], None, 12, 0.5, 0.25)
    tokens = random_tokens(512, 4, 32, seed=0)
    out = {}
    for preset in ("depth_mup", "ode"):
        cfg = tiny_config(f"parametrization.preset={preset}", "model.hidden_size=64", "model.seq_length=32")
        out[preset] = analyse((init_model(with_depth(cfg, d), seed=0) for d in (16, 64)), tokens, grid)
    return out


def test_depth_mup_at_init_is_brownian(at_init):
    deep = at_init["depth_mup"]["depths"][-1]
    assert deep["num_layers"] == 64
    print("depth_mup L=64 kappa", [r["kappa"] for r in deep["lambdas"]])
    for row in deep["lambdas"]:
        assert row["n_points"] >= 8
        assert row["kappa"] == pytest.approx(0.5, abs=0.05), row
    assert at_init["depth_mup"]["kappa"]["mean"] == pytest.approx(0.5, abs=0.05)


def test_depth_scaling_separates_depth_mup_from_ode_at_init(at_init):
    mup = [r["exponent"] for r in at_init["depth_mup"]["depth_scaling"]]
    ode = [r["exponent"] for r in at_init["ode"]["depth_scaling"]]
    print("D(eps_ref) depth exponents: depth_mup", mup, "ode", ode)
    assert all(abs(e) < 0.1 for e in mup)  # a depth limit with O(1) feature movement
    assert all(abs(e + 0.5) < 0.1 for e in ode)  # blocks of size 1/L: the random walk shrinks like L^-1/2
    for row in at_init["ode"]["depths"][-1]["lambdas"]:  # at init kappa alone cannot tell them apart
        assert row["kappa"] == pytest.approx(0.5, abs=0.05)


def test_residual_streams_are_block_inputs_and_outputs(megatron):
    import torch

    from eval.diversity import residual_streams
    from eval.diversity_inputs import init_model, random_tokens

    model = init_model(tiny_config("model.num_layers=3", "model.seq_length=16"), seed=0)
    tokens = random_tokens(512, 2, 16, seed=0)
    streams = residual_streams(model, tokens)
    assert len(streams) == 4 and all(s.shape == (16, 2, 64) for s in streams)
    with torch.no_grad():  # h_0 is the (multiplied) embedding, the input of block 1
        emb = model.embedding(input_ids=tokens, position_ids=torch.arange(16).expand(2, 16))
        assert torch.allclose(streams[0], emb)
        h3 = model.decoder.layers[2](hidden_states=streams[2], attention_mask=None)[0]
        assert torch.allclose(streams[3], h3, atol=1e-6)  # h_l is block l's output on h_{l-1}
    assert all(fit.rms_distance(a, b) > 0 for a, b in zip(streams, streams[1:]))


# ----------------------------------------------------------------------------- a real checkpoint
@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("diversity") / "run"
    cmd = [
        sys.executable,
        "train_gpt.py",
        "--config",
        str(TINY),
        f"run.dir={run_dir}",
        "training.steps=20",
        "logging.progress_bar=false",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def _cli(*argv: str) -> int:
    from eval.__main__ import main

    return main(["diversity", *argv])


def test_run_dir_checkpoint_json(trained_run, tmp_path):
    out = tmp_path / "out"
    assert _cli("--run-dir", str(trained_run), "--out", str(out), "--seq-length", "32") == 0
    result = json.loads((out / "diversity.json").read_text())
    assert result["source"]["kind"] == "checkpoint"
    assert result["source"]["step"] == 20 and result["source"]["format"] == "cpu"
    assert result["source"]["checkpoint"].endswith("step_00000020")
    assert result["preset"] == "depth_mup" and result["alpha"] == 0.5 and result["hidden_size"] == 64
    assert result["seq_length"] == 32 and result["batch_size"] == 4 and result["data"] == "random"
    assert result["lambdas"] == [0.25, 0.5] and result["depth_scaling"] is None
    (depth,) = result["depths"]
    assert depth["num_layers"] == 4 and len(depth["stream_rms"]) == 5
    for row in depth["lambdas"]:
        assert set(row) >= {"lambda", "layer_from", "points", "slope", "slope_stderr", "kappa", "n_points", "eps_ref"}
        assert row["n_points"] >= 2 and row["kappa"] == pytest.approx(1 - row["slope"])
        for p in row["points"]:
            assert set(p) == {"eps", "eps_effective", "layer_to", "distance"} and p["distance"] > 0
    assert result["kappa"]["num_layers"] == 4 and result["kappa"]["mean"] == pytest.approx(depth["kappa_mean"])
    assert result["files"] == ["diversity.json", "diversity.png", "diversity.pdf"]
    assert (out / "diversity.png").stat().st_size > 10_000 and (out / "diversity.pdf").is_file()


def test_checkpoint_weights_are_loaded(trained_run, megatron):
    import torch

    from eval.diversity_inputs import checkpoint_model, find_checkpoint, run_config

    ckpt = find_checkpoint(trained_run)
    model = checkpoint_model(run_config(trained_run / "config.yaml"), ckpt)
    saved = torch.load(ckpt.path / "model_tp0_pp0.pt", weights_only=False)["model"]
    for name, value in model.state_dict().items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, saved[name]), name


def test_run_dir_with_validation_data(trained_run, tmp_path):
    out = tmp_path / "valid"
    assert _cli("--run-dir", str(trained_run), "--data", "valid", "--no-figures", "--out", str(out)) == 0
    result = json.loads((out / "diversity.json").read_text())
    assert result["data"] == "valid" and result["seq_length"] == 64 and result["files"] == ["diversity.json"]


def test_dist_checkpoint_is_loaded(trained_run, tmp_path, megatron, monkeypatch):
    """A GPU-style dist/ checkpoint (bf16 weights + optimizer keys), written here on CPU, reads back."""
    import torch
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor

    from eval.diversity_inputs import checkpoint_model, find_checkpoint, run_config

    run = tmp_path / "gpu_run"
    step = run / "checkpoints" / "step_00000020"
    step.mkdir(parents=True)
    shutil.copy(trained_run / "config.yaml", run / "config.yaml")
    src = find_checkpoint(trained_run)
    common = json.loads((src.path / "common.json").read_text())
    (step / "common.json").write_text(json.dumps({**common, "layout": {"tp": 2, "pp": 1, "dp": 1}}))
    (run / "checkpoints" / "latest").write_text("step_00000020\n")
    cfg = run_config(trained_run / "config.yaml")
    model = checkpoint_model(cfg, src).to(torch.bfloat16)
    # megatron's saver synchronizes CUDA unconditionally; on a CPU-only torch those calls are stubbed here
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    extra = ShardedTensor.from_rank_offsets("optimizer.state.fake", torch.ones(3), replica_id=0)
    (step / "dist").mkdir()
    dist_checkpointing.save({"model": model.sharded_state_dict(), "optimizer": {"fake": extra}}, str(step / "dist"))
    monkeypatch.undo()

    ckpt = find_checkpoint(run)
    assert ckpt.format == "dist" and ckpt.step == 20
    loaded = checkpoint_model(run_config(run / "config.yaml"), ckpt)
    for name, value in loaded.state_dict().items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            assert value.dtype == torch.float32
            assert torch.equal(value, model.state_dict()[name].float()), name
    assert _cli("--run-dir", str(run), "--no-figures", "--out", str(tmp_path / "out")) == 0
    result = json.loads((tmp_path / "out" / "diversity.json").read_text())
    assert result["source"]["format"] == "dist" and result["kappa"]["mean"] is not None


# ----------------------------------------------------------------------------- bad input
def _error(capsys, *argv: str) -> str:
    assert _cli(*argv) == 2
    return capsys.readouterr().err


def test_missing_run_dir(capsys, tmp_path):
    err = _error(capsys, "--run-dir", str(tmp_path / "nope"))
    assert "--run-dir" in err and str(tmp_path / "nope") in err


def test_run_dir_without_checkpoint(capsys, tmp_path):
    shutil.copy(TINY, tmp_path / "config.yaml")
    err = _error(capsys, "--run-dir", str(tmp_path))
    assert "no checkpoint" in err and str(tmp_path / "checkpoints") in err


def test_cpu_checkpoint_with_tensor_parallel_layout_is_refused(capsys, tmp_path):
    step = tmp_path / "checkpoints" / "step_00000005"
    step.mkdir(parents=True)
    (step / "common.json").write_text(json.dumps({"step": 5, "layout": {"tp": 2, "pp": 1, "dp": 1}}))
    (tmp_path / "checkpoints" / "latest").write_text("step_00000005\n")
    err = _error(capsys, "--run-dir", str(tmp_path))
    assert "tp=2" in err and str(step) in err


@pytest.mark.parametrize("lam", ["0", "1", "1.5", "-0.2"])
def test_lambda_outside_open_unit_interval(capsys, lam):
    err = _error(capsys, "--config", str(TINY), "--lambdas", "0.5", lam)
    assert "--lambdas" in err and "outside (0, 1)" in err


def test_other_bad_options(capsys, tmp_path):
    assert "config file not found" in _error(capsys, "--config", str(tmp_path / "missing.yaml"))
    assert "--eps" in _error(capsys, "--config", str(TINY), "--eps", "0.1", "2")
    assert "--seq-length" in _error(capsys, "--config", str(TINY), "--seq-length", "65", "--depths", "2")
    assert "--data valid" in _error(capsys, "--config", str(TINY), "--data", "valid")
    assert "--depths" in _error(capsys, "--run-dir", str(tmp_path), "--depths", "4")
    assert "parametrization.preset" in _error(capsys, "--config", str(TINY), "parametrization.preset=nope")
    # a single block has one layer offset per lambda: nothing to fit
    assert "no lambda has two" in _error(capsys, "--config", str(TINY), "--depths", "1")

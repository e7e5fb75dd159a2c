"""Yaida's meta-principled family (``parametrization.width=yaida``, ``yaida_s``): the table
against the paper's equations (31)-(36) by hand, s=1 against the toolkit's muP for SGD on a
trained model, the base shape against unpatched megatron, refusals, the fixed-gamma sweep
helper and the emergent-scale check of equation (46) through coord-check."""

from __future__ import annotations

import math

import pytest
import torch

from patches import ModelShape, Parametrization
from patches.presets import WIDTH_RULE_NAMES
from patches.rules import (
    BLOCK_VECTOR,
    EMBEDDING,
    FINAL_NORM,
    HIDDEN_IN,
    HIDDEN_OUT,
    OUTPUT,
    WIDTH_RULES,
    depth_at_fixed_scale,
    emergent_scale,
    resolve,
)
from tests.conftest import TINY, tiny_config

SIGMA = 0.02
N0, L0, D0, HEADS = 64, 2, 16, 4


def _resolved(s: float, n: int, L: int = L0):
    par = Parametrization(
        preset="sp", width="yaida", yaida_s=s, base_hidden_size=N0, base_num_layers=L0, base_head_dim=D0
    )
    return resolve(par, ModelShape(L, n, HEADS), optimizer="sgd", init_method_std=SIGMA)


@pytest.mark.parametrize("s", [0.0, 0.25, 0.5, 1.0])
def test_table_is_the_papers_equations(s):
    """Ratios to the base width m = n/n0, with the base shape equal to SP (C_W, lambda, eta_0
    chosen so): hidden init var C_W/n -> std sigma m^-1/2; output var C_W/n^(1+s) -> sigma
    m^-(1+s)/2; effective LR eta*lambda: hidden lambda_W/n * n^s -> m^(s-1); output
    lambda_W/n^(1+s) * n^s -> m^-1; biases, norms lambda_b * n^s -> m^s; the embedding's fan-in
    (the vocabulary) does not grow -> init constant, LR m^s."""
    m = 4.0
    n = int(N0 * m)
    r = _resolved(s, n)
    L = L0
    assert r.roles[HIDDEN_IN].init_std == pytest.approx(SIGMA * m**-0.5, rel=1e-12)
    assert r.roles[HIDDEN_OUT].init_std == pytest.approx(SIGMA * m**-0.5 / math.sqrt(2 * L), rel=1e-12)
    assert r.roles[OUTPUT].init_std == pytest.approx(SIGMA * m ** (-(1 + s) / 2), rel=1e-12)
    assert r.roles[EMBEDDING].init_std == SIGMA
    for role in (HIDDEN_IN, HIDDEN_OUT):
        assert r.roles[role].lr_factor == pytest.approx(m ** (s - 1), rel=1e-12)
    assert r.roles[OUTPUT].lr_factor == pytest.approx(1 / m, rel=1e-12)
    for role in (EMBEDDING, FINAL_NORM, BLOCK_VECTOR):
        assert r.roles[role].lr_factor == pytest.approx(m**s, rel=1e-12)
    assert r.output_multiplier == 1.0 and r.branch_multiplier == 1.0
    d = n // HEADS
    assert r.effective_softmax_scale == pytest.approx((d / D0) ** (-s / 2) / math.sqrt(d), rel=1e-12)
    assert r.emergent_scale == {"s": s, "gamma": pytest.approx(L / n ** (1 - s)), "L_over_n": L / n}


def test_endpoints_neural_tangent_and_mup():
    """s=0 is neural-tangent scaling (every matrix LR 1/n, vectors and embedding constant, no
    muP attention); s=1 has muP's SGD LRs on every role but the output matrix, whose
    init/LR pair is muP's logit multiplier moved into the weight (checked on training below)."""
    m = 8.0
    nt, top = _resolved(0.0, int(N0 * m)), _resolved(1.0, int(N0 * m))
    assert [nt.roles[r].lr_factor for r in (HIDDEN_IN, HIDDEN_OUT, OUTPUT)] == [1 / m] * 3
    assert [nt.roles[r].lr_factor for r in (EMBEDDING, FINAL_NORM, BLOCK_VECTOR)] == [1.0] * 3
    assert nt.softmax_scale is None  # 1/sqrt(d): megatron's own
    mup = resolve(
        Parametrization(preset="sp", width="mup", base_hidden_size=N0, base_num_layers=L0, base_head_dim=D0),
        ModelShape(L0, int(N0 * m), HEADS),
        optimizer="sgd",
    )
    for role in (EMBEDDING, FINAL_NORM, HIDDEN_IN, HIDDEN_OUT, BLOCK_VECTOR):
        assert top.roles[role].lr_factor == mup.roles[role].lr_factor
        assert top.roles[role].init_std == mup.roles[role].init_std
    assert top.softmax_scale == mup.softmax_scale
    c = mup.output_multiplier  # W' = c W: init c*sigma, SGD LR c^2 * (muP's LR)
    assert top.roles[OUTPUT].init_std == pytest.approx(c * mup.roles[OUTPUT].init_std, rel=1e-12)
    assert top.roles[OUTPUT].lr_factor == pytest.approx(c**2 * mup.roles[OUTPUT].lr_factor, rel=1e-12)


def test_s1_trains_like_mup_for_sgd(megatron):
    """Same seed, width 4x base, 4 SGD steps without clipping: yaida s=1 and the toolkit's muP
    give the same losses to float32 rounding (the output layer is parametrized differently)."""
    from training.model import build_model
    from training.model import resolve as resolve_cfg
    from training.optim import CpuOptimizer

    def losses(width: str, extra: tuple[str, ...]) -> list[float]:
        cfg = tiny_config(
            "model.num_layers=2", "model.hidden_size=256", "model.seq_length=16", "model.vocab_size=128",
            "parametrization.preset=sp", f"parametrization.width={width}", *extra,
            f"parametrization.base_hidden_size={N0}", f"parametrization.base_head_dim={D0}",
            "parametrization.base_num_layers=2", "optimizer.name=sgd", "optimizer.lr=0.05", "optimizer.clip_grad=0",
        )  # fmt: skip
        torch.manual_seed(7)
        resolved = resolve_cfg(cfg)
        model = build_model(cfg, 128, resolved=resolved)
        opt = CpuOptimizer(cfg, [model], resolved)
        for group in opt.param_groups:
            group["lr"] = group["max_lr"]
        g = torch.Generator().manual_seed(3)
        tokens = torch.randint(0, 128, (4, 17), generator=g)
        positions = torch.arange(16).unsqueeze(0).expand(4, 16)
        out = []
        for _ in range(4):
            loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            out.append(loss.item())
        return out

    yaida, mup = losses("yaida", ("parametrization.yaida_s=1",)), losses("mup", ())
    assert yaida[0] == pytest.approx(mup[0], rel=1e-6)
    assert yaida == pytest.approx(mup, rel=1e-5)
    assert mup[-1] < mup[0] - 0.05  # it trained: the comparison is not between two frozen models


@pytest.mark.parametrize("s", [0.0, 0.5, 1.0])
def test_base_shape_equals_unpatched_megatron(megatron, s):
    from training.model import build_model

    cfg = tiny_config(
        "model.num_layers=2", "model.hidden_size=64", "model.seq_length=16", "model.vocab_size=128",
        "parametrization.preset=sp", "parametrization.width=yaida", f"parametrization.yaida_s={s}",
        "parametrization.base_hidden_size=64", "parametrization.base_num_layers=2", "optimizer.name=sgd",
    )  # fmt: skip
    torch.manual_seed(5)
    ref = build_model(cfg, 128, patched=False)
    torch.manual_seed(5)
    pat = build_model(cfg, 128, patched=True)
    for (name, a), (_, b) in zip(ref.named_parameters(), pat.named_parameters()):
        assert torch.equal(a, b), name


def test_refusals_name_the_key():
    with pytest.raises(ValueError, match="parametrization.width=yaida: .*Adam"):
        tiny_config("parametrization.width=yaida", "parametrization.yaida_s=0.5")  # tiny_cpu uses adamw
    with pytest.raises(ValueError, match=r"parametrization.yaida_s: parametrization.width=yaida needs s in \[0, 1\]"):
        Parametrization(width="yaida", yaida_s=1.5)
    with pytest.raises(ValueError, match=r"parametrization.yaida_s: parametrization.width=yaida needs s in \[0, 1\]"):
        Parametrization(width="yaida")
    with pytest.raises(ValueError, match="parametrization.yaida_s: applies to width 'yaida' only"):
        Parametrization(width="mup", yaida_s=0.5)


def test_a_missing_s_is_blamed_on_the_override_that_set_width_yaida():
    """The file sets no width: the override that set width=yaida without s is at fault (was: the
    message named only parametrization.yaida_s, so the loader blamed the file for it)."""
    with pytest.raises(ValueError) as refused:
        tiny_config("parametrization.width=yaida", "optimizer.name=sgd")
    assert str(refused.value).startswith("command-line overrides: parametrization.yaida_s: parametrization.width=yaida")
    assert "tiny_cpu.yaml" not in str(refused.value)
    assert set(WIDTH_RULES) == set(WIDTH_RULE_NAMES)


def test_fixed_gamma_depths():
    """L = L0 (n/n0)^(1-s), rounded: s=0 keeps L/n, s=1 keeps L, s=1/2 doubles L per 4x width."""
    assert [depth_at_fixed_scale(n, 0.0, 64, 2) for n in (64, 128, 256)] == [2, 4, 8]
    assert [depth_at_fixed_scale(n, 0.5, 64, 2) for n in (64, 256, 1024)] == [2, 4, 8]
    assert [depth_at_fixed_scale(n, 1.0, 64, 2) for n in (64, 1024)] == [2, 2]
    assert emergent_scale(8, 1024, 0.5) == pytest.approx(emergent_scale(2, 64, 0.5))


def test_emergent_scale_reaches_the_table_and_summary(tmp_path):
    """A short yaida run records s, gamma = L/n^(1-s) and L/n in parametrization.json and
    summary.json; training.show prints them."""
    import json
    import subprocess
    import sys

    from tests.conftest import REPO

    run_dir = tmp_path / "run"
    args = [
        sys.executable, "train_gpt.py",
        "--config", "configs/tiny_cpu.yaml", f"run.dir={run_dir}", "training.steps=2", "eval.at=[1.0]",
        "model.hidden_size=128", "model.num_layers=4", "parametrization.preset=sp", "parametrization.width=yaida",
        "parametrization.yaida_s=0.5", "parametrization.base_hidden_size=64", "optimizer.name=sgd",
        "optimizer.lr=0.01", "scheduler.warmup_steps=0", "logging.progress_bar=false",
    ]  # fmt: skip
    out = subprocess.run(
        args, cwd=REPO, capture_output=True, text=True, timeout=600
    )  # own process: see test_diagnostics
    assert out.returncode == 0, out.stderr[-3000:]
    expected = {"s": 0.5, "gamma": 4 / 128**0.5, "L_over_n": 4 / 128}
    table = json.loads((run_dir / "parametrization.json").read_text())
    assert table["width"] == "yaida" and table["yaida_s"] == 0.5
    assert table["emergent_scale"] == pytest.approx(expected)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["width"] == "yaida" and summary["emergent_scale"] == pytest.approx(expected)
    assert table["roles"]["hidden_in"]["lr_factor"] == pytest.approx(2**-0.5)  # m^(s-1), m = 2
    assert table["roles"]["output"]["lr_factor"] == pytest.approx(0.5)


def test_feature_change_scales_like_the_emergent_scale(megatron):
    """Equation (46) checked on the toolkit's transformer: the squared relative change of the
    last layer's output after 3 full-batch SGD steps, against width 64..512 at L=2, has slope
    -(1-s) within 0.15 for s = 0, 1/2, 1 (measured: -1.10, -0.60, -0.10)."""
    from eval.coord_check_yaida import run_yaida_check

    cfg = tiny_config("optimizer.name=sgd", "optimizer.lr=0.005", "model.seq_length=32", "parametrization.preset=sp")
    results = run_yaida_check(cfg, [0.0, 0.5, 1.0], [64, 128, 256, 512], 2, steps=3, seeds=2, progress=False)
    slopes = {r["s"]: r["slope"] for r in results["s_axis"]}
    for s, measured in slopes.items():
        assert abs(measured - (-(1 - s))) <= 0.15, slopes
    # the differences between s remove the common finite-width offset: tighter still
    assert slopes[0.0] - slopes[1.0] == pytest.approx(-1.0, abs=0.1)
    assert slopes[0.5] - slopes[1.0] == pytest.approx(-0.5, abs=0.1)


@pytest.mark.parametrize(
    "extra, message",
    [
        # The flag sets width=yaida and s for every run: the Adam refusal names the flag and the
        # shape, not the config file (was: 'configs/tiny_cpu.yaml: parametrization.yaida_s: width
        # 'yaida' needs s in [0, 1], got None', blaming the file for an override it never held).
        (["parametrization.width=yaida", "--widths", "32", "64"],
         "error: --yaida-s 0 --widths 32 --depths 2: parametrization.width=yaida: Yaida's family"),
        (["optimizer.name=sgd", "--widths", "32", "64", "--seeds", "0"], "error: --seeds: 0; give at least 1"),  # was --widths
        (["optimizer.name=sgd", "--widths", "32", "64", "--depths", "0"], "error: --depths: every value must be"),
        (["optimizer.name=sgd", "--widths", "32", "64", "--steps", "0"], "error: --steps: 0; the change after K"),
        (["optimizer.name=sgd", "--widths", "32", "66"], "error: --yaida-s 0 --widths 66 --depths 2: model.hidden_size"),
    ],
)  # fmt: skip
def test_yaida_cli_errors_name_the_flag_at_fault(capsys, extra, message):
    from eval.__main__ import main

    assert main(["coord-check", "--config", str(TINY), *extra, "--yaida-s", "0", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message), err
    assert "tiny_cpu.yaml" not in err


def test_yaida_check_takes_width_yaida_from_the_flag(megatron, capsys):
    """A config (or override) with width=yaida and no s yet runs: --yaida-s gives s (was exit 2)."""
    from eval.__main__ import main

    args = ["coord-check", "--config", str(TINY), "parametrization.width=yaida", "optimizer.name=sgd",
            "optimizer.lr=0.005", "model.seq_length=16", "--yaida-s", "1", "--widths", "32", "64", "--depths", "1",
            "--steps", "1", "--seeds", "1"]  # fmt: skip
    assert main(args) in (0, 1)
    assert "s=1: slope of feature change vs width" in capsys.readouterr().out

"""The plain-PyTorch reference GPT (benchmarks/plain_gpt.py) and the throughput harness that
compares the toolkit against it (benchmarks/gpu_vs_plain.py), on CPU at tiny shapes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, ROPE_SHAPE, ROPE_VOCAB, env, tiny_config

VOCAB = ROPE_VOCAB
SHAPE = ROPE_SHAPE
# Hand count for SHAPE: word embedding and untied output layer 2 * 256 * 64 = 32768; per layer two
# LayerNorms 4 * 64 = 256, QKV 3 * 64^2 = 12288, projection 64^2 = 4096, fc1 and fc2 2 * 4 * 64^2 = 32768
# (49408 per layer, 98816 for 2); final LayerNorm 2 * 64 = 128: 32768 + 98816 + 128 = 131712.
HAND_PARAMS = 131712


def losses_on_identical_weights(cfg, device="cpu"):
    from benchmarks.plain_gpt import PlainGPT, load_megatron_weights, shape_of
    from training.model import Placement, build_model, resolve

    torch.manual_seed(0)
    bf16 = device == "cuda"
    model = build_model(cfg, VOCAB, Placement(device=device, bf16=bf16))
    plain = PlainGPT(shape_of(cfg, VOCAB)).to(device)
    load_megatron_weights(
        plain, {k: v.float() for k, v in model.state_dict().items() if v is not None}, cfg, resolve(cfg)
    )
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (3, 33), generator=g).to(device)
    positions = torch.arange(32, device=device).unsqueeze(0).expand(3, 32)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
        toolkit = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        reference = plain(tokens[:, :-1], tokens[:, 1:]) / tokens[:, 1:].numel()
    return float(toolkit), float(reference), model, plain


@pytest.mark.parametrize(
    "extra",
    [
        ("parametrization.preset=sp", "parametrization.base_num_layers=2", "parametrization.base_hidden_size=64"),
        ("parametrization.output_multiplier=2.0", "parametrization.embedding_multiplier=1.5"),  # depth-muP, L != L0
        ("parametrization.preset=sp", "model.activation=swiglu", "model.normalization=RMSNorm",
         "model.num_query_groups=2", "model.add_bias_linear=true"),
    ],
    ids=["sp-at-base-depth", "depth-mup-multipliers", "swiglu-rmsnorm-gqa-bias"],
)  # fmt: skip
def test_plain_gpt_computes_the_toolkit_loss_on_identical_weights(megatron, extra):
    cfg = tiny_config(*SHAPE, *extra)
    toolkit, reference, _, _ = losses_on_identical_weights(cfg)
    assert 5.0 < toolkit < 6.0  # ln(256) = 5.55 near initialization
    assert reference == pytest.approx(toolkit, rel=2e-6)


def test_plain_gpt_has_the_toolkit_models_parameter_count(megatron):
    _, _, model, plain = losses_on_identical_weights(tiny_config(*SHAPE))
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in model.parameters()) == HAND_PARAMS


def test_harness_trains_both_models_on_cpu(tmp_path, capsys):
    """benchmarks/gpu_vs_plain.py end to end at its tiny shape (2 layers, width 64, 4 heads,
    sequence 64, vocabulary 256, micro-batch 2, 2 micro-batches per step); benchmarks/gpu_goals.py
    reads what it wrote."""
    out = tmp_path / "vs_plain_124m.json"
    cmd = [sys.executable, "benchmarks/gpu_vs_plain.py", "--device", "cpu", "--tiny", "--sizes", "124m",
           "--rounds", "3", "--steps", "2", "--warmup", "2", "--patch-rounds", "2", "--json", str(out),
           "--time-limit", "900"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (size,) = json.loads(out.read_text())["sizes"]
    # forward FLOPs per token by hand: per layer QKV 2*64*192 = 24576, scores and context
    # 2*2*64*64 = 16384, projection 2*64*64 = 8192, MLP 2*2*64*256 = 65536 (114688; 229376 for
    # 2 layers), logits 2*64*256 = 32768: 262144, counted by torch's FlopCounterMode in both
    flops = size["forward_flops_per_token"]
    assert flops == {"formula": 262144, "toolkit_counted": 262144.0, "plain_counted": 262144.0}
    # tiny shape, 64 positions: embedding and output 2*256*64, 2 layers of 49408, final norm 128
    assert size["params"] == {"toolkit": HAND_PARAMS, "plain": HAND_PARAMS}
    assert size["tokens_per_step"] == 4 * 64
    assert size["rounds"] == 3  # the time limit (with its reserve for the patch rounds) cut none
    for name in ("toolkit", "plain"):
        model = size["models"][name]
        assert len(model["step_s"]) == 3 and all(t > 0 for t in model["step_s"])
        assert model["loss_first"] == pytest.approx(5.55, abs=0.1)  # ln(256) at initialization
        assert model["loss_last"] < model["loss_first"] - 1.0, name  # (2 + 3 * 2) steps on one batch
        t = model["tokens_per_s"]
        assert t["min"] <= t["median"] <= t["max"]
    ratio = size["ratio_toolkit_over_plain"]
    per_round = [p / t for t, p in zip(size["models"]["toolkit"]["step_s"], size["models"]["plain"]["step_s"])]
    assert ratio["median"] == pytest.approx(sorted(per_round)[1])
    patch = size["patched_over_unpatched"]
    assert len(patch["step_s_patched"]) == len(patch["step_s_unpatched"]) == patch["rounds"] == 2
    assert "toolkit/plain tokens/s: median" in done.stdout
    from benchmarks import gpu_goals

    assert gpu_goals.main([str(tmp_path)]) == 0
    report = capsys.readouterr().out
    assert f"| toolkit/plain tokens/s | 124m | {ratio['median']:.3f} | >= 1.0 |" in report
    assert f"| patched/unpatched step time | 124m | {patch['ratio_of_medians']:.3f} | <= 1.01 |" in report
    assert "| toolkit MFU | 124m | not measured |" in report  # no MFU on CPU


def test_harness_past_its_time_limit_starts_no_size_and_says_so(tmp_path):
    out = tmp_path / "out.json"
    cmd = [sys.executable, "benchmarks/gpu_vs_plain.py", "--device", "cpu", "--tiny", "--sizes", "124m,350m",
           "--json", str(out), "--time-limit", "0.001"]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(out.read_text())["sizes"] == [
        {"size": "124m", "error": "time limit"},
        {"size": "350m", "error": "time limit"},
    ]
    assert "== 350m: not started, the time limit (0 s) has passed" in done.stdout


def planted_harness(planted: str, *args: str) -> subprocess.CompletedProcess:
    """``gpu_vs_plain.main(["--device", "cpu", "--tiny", *args])`` in a fresh process, after the
    code ``planted`` (a clock, a slow build, a signal) has run there."""
    argv = ["--device", "cpu", "--tiny", *args]
    script = f"import sys\nfrom benchmarks import gpu_vs_plain\n{planted}\nsys.exit(gpu_vs_plain.main({argv!r}))\n"
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env(), capture_output=True, text=True,
                          timeout=300)  # fmt: skip


ONE_SIZE = ["--sizes", "124m", "--rounds", "3", "--steps", "1", "--warmup", "1", "--patch-rounds", "0"]


LIMIT_PASSED = """from benchmarks import deadline
looks = iter([100.0])  # the size's start
deadline.Deadline.left = lambda self: next(looks, -1.0)"""
SLOW_VARIANT = """import time
from benchmarks import deadline
looks = iter([100.0, 100.0, 1.0])  # the size's start, the variant's start, its bounded set-up
deadline.Deadline.left = lambda self: next(looks, -1.0)
build = gpu_vs_plain.toolkit_runner
def slow(name, *args, **kwargs):
    if name == "slow":
        time.sleep(600)
    return build(name, *args, **kwargs)
gpu_vs_plain.toolkit_runner = slow"""


@pytest.mark.parametrize(
    ("planted", "variant", "why"),
    [
        (LIMIT_PASSED, "rope_megatron", "not built: the time limit (60 s) had passed"),
        (SLOW_VARIANT, "slow", "not built: the time limit (60 s) passed during its set-up"),
    ],
    ids=["passed-before-the-variant", "passed-in-its-set-up"],
)
def test_a_variant_the_time_limit_leaves_no_time_for_is_left_out_and_the_others_still_run(
    tmp_path, planted, variant, why
):
    """The limit passes after the size has started (planted: the deadline has time left at its
    first looks only): before the variant's set-up, it is not built; in it (a first
    torch.compile or graph capture has no bound of its own; planted: a 10-minute build with 1 s
    left), the set-up is cut. Either way one round of the toolkit and plain models runs and the
    size is reported; before the cut, the stage's `timeout` killed the process in that build
    and its JSON was never written."""
    out = tmp_path / "out.json"
    done = planted_harness(planted, *ONE_SIZE, "--time-limit", "60", "--json", str(out),
                           "--variant", f"{variant}:model.rope_impl=megatron")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (size,) = json.loads(out.read_text())["sizes"]
    assert size["failed_variants"] == {variant: why}
    assert set(size["models"]) == {"toolkit", "plain"} and size["rounds"] == 1
    assert why in done.stdout and "time limit (60 s): 1 of 3 rounds ran" in done.stdout


SIGTERM_IN_ROUND_2 = """import os, signal
from benchmarks import patch_overhead
real, calls = patch_overhead.timed, []
def timed(*args):
    calls.append(1)
    if len(calls) == 5:  # round 2's first runner (2 runners per round)
        os.kill(os.getpid(), signal.SIGTERM)
    return real(*args)
patch_overhead.timed = timed"""


def test_sigterm_in_the_rounds_writes_the_rounds_that_ended(tmp_path):
    """The stage's `timeout` sends SIGTERM (planted: in the third round, after 2 ended): the two
    rounds are reported and written, the patched/unpatched rounds are not started, no later size
    is, and the exit is 75. Before, SIGTERM ended the process with no JSON at all."""
    out = tmp_path / "out.json"
    done = planted_harness(SIGTERM_IN_ROUND_2, "--sizes", "124m,350m", "--rounds", "5", "--steps", "1",
                           "--warmup", "1", "--patch-rounds", "2", "--json", str(out))  # fmt: skip
    assert done.returncode == 75, done.stderr[-3000:]
    (size,) = json.loads(out.read_text())["sizes"]  # 350m not started
    assert size["rounds"] == 2 and size["stopped"] == "SIGTERM (the stage's time limit): 2 of 5 rounds ran"
    assert [len(m["step_s"]) for m in size["models"].values()] == [2, 2]
    assert "patched_over_unpatched" not in size
    assert "patched/unpatched: not run (SIGTERM (the stage's time limit))" in done.stdout


def test_sigterm_in_the_set_up_records_the_size_as_stopped(tmp_path):
    out = tmp_path / "out.json"
    planted = """import os, signal
build = gpu_vs_plain.plain_runner
def plain_runner(*args):
    os.kill(os.getpid(), signal.SIGTERM)
    return build(*args)
gpu_vs_plain.plain_runner = plain_runner"""
    done = planted_harness(planted, "--sizes", "124m,350m", "--json", str(out))
    assert done.returncode == 75, done.stderr[-3000:]
    assert json.loads(out.read_text())["sizes"] == [
        {"size": "124m", "error": "stopped by SIGTERM (the stage's time limit) before a round ended"}
    ]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_plain_gpt_computes_the_toolkit_loss_on_identical_weights_on_gpu():
    """bf16 on the GPU: megatron's bf16 model against the plain model under bf16 autocast."""
    from training.distributed import init_distributed, seed_everything, shutdown

    init_distributed("cuda")
    try:
        seed_everything(0, "cuda")
        cfg = tiny_config(*SHAPE, "parametrization.preset=sp", "parametrization.base_num_layers=2",
                          "parametrization.base_hidden_size=64", "parallel.device=cuda")  # fmt: skip
        toolkit, reference, _, _ = losses_on_identical_weights(cfg, device="cuda")
    finally:
        shutdown()
    assert 5.0 < toolkit < 6.0
    assert reference == pytest.approx(toolkit, rel=2e-2)  # bf16 rounding in different places

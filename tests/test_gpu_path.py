"""train_gpt.py on a CUDA GPU: the GPU backend's contract (``python -m pytest -m gpu``).

Skipped without CUDA. Runs the tiny config through NCCL, megatron DDP, ``get_megatron_optimizer``
(distributed optimizer, bf16) and megatron's schedules, and resumes from a mid-run
``dist_checkpointing`` checkpoint for AdamW and SGD. GPU kernels with atomics are not bitwise
deterministic, so resumed losses are compared with a tolerance; LRs must match exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.test_train_gpt import rows, summary, train
from training.checkpoint import LATEST, step_dir_name

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

GPU = ["parallel.device=cuda", "checkpoint.interval=5", "checkpoint.keep=10"]


def resume_from_step(reference: Path, target: Path, step: int, *overrides: str) -> None:
    """A copy of ``reference`` rewound to its step-``step`` checkpoint, then trained to the end."""
    shutil.copytree(reference, target)
    (target / "summary.json").unlink()
    root = target / "checkpoints"
    for ckpt in root.glob("step_*"):
        if ckpt.name > step_dir_name(step):  # zero-padded: name order is step order
            shutil.rmtree(ckpt)
    (root / LATEST).write_text(step_dir_name(step) + "\n")
    train(target, *GPU, *overrides)


@pytest.mark.parametrize(
    "optimizer",
    [["optimizer.name=adamw"], ["optimizer.name=sgd", "optimizer.lr=0.05", "parallel.use_distributed_optimizer=false"]],
    ids=["adamw-distributed-bf16", "sgd"],
)
def test_gpu_run_and_resume(tmp_path, optimizer):
    ref = tmp_path / "ref"
    train(ref, *GPU, *optimizer)
    s = summary(ref)
    assert s["status"] == "completed" and s["steps"] == 20, s
    assert s["final_val_loss"] == s["evals"][-1]["val_loss"] < s["evals"][0]["val_loss"]  # still learning
    first = rows(ref)[0]
    assert first["tflops_per_gpu"] > 0 and (
        first["mfu"] is None or 0 < first["mfu"] < 1
    )  # None: GPU not in the peak table
    assert (ref / "checkpoints" / step_dir_name(10) / "dist").is_dir()

    resumed = tmp_path / "resumed"
    resume_from_step(ref, resumed, 10, *optimizer)
    got, want = rows(resumed), rows(ref)
    assert [r["step"] for r in got] == list(range(1, 21))
    assert [r["lr"] for r in got] == [r["lr"] for r in want]
    assert [r["loss"] for r in got[10:]] == pytest.approx([r["loss"] for r in want[10:]], rel=1e-2)
    assert summary(resumed)["status"] == "completed"


def test_gpu_parametrization_table_is_the_cpu_one(tmp_path):
    """The resolved table does not depend on the backend (it is checked on resume)."""
    gpu, cpu = tmp_path / "gpu", tmp_path / "cpu"
    train(gpu, *GPU, "training.steps=2", "scheduler.warmup_steps=1", "eval.at=[1.0]")
    train(cpu, "parallel.device=cpu", "training.steps=2", "scheduler.warmup_steps=1", "eval.at=[1.0]")
    assert json.loads((gpu / "parametrization.json").read_text()) == json.loads(
        (cpu / "parametrization.json").read_text()
    )


def test_gpu_diagnostics_rows_follow_the_cpu_contract(tmp_path):
    """Diagnostics on the GPU path (NCCL, bf16, distributed optimizer): the same rows as a CPU
    run of the same config, every value finite, and training unchanged by them (a GPU run is
    not bitwise reproducible, so losses are compared with a tolerance)."""
    from rundir.files import read_diagnostics

    short = ["training.steps=6", "eval.at=[1.0]", "scheduler.warmup_steps=1"]
    train(tmp_path / "off", *GPU, *short)
    train(tmp_path / "on", *GPU, *short, "logging.diagnostics_interval=2")
    train(tmp_path / "cpu", "parallel.device=cpu", *short, "logging.diagnostics_interval=2")
    got, off = rows(tmp_path / "on"), rows(tmp_path / "off")
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in off], rel=1e-2)

    def keys(run: Path) -> set:
        return {(r["step"], r["layer"], r.get("param") or r.get("kind")) for r in read_diagnostics(run)}

    gpu_rows = read_diagnostics(tmp_path / "on")
    assert keys(tmp_path / "on") == keys(tmp_path / "cpu") and gpu_rows
    values = [v for r in gpu_rows for k, v in r.items() if k in ("weight_rms", "update_rms", "rms")]
    assert all(v == v and 0 <= v < float("inf") for v in values)  # no NaN or inf from bf16
    assert all(r["update_rms"] > 0 for r in gpu_rows if "param" in r)  # every parameter moved


def run_check(script: str, variants: dict[str, list[str]]) -> dict:
    """Run ``script`` (a check comparing config variants in one fresh process) and return the
    JSON it prints on its ``RESULT`` line."""
    import subprocess
    import sys

    from tests.conftest import REPO, env

    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(variants)],
        cwd=REPO, env=env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])


KERNELS_CHECK = r"""
import json, sys, torch
from runconfig import load_config
from runconfig.schema import RunConfig
from training.backends import GpuBackend
from training.distributed import init_distributed, seed_everything, shutdown
from training.model import Placement, build_model, resolve

init_distributed("cuda")
g = torch.Generator().manual_seed(0)
tokens = torch.randint(0, 512, (4, 257), generator=g)
batch = [{"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": torch.ones(4, 256),
          "position_ids": torch.arange(256).unsqueeze(0).expand(4, 256)}]
out = {}
for name, extra in json.loads(sys.argv[1]).items():
    cfg = load_config(RunConfig, "configs/tiny_cpu.yaml", ["parallel.device=cuda", "model.seq_length=256",
        "model.hidden_size=128", "model.position_embedding_type=rope", "optimizer.lr=0.003", *extra])
    seed_everything(0, "cuda")
    model = build_model(cfg, 512, Placement(device="cuda", bf16=True))
    backend = GpuBackend(cfg, model, resolve(cfg), bf16=True)
    first = backend.train_step(batch)
    second = backend.train_step(batch)
    out[name] = [first.loss, first.grad_norm, second.loss]
shutdown()
print("RESULT " + json.dumps(out))
"""


def test_gpu_kernel_choices_compute_the_same_step():
    """Every ``model.attention_backend`` and the fused cross-entropy give the loss and gradient
    norm of PyTorch's reference (math) attention with megatron's unfused cross-entropy, to
    bf16 accuracy, on identical weights (a kernel with a wrong layout or scale would not)."""
    variants = {
        "reference": ["model.attention_backend=math", "model.cross_entropy_fusion=false"],
        **{b: [f"model.attention_backend={b}"] for b in ("auto", "flash", "cudnn", "efficient")},
        "unfused_ce": ["model.cross_entropy_fusion=false"],
    }
    got = run_check(KERNELS_CHECK, variants)
    ref = got.pop("reference")
    assert 5.5 < ref[0] < 7.0  # ln(512) = 6.24 at initialization
    for name, values in got.items():
        assert values == pytest.approx(ref, rel=2e-2), name


SWITCHES_CHECK = r"""
import json, sys, traceback, torch
from runconfig import load_config
from runconfig.schema import RunConfig
from training.backends import GpuBackend
from training.distributed import init_distributed, seed_everything, shutdown
from training.model import Placement, build_model, resolve

init_distributed("cuda")
g = torch.Generator().manual_seed(0)
tokens = torch.randint(0, 512, (4, 257), generator=g)
batch = [{"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": torch.ones(4, 256),
          "position_ids": torch.arange(256).unsqueeze(0).expand(4, 256)}] * 2
out = {}
for name, extra in json.loads(sys.argv[1]).items():
    try:
        cfg = load_config(RunConfig, "configs/tiny_cpu.yaml", ["parallel.device=cuda", "model.seq_length=256",
            "model.hidden_size=128", "model.position_embedding_type=rope", "model.add_bias_linear=false",
            "optimizer.lr=0.003", *extra])
        seed_everything(0, "cuda", cfg.model.cuda_graphs)
        model = build_model(cfg, 512, Placement(device="cuda", bf16=True))
        backend = GpuBackend(cfg, model, resolve(cfg), bf16=True)
        for group in backend.param_groups:
            group["lr"] = group["max_lr"]
        out[name] = [backend.train_step(batch).loss for _ in range(6)]
    except Exception:
        out[name] = traceback.format_exc()[-1500:]
shutdown()
print("RESULT " + json.dumps(out))
"""


def test_gpu_throughput_switches_compute_the_same_steps():
    """Six optimizer steps (megatron's CUDA graphs are captured after its warm-up steps and
    replayed in the last ones) with each throughput switch give the default path's losses, to
    bf16 accuracy: megatron's RoPE, full and selective activation recompute, compiled layers,
    CUDA graphs."""
    variants = {
        "reference": [],
        "rope_megatron": ["model.rope_impl=megatron"],
        "recompute_full": ["model.recompute=full", "model.recompute_num_layers=1"],
        "recompute_selective": ["model.recompute=selective", "model.recompute_modules=[core_attn,mlp]"],
        "compile": ["model.compile=true"],
        "cuda_graphs": ["model.cuda_graphs=true"],
    }
    got = run_check(SWITCHES_CHECK, variants)
    failed = {name: v for name, v in got.items() if isinstance(v, str)}
    assert not failed, "\n".join(f"{k}:\n{v}" for k, v in failed.items())
    ref = got.pop("reference")
    assert 5.5 < ref[0] < 7.0 and ref[-1] < ref[0]  # ln(512) = 6.24 at initialization, then learning
    for name, losses in got.items():
        assert losses == pytest.approx(ref, rel=2e-2), name

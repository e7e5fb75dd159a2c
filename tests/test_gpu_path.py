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

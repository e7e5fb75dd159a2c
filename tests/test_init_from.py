"""checkpoint.init_from: a new run starts from another run's model weights, with a fresh
optimizer, LR schedule and step count (Megatron-LM's --pretrained-checkpoint with --finetune)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, TINY, env

SHORT = ["scheduler.warmup_steps=1", "logging.interval=1", "logging.progress_bar=false", "eval.at=[1.0]"]
FROZEN = "optimizer.lr=1e-30"  # Adam moves each weight by about 1e-30: fp32 weights stay bit-equal


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *SHORT, *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)


def final_loss(run_dir: Path) -> float:
    return json.loads((run_dir / "summary.json").read_text())["final_val_loss"]


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("init") / "source"
    out = train(run, "training.steps=6")
    assert out.returncode == 0, out.stderr[-3000:]
    return run


def test_a_run_starts_from_the_source_runs_weights_with_a_fresh_optimizer(source, tmp_path):
    """The new run, frozen by a 1e-30 LR, ends on exactly the source's final validation loss
    (its weights are the source's); its Adam state counts its own 4 steps, not 6 + 4. The same
    frozen run without init_from stays near its random start's loss."""
    run = tmp_path / "finetune"
    out = train(run, "training.steps=4", FROZEN, f"checkpoint.init_from={source}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert final_loss(run) == final_loss(source)
    assert f"initialized the model from {source / 'checkpoints' / 'step_00000006'} (step 6 of {source})" in out.stderr
    state = torch.load(run / "checkpoints" / "step_00000004" / "model_tp0_pp0.pt", weights_only=False)["optimizer"]
    steps = {float(s["step"]) for s in state["state"].values()} if "state" in state else None
    assert steps == {4.0}, steps
    fresh = tmp_path / "fresh"
    assert train(fresh, "training.steps=4", FROZEN).returncode == 0
    assert final_loss(fresh) > final_loss(source) + 0.3, (final_loss(fresh), final_loss(source))


def test_a_checkpoint_folder_is_a_source_too_and_a_mismatch_names_both_sides(source, tmp_path):
    folder = source / "checkpoints" / "step_00000006"
    run = tmp_path / "from_folder"
    assert train(run, "training.steps=2", FROZEN, f"checkpoint.init_from={folder}").returncode == 0
    assert final_loss(run) == final_loss(source)
    deeper = train(tmp_path / "deeper", "training.steps=2", "model.num_layers=3", f"checkpoint.init_from={source}")
    assert deeper.returncode == 2
    assert f"checkpoint.init_from: {folder} (the model of {source / 'config.yaml'}) does not fit" in deeper.stderr
    missing = train(tmp_path / "missing", "training.steps=2", f"checkpoint.init_from={tmp_path / 'nope'}")
    assert missing.returncode == 2
    assert f"checkpoint.init_from: {tmp_path / 'nope'} is neither a run directory nor a checkpoint folder" in (
        missing.stderr
    )


def _dist_copy(source: Path, run: Path, monkeypatch) -> None:
    """``run``: ``source``'s last weights as the GPU path's dist_checkpointing folder (as
    tests/test_export_hf.py writes one on CPU)."""
    import shutil

    from megatron.core import dist_checkpointing

    from training.checkpoint import find_checkpoint, load_model_weights, one_process_config
    from training.export_hf import read_run_config

    ckpt = find_checkpoint(source)
    model = load_model_weights(one_process_config(read_run_config(source)), ckpt)
    step = run / "checkpoints" / ckpt.path.name
    (step / "dist").mkdir(parents=True)
    shutil.copy(source / "config.yaml", run / "config.yaml")
    shutil.copy(ckpt.path / "common.json", step / "common.json")
    (run / "checkpoints" / "latest").write_text(ckpt.path.name + "\n")
    with monkeypatch.context() as m:  # megatron's saver synchronizes CUDA; stubbed on a CPU-only torch
        m.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
        m.setattr(torch.cuda, "current_device", lambda: "cpu")
        dist_checkpointing.save({"model": model.sharded_state_dict()}, str(step / "dist"))


@pytest.mark.parametrize("tp", [1, 2])
def test_a_dist_checkpoint_initializes_any_layout(source, tmp_path, monkeypatch, megatron, tp):
    """The GPU path's checkpoint format: megatron reshards it into a TP=2 run as into one process."""
    gpu_run = tmp_path / "gpu_run"
    _dist_copy(source, gpu_run, monkeypatch)
    run = tmp_path / "from_dist"
    overrides = ["training.steps=2", FROZEN, f"checkpoint.init_from={gpu_run}"]
    if tp == 1:
        out = train(run, *overrides)
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "29781",
               "train_gpt.py", "--config", str(TINY), f"run.dir={run}", *SHORT, *overrides,
               "parallel.tensor_model_parallel_size=2"]  # fmt: skip
        out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert final_loss(run) == pytest.approx(final_loss(source), abs=1e-6 if tp == 2 else 0.0)

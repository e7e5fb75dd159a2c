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

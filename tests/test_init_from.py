"""checkpoint.init_from: a new run starts from another run's model weights, with a fresh
optimizer, LR schedule and step count (Megatron-LM's --pretrained-checkpoint with --finetune)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, TINY, env, free_port

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
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
               "train_gpt.py", "--config", str(TINY), f"run.dir={run}", *SHORT, *overrides,
               "parallel.tensor_model_parallel_size=2"]  # fmt: skip
        out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert final_loss(run) == pytest.approx(final_loss(source), abs=1e-6 if tp == 2 else 0.0)


# ----------------------------------------------------------------------------- a CPU checkpoint into another layout
# The shape where a naive split of a global tensor breaks: a gated MLP (fc1 is [gate_r; up_r] on
# each tensor-parallel rank) and grouped-query attention (the fused QKV holds "q q k v" per query
# group); the Llama export layout, so the export reads both runs.
LLAMA = [
    "model.num_layers=2",
    "model.normalization=RMSNorm",
    "model.position_embedding_type=rope",
    "model.activation=swiglu",
    "model.num_query_groups=2",
    "optimizer.lr=0.01",
]
# Tensor and pipeline parallelism change only the order of float32 sums (the row-parallel
# all-reduce of two partial products, the vocabulary-parallel softmax over two halves, the loss
# pair summed over stages), a few ulps (6e-8 relative each) of a loss near 6; a wrong split
# (measured: torch.chunk of the global fc1, 2.6e-2) is far above.
LOSS_RTOL = 1e-6


def torchrun(run_dir: Path, nproc: int, *overrides: str) -> subprocess.CompletedProcess:
    if nproc == 1:
        return train(run_dir, *overrides)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port", str(free_port()),
           "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *SHORT, *overrides]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)


def layout(tp: int, pp: int) -> list[str]:
    return [f"parallel.tensor_model_parallel_size={tp}", f"parallel.pipeline_model_parallel_size={pp}"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """``tied``: TP=1 PP=1 with one embedding table (the last stage of a PP target holds a copy);
    ``tp2``: TP=2 with an untied output layer."""
    root = tmp_path_factory.mktemp("layouts")
    runs = {
        "tied": (1, [*LLAMA, "model.untie_embeddings_and_output_weights=false", "training.steps=6"]),
        "tp2": (2, [*LLAMA, "training.steps=6", *layout(2, 1)]),
    }
    for name, (nproc, overrides) in runs.items():
        out = torchrun(root / name, nproc, *overrides)
        assert out.returncode == 0, out.stderr[-3000:]
    return {name: root / name for name in runs}


def exported_weights(run_dir: Path, out: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    from training.export_hf import export

    record = export(run_dir, out, weights_only=True)  # mock data: no tokenizer to export
    assert record["passed"], record["parity"]
    return {k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def check_same_model(source: Path, run: Path, tmp_path: Path) -> None:
    """``run`` (its updates at LR 0 and 1e-30: its weights stay the source's, in its own layout)
    evaluates to the source's final loss, and exports to the same Hugging Face weights."""
    assert final_loss(run) == pytest.approx(final_loss(source), rel=LOSS_RTOL, abs=0.0)
    want, got = exported_weights(source, tmp_path / "hf_source"), exported_weights(run, tmp_path / "hf_run")
    assert sorted(got) == sorted(want)
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name


LAYOUT_CASES = [("tied", 2, 1), ("tied", 1, 2), ("tp2", 1, 1), ("tp2", 1, 2)]


@pytest.mark.parametrize("source,tp,pp", LAYOUT_CASES)
def test_a_cpu_checkpoint_initializes_another_layout(sources, tmp_path, megatron, source, tp, pp):
    """A CPU checkpoint of one layout into a run of another: the source's shards joined, split as
    megatron splits them (gated fc1 by halves, GQA's QKV by query groups, the vocabulary by rows,
    layers by stage, the tied embedding's copy on the last stage)."""
    run = tmp_path / "run"
    out = torchrun(run, tp * pp, *LLAMA, "training.steps=2", FROZEN, f"checkpoint.init_from={sources[source]}",
                   *([] if source == "tp2" else ["model.untie_embeddings_and_output_weights=false"]),
                   *layout(tp, pp))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    check_same_model(sources[source], run, tmp_path)


@pytest.mark.slow
def test_a_cpu_checkpoint_initializes_tp2_pp2(sources, tmp_path, megatron):
    run = tmp_path / "run"
    out = torchrun(run, 4, *LLAMA, "training.steps=2", FROZEN, "model.untie_embeddings_and_output_weights=false",
                   f"checkpoint.init_from={sources['tied']}", *layout(2, 2))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    check_same_model(sources["tied"], run, tmp_path)


def test_another_vocabulary_padding_is_refused_on_every_rank(tmp_path):
    """Vocabulary 300 pads to 384 rows at TP=1 and to 512 at TP=2 (a multiple of 128 x TP): the
    padding rows take part in the softmax, so the weights cannot carry over; each rank exits 2."""
    source = tmp_path / "source"
    assert train(source, "training.steps=2", "model.num_layers=2", "model.vocab_size=300").returncode == 0
    out = torchrun(tmp_path / "tp2", 2, "training.steps=2", "model.num_layers=2", "model.vocab_size=300",
                   f"checkpoint.init_from={source}", *layout(2, 1))  # fmt: skip
    assert out.returncode != 0
    assert out.stderr.count("the source's vocabulary is padded to 384 rows, this run's to 512") == 2, out.stderr[-3000:]
    assert out.stderr.count("exitcode  : 2") == 2, out.stderr[-3000:]
    assert not (tmp_path / "tp2" / "checkpoints").exists()


# ----------------------------------------------------------------------------- the source's model config (init_mode=weights)
def test_every_model_config_field_is_classified_for_weights_only_init():
    """A new ModelConfig field must say whether a weights-only init may change it
    (training.checkpoint.INIT_WEIGHTS_MODEL_KEYS): unclassified, it would load silently."""
    import dataclasses

    from runconfig.schema import ModelConfig
    from training.checkpoint import INIT_WEIGHTS_MODEL_KEYS

    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    assert sorted(INIT_WEIGHTS_MODEL_KEYS) == sorted(fields)
    assert {policy for policy, _ in INIT_WEIGHTS_MODEL_KEYS.values()} == {"same", "shape", "free"}


def test_a_source_computing_another_function_of_the_same_shapes_is_refused(tmp_path):
    """gelu (fc1 2F rows) into swiglu (fc1 [gate; up] of F rows), 4 heads of 16 into 2 heads of
    32 (head count is a split of the same QKV rows): the same tensors, another function; exit 2
    naming the source, the key, both values and why, before anything is trained."""
    base = ["training.steps=2", "model.num_layers=1", "model.hidden_size=32", "model.num_attention_heads=4"]
    src = tmp_path / "gelu"
    assert train(src, *base, "model.ffn_hidden_size=128").returncode == 0
    out = train(tmp_path / "swiglu", *base, "model.activation=swiglu", "model.ffn_hidden_size=64",
                f"checkpoint.init_from={src}")  # fmt: skip
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"checkpoint.init_from: {src / 'checkpoints' / 'step_00000002'} (the model of {src / 'config.yaml'})" in (
        out.stderr
    )
    assert "model.activation: 'gelu' -> 'swiglu' (swiglu's fc1 is [gate; up]" in out.stderr
    assert not (tmp_path / "swiglu" / "checkpoints").exists()
    heads = train(tmp_path / "heads", *base, "model.ffn_hidden_size=128", "model.num_attention_heads=2",
                  f"checkpoint.init_from={src}")  # fmt: skip
    assert heads.returncode == 2, heads.stderr[-3000:]
    assert "model.num_attention_heads: 4 -> 2 (" in heads.stderr
    assert "model.kv_channels: 8 -> 16 (" in heads.stderr


def test_a_longer_context_and_another_parametrization_are_taken_with_a_warning(tmp_path):
    """seq_length is fine-tuning's to change (rope: no table); an sp source into a depth_mup
    run loads, warning which parametrization keys change the multipliers applied to them."""
    base = ["training.steps=2", "model.num_layers=2", "model.hidden_size=32", "model.position_embedding_type=rope"]
    src = tmp_path / "sp"
    assert train(src, *base, "parametrization.preset=sp", "model.seq_length=32").returncode == 0
    out = train(tmp_path / "long", *base, f"checkpoint.init_from={src}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "its weights were trained under another parametrization: parametrization.preset: 'sp' -> 'depth_mup'" in (
        out.stderr
    )
    same = train(tmp_path / "same", *base, "parametrization.preset=sp", f"checkpoint.init_from={src}")
    assert same.returncode == 0, same.stderr[-3000:]
    assert "roles.output.multiplier: 1.0 -> 2.0" in out.stderr  # muP: base_hidden_size 64 / hidden_size 32
    assert "another parametrization" not in same.stderr

"""model.make_vocab_size_divisible_by: Megatron-LM's --make-vocab-size-divisible-by.

The embedding and output layer have ceil(vocab / (multiple x TP)) x multiple x TP rows
(Megatron-LM's ``_vocab_size_with_padding``); the padding rows take part in the softmax, so a
run, its resume, its branches and its Hugging Face export all need the same rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY, env, tiny_config
from training.model import padded_vocab_size

VOCAB = 500
MULTIPLE = 8
ROWS = 504  # ceil(500 / 8) x 8 = 63 x 8: the default multiple 128 would give 512
FAST = [
    f"model.vocab_size={VOCAB}",
    f"model.make_vocab_size_divisible_by={MULTIPLE}",
    "model.num_layers=2",
    "training.steps=3",
    "scheduler.warmup_steps=1",
    "eval.at=[1.0]",
    "eval.batches=1",  # one global batch of 8 sequences: the export's parity batch
    "logging.progress_bar=false",
]


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    ("vocab", "multiple", "tp", "rows"),
    [
        (500, 8, 1, 504),  # 63 x 8
        (500, 8, 2, 512),  # 32 x 16
        (500, 128, 1, 512),  # 4 x 128
        (300, 128, 2, 512),  # 2 x 256
        (50257, 128, 1, 50304),  # GPT-2's vocabulary as Megatron-LM pads it: 393 x 128
        (50257, 128, 8, 51200),  # 50 x 1024
        (50257, 1, 1, 50257),  # multiple 1: no padding
        (32000, 64, 4, 32000),  # already a multiple of 256 (125 x 256)
        (32001, 64, 4, 32256),  # one over: 126 x 256
    ],
)
def test_padded_rows_follow_megatron_lms_rule(vocab, multiple, tp, rows):
    assert padded_vocab_size(vocab, tp, multiple) == rows


@pytest.mark.parametrize("value", ["0", "-8"])
def test_a_multiple_below_one_exits_2_naming_the_key(tmp_path, value):
    from runconfig import ConfigError

    with pytest.raises(ConfigError, match=r"model\.make_vocab_size_divisible_by: must be >= 1"):
        tiny_config(f"model.make_vocab_size_divisible_by={value}")
    out = train(tmp_path / "run", f"model.make_vocab_size_divisible_by={value}")
    assert out.returncode == 2 and "model.make_vocab_size_divisible_by" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr and not (tmp_path / "run" / "checkpoints").exists()


def test_a_multiple_that_is_not_an_integer_exits_2_naming_the_key(tmp_path):
    out = train(tmp_path / "run", "model.make_vocab_size_divisible_by=8.5")
    assert out.returncode == 2 and "model.make_vocab_size_divisible_by" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_the_footprint_counts_the_padded_rows():
    from training.footprint import meta_model

    for multiple, rows in ((MULTIPLE, ROWS), (128, 512)):
        _, model = meta_model(
            tiny_config(f"model.vocab_size={VOCAB}", f"model.make_vocab_size_divisible_by={multiple}")
        )
        assert model.embedding.word_embeddings.weight.shape[0] == rows
        assert model.output_layer.weight.shape[0] == rows


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("pad") / "run"
    out = train(run_dir, *FAST)
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


def test_a_run_has_the_hand_computed_rows_and_exports_its_validation_loss(run, tmp_path):
    """A 3-step CPU run at vocabulary 500 and multiple 8: every checkpoint tensor with one row per
    vocabulary entry has 504 rows (not 512); the Hugging Face export keeps them (config
    vocab_size 504, ids 500..503 suppressed in generation) and its loss on the run's held-out batch
    is the run's final validation loss."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    from training.checkpoint import find_checkpoint, load_model_weights
    from training.distributed import single_process
    from training.export_hf import export, read_run_config

    cfg = read_run_config(run)
    assert cfg.model.make_vocab_size_divisible_by == MULTIPLE
    said = (
        "vocabulary 500 padded to 504 rows (4 padding rows: a multiple of model.make_vocab_size_divisible_by=8 x tp=1)"
    )
    assert said in (run / "train.log").read_text()
    ckpt = find_checkpoint(run, None)
    with single_process():
        model = load_model_weights(cfg, ckpt)
    assert model.embedding.word_embeddings.weight.shape == (ROWS, 64)
    assert model.output_layer.weight.shape == (ROWS, 64)

    record = export(run, tmp_path / "hf", weights_only=True)
    assert record["vocab"] == {"tokenizer": VOCAB, "rows": ROWS, "eod_id": VOCAB - 1, "suppressed_in_generation": 4}
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"))
    assert hf.config.vocab_size == ROWS and hf.get_input_embeddings().weight.shape == torch.Size([ROWS, 64])
    assert GenerationConfig.from_pretrained(str(tmp_path / "hf")).suppress_tokens == [500, 501, 502, 503]
    final_val = json.loads((run / "summary.json").read_text())["final_val_loss"]
    assert record["passed"] and record["parity"]["tokens"] == 8 * 64
    assert record["parity"]["loss_export"] == pytest.approx(final_val, abs=1e-5)


def test_a_resume_with_another_multiple_is_refused(run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    out = train(copy, *FAST, "model.make_vocab_size_divisible_by=16")  # completed: not reported as done
    assert out.returncode == 2 and "already completed with another config" in out.stderr, out.stderr[-2000:]
    assert "model.make_vocab_size_divisible_by: 8 -> 16" in out.stderr
    (copy / "summary.json").unlink()  # as if preempted after its last checkpoint
    out = train(copy, *FAST, "model.make_vocab_size_divisible_by=16")
    assert out.returncode == 2, out.stderr[-2000:]
    assert (
        "the config differs from the checkpoint's; refusing to resume:\n  model.make_vocab_size_divisible_by: 8 -> 16\n"
        in out.stderr
    )


def test_weights_from_a_run_padded_otherwise_are_refused_naming_the_key(run, tmp_path):
    out = train(tmp_path / "ft", *FAST, "model.make_vocab_size_divisible_by=128", f"checkpoint.init_from={run}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "the source's vocabulary is padded to 504 rows, this run's to 512" in out.stderr
    assert "model.make_vocab_size_divisible_by (128)" in out.stderr


def test_a_checkpoint_recorded_before_the_key_existed_resumes_at_128(tmp_path):
    """A run recorded before model.make_vocab_size_divisible_by existed ran with 128 (the rule was
    fixed): its checkpoints resume with the default, and are refused with another value."""
    import yaml

    run = tmp_path / "run"
    default = [o for o in FAST if not o.startswith("model.make_vocab")]
    assert train(run, *default).returncode == 0
    records = [run / "config.yaml", *(run / "checkpoints").glob("step_*/common.json")]
    assert len(records) >= 2
    for path in records:
        if path.suffix == ".json":
            common = json.loads(path.read_text())
            assert common["config"]["model"].pop("make_vocab_size_divisible_by") == 128
            path.write_text(json.dumps(common))
        else:
            config = yaml.safe_load(path.read_text())
            assert config["model"].pop("make_vocab_size_divisible_by") == 128
            path.write_text(yaml.safe_dump(config))
    out = train(run, *default)
    assert out.returncode == 0 and "already completed" in out.stdout, out.stderr[-2000:]
    (run / "summary.json").unlink()
    out = train(run, *default)
    assert out.returncode == 0 and "resumed from" in out.stderr + out.stdout, out.stderr[-2000:]
    (run / "summary.json").unlink()
    out = train(run, *default, "model.make_vocab_size_divisible_by=8")
    assert out.returncode == 2 and "model.make_vocab_size_divisible_by: 128 -> 8" in out.stderr, out.stderr[-2000:]

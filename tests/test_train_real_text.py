"""A tiny CPU run on real tokenized English text (through data_prep) lowers the validation loss.

The text is CPython's own documentation prose (``pydoc_data.topics``), present on every
Python install, so the test needs no download.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY


@pytest.fixture(scope="module")
def manifest_dir(tmp_path_factory):
    from pydoc_data.topics import topics

    from data_prep.api import build_from_texts

    out = tmp_path_factory.mktemp("pydoc_data")
    texts = [t for t in topics.values() if len(t) > 500]
    build_from_texts(texts, out, vocab_size=512, workers=1, valid_fraction=0.1)
    return out


def test_training_on_data_prep_output_lowers_validation_loss(manifest_dir, tmp_path):
    manifest = json.loads((manifest_dir / "manifest.json").read_text())
    assert manifest["train"]["tokens"] > 50_000 and manifest["valid"]["tokens"] > 5_000
    run = tmp_path / "run"
    cmd = [
        sys.executable,
        "train_gpt.py",
        "--config",
        str(TINY),
        f"run.dir={run}",
        "data.mock=false",
        f"data.manifest={manifest_dir}",
        "model.vocab_size=null",
        "training.steps=60",
        "eval.at=[0.05,1.0]",
        "eval.batches=4",
        "optimizer.lr=0.01",
        "logging.progress_bar=false",
        "checkpoint.final=false",
    ]
    out = subprocess.run(
        cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    first, last = summary["evals"][0]["val_loss"], summary["evals"][-1]["val_loss"]
    assert summary["evals"][0]["step"] == 3
    assert last < first - 0.5, (first, last)
    assert last < math.log(512) - 1.0  # well below a uniform guess over the vocabulary
    table = json.loads((run / "parametrization.json").read_text())
    assert any(r["name"] == "embedding.word_embeddings.weight" and r["shape"] == [512, 64] for r in table["params"])


def _train(run, manifest, *extra, check=True):
    cmd = [
        sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run}", "data.mock=false",
        f"data.manifest={manifest}", "model.vocab_size=null", "training.steps=12", "eval.at=[1.0]", "eval.batches=2",
        "checkpoint.interval=8", "checkpoint.final=false", "logging.interval=1", "logging.progress_bar=false", *extra,
    ]  # fmt: skip
    out = subprocess.run(
        cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    if check:
        assert out.returncode == 0, out.stderr[-3000:]
    return out


def _losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["kind"] == "train"]


def test_a_run_resumes_after_its_data_moved_and_refuses_other_data(manifest_dir, tmp_path):
    """Run dir and data moved together (a study directory copied to another machine): the
    resume from step 8 accepts the new data path because the files are the checkpoint's
    (training.data.data_identity) and gives the uninterrupted run's losses; the same move onto
    other files (train and valid swapped) is refused, naming the key and the files."""
    import shutil

    _train(tmp_path / "ref", manifest_dir)
    a = tmp_path / "a"
    shutil.copytree(manifest_dir, a / "data")
    _train(a / "run", a / "data")
    (a / "run" / "summary.json").unlink()  # as if preempted after the step-8 checkpoint
    shutil.copytree(a, tmp_path / "c")
    b = a.rename(tmp_path / "b")
    out = _train(b / "run", b / "data")
    assert "resumed from" in out.stderr and "the data moved (data.manifest)" in out.stderr
    assert _losses(b / "run") == _losses(tmp_path / "ref")

    c = tmp_path / "c"
    manifest = json.loads((c / "data" / "manifest.json").read_text())
    manifest["train"], manifest["valid"] = manifest["valid"], manifest["train"]
    (c / "other").mkdir()
    for f in (c / "data").iterdir():
        if f.is_file():
            shutil.copy(f, c / "other" / f.name)
    (c / "other" / "manifest.json").write_text(json.dumps(manifest))
    out = _train(c / "run", c / "other", check=False)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "refusing to resume" in out.stderr and f"data.manifest: '{a / 'data'}' -> '{c / 'other'}'" in out.stderr
    assert "the data moved and its files are not the checkpoint's" in out.stderr


def test_a_checkpoint_without_a_data_record_refuses_a_moved_data_path():
    """Checkpoints written before the data identity existed cannot tell a moved copy from other
    data: the move is refused and the message says why; unmoved, they resume as before."""
    from training.session import SetupError, check_resumable

    config = {"data": {"manifest": "/x/data"}, "model": {"hidden_size": 64}}
    common = {"parametrization": {"params": []}, "config": config}
    table = {"params": []}
    check_resumable(common, Path("ckpt"), table, config, {"tokenizer": "t"})
    moved = {"data": {"manifest": "/y/data"}, "model": {"hidden_size": 64}}
    with pytest.raises(SetupError, match="predates the record of what its data is"):
        check_resumable(common, Path("ckpt"), table, moved, {"tokenizer": "t"})
    check_resumable({**common, "data": {"tokenizer": "t"}}, Path("ckpt"), table, moved, {"tokenizer": "t"})


def test_a_refused_resume_names_the_changed_key_before_the_table_it_changes():
    """model.num_layers 4 -> 6 changes 100+ rows of the resolved table: the refusal names the
    config key; a table that differs under the same config (the presets' code changed) is
    listed field by field, capped, never as whole rows."""
    from training.session import MAX_SHOWN, SetupError, check_resumable

    old_table = {"preset": "depth_mup", "roles": {"hidden_in": {"lr_factor": 0.5, "init_std": 0.02}}, "params": [
        {"name": f"decoder.layers.{i}.mlp.linear_fc1.weight", "role": "hidden_in", "lr_factor": 0.5} for i in range(30)
    ]}  # fmt: skip
    new_table = json.loads(json.dumps(old_table).replace("0.5", "0.25"))
    config = {"model": {"num_layers": 4}}
    with pytest.raises(SetupError) as err:
        check_resumable({"parametrization": old_table, "config": config}, Path("ckpt"), new_table,
                        {"model": {"num_layers": 6}}, {})  # fmt: skip
    assert str(err.value).splitlines()[1:] == [
        "  model.num_layers: 4 -> 6",
        "  (the resolved parametrization differs with them: 31 entries)",
    ]
    with pytest.raises(SetupError) as err:
        check_resumable({"parametrization": old_table, "config": config}, Path("ckpt"), new_table, config, {})
    lines = str(err.value).splitlines()
    assert "the resolved parametrization differs" in lines[0]
    assert lines[1:3] == [
        "  roles.hidden_in.lr_factor: 0.5 -> 0.25",
        "  params[decoder.layers.0.mlp.linear_fc1.weight].lr_factor: 0.5 -> 0.25",
    ]
    assert len(lines) == 1 + MAX_SHOWN + 1 and lines[-1] == f"  ... and {31 - MAX_SHOWN} more"

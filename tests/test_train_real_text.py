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

"""End to end on real text: data_prep -> train -> export (with the SentencePiece tokenizer) ->
lm-evaluation-harness, and lm-eval's log-likelihoods equal the megatron model's own.

The reference side never touches transformers or lm-eval: the run's SentencePiece model
encodes (context, continuation) the way lm-eval's ``hf`` backend splits a pair, and the
patched megatron model, loaded from the same checkpoint, scores the continuation tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from eval.__main__ import main
from tests.conftest import REPO, TINY


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from pydoc_data.topics import topics

    from data_prep.api import build_from_texts

    base = tmp_path_factory.mktemp("lm_eval")
    texts = [t for t in topics.values() if len(t) > 500]
    build_from_texts(texts, base / "data", vocab_size=512, workers=1, valid_fraction=0.1)
    run = base / "run"
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run}", "data.mock=false"]
    cmd += [f"data.manifest={base / 'data'}", "model.vocab_size=null", "training.steps=30", "optimizer.lr=0.01"]
    cmd += ["logging.progress_bar=false", "eval.at=[1.0]"]
    out = subprocess.run(
        cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return run


def encode_pair(tok, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """lm-eval's split of a request: trailing spaces move to the continuation; the
    continuation's ids are the whole string's ids after the context's."""
    n = len(context) - len(context.rstrip())
    if n:
        continuation, context = context[-n:] + continuation, context[:-n]
    whole, ctx = tok.encode(context + continuation), tok.encode(context)
    return ctx, whole[len(ctx) :]


def megatron_loglik(model, ctx: list[int], cont: list[int], seq: int) -> float:
    ids = (ctx + cont)[-(seq + 1) :][:-1]  # left-truncated to the context window, as lm-eval does
    tokens = torch.tensor([ids])
    positions = torch.arange(len(ids)).unsqueeze(0)
    with torch.no_grad():
        logp = torch.log_softmax(model(tokens, positions, None).double(), -1)[0]
    targets = cont
    rows = logp[len(ids) - len(targets) :]
    return float(rows.gather(-1, torch.tensor(targets).unsqueeze(-1)).sum())


def test_lm_eval_scores_the_exported_model_as_megatron_would(run_dir, megatron):
    from transformers import AutoTokenizer

    from data_prep.tokenizer import load_tokenizer
    from training.checkpoint import find_checkpoint, load_model_weights
    from training.export_hf import read_run_config

    args = ["lm-eval", str(run_dir), "--tasks", "pydoc_continuation", "--limit", "8", "--log-samples"]
    assert main(args) == 0
    result = json.loads((run_dir / "lm_eval.json").read_text())
    scores = result["tasks"]["pydoc_continuation"]
    assert result["n_samples"]["pydoc_continuation"] == 8 and 0.0 <= scores["acc"] <= 1.0
    assert result["checkpoint"] == "step_00000030"
    assert result["higher_is_better"] == {"pydoc_continuation": {"acc": True, "acc_norm": True}}  # eval transfer's

    export = json.loads((run_dir / "hf" / "export.json").read_text())
    assert export["passed"] and export["tokenizer"]["type"] == "sentencepiece"
    tp = export["tokenizer"]["parity"]
    assert tp["texts"] >= 30 and tp["identical_ids"] == tp["texts"] == tp["identical_decode"]
    hf_tok = AutoTokenizer.from_pretrained(str(run_dir / "hf"))
    assert hf_tok.eos_token_id == export["vocab"]["eod_id"]

    cfg = read_run_config(run_dir)
    manifest = json.loads((cfg_manifest := REPO / cfg.data.manifest / "manifest.json").read_text())
    tok = load_tokenizer(cfg_manifest.parent / manifest["tokenizer"]["path"])
    rows = [json.loads(line) for line in (run_dir / "lm_eval_samples.jsonl").read_text().splitlines()]
    assert len(rows) == 8 * 4
    model = load_model_weights(cfg, find_checkpoint(run_dir))
    for row in rows[:12]:
        ctx, cont = encode_pair(tok, row["context"], row["continuation"])
        ours = megatron_loglik(model, ctx, cont, cfg.model.seq_length)
        assert row["loglikelihood"] == pytest.approx(ours, abs=2e-3), row
    picked = {}
    for row in rows:
        picked.setdefault(row["item"], []).append((row["loglikelihood"], row["choice"], row["target"]))
    acc = sum(max(v)[1] == v[0][2] for v in picked.values()) / len(picked)
    assert scores["acc"] == pytest.approx(acc)

    stamp = (run_dir / "hf" / "export.json").stat().st_mtime_ns
    assert main(args) == 0  # the export of the same checkpoint is reused
    assert (run_dir / "hf" / "export.json").stat().st_mtime_ns == stamp


def test_lm_eval_refuses_what_is_not_a_run_or_export(tmp_path, capsys):
    assert main(["lm-eval", str(tmp_path), "--tasks", "pydoc_continuation"]) == 2
    assert capsys.readouterr().err == (  # the path once (it was printed twice)
        f"error: {tmp_path}: neither a run directory (config.yaml) nor an export folder (export.json)\n"
    )


def test_lm_eval_step_without_a_checkpoint_names_the_steps_that_have_one(run_dir, capsys):
    # the run saved only its final checkpoint (step 30): --step 7 is refused, exit 2, in one line
    assert main(["lm-eval", str(run_dir), "--step", "7", "--tasks", "pydoc_continuation"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {run_dir}: no checkpoint at step 7 in {run_dir / 'checkpoints'}; steps with one: 30\n"
    assert "Traceback" not in err


def test_a_request_without_context_starts_after_the_end_of_document_token(run_dir, megatron):
    """lm-eval scores a text without a context (loglikelihood_rolling: wikitext-style perplexity)
    after the tokenizer's BOS. The model saw every document after EOD and never saw "<s>": the
    export's BOS is EOD, and lm-eval's score equals megatron's for [EOD] + the text."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from data_prep.tokenizer import load_tokenizer
    from training.checkpoint import find_checkpoint, load_model_weights
    from training.export_hf import read_run_config

    assert main(["lm-eval", str(run_dir), "--tasks", "pydoc_continuation", "--limit", "1"]) == 0  # exports
    cfg = read_run_config(run_dir)
    manifest = json.loads((REPO / cfg.data.manifest / "manifest.json").read_text())
    tok = load_tokenizer(REPO / cfg.data.manifest / manifest["tokenizer"]["path"])
    lm = HFLM(pretrained=str(run_dir / "hf"), dtype="float32", batch_size=1, device="cpu")
    assert (lm.prefix_token_id, tok.eod, tok.bos) == (2, 2, 1)
    texts = ["The with statement wraps a block.", "Class definitions create a class object."]
    requests = [Instance("loglikelihood_rolling", {}, (t,), i) for i, t in enumerate(texts)]
    scores = lm.loglikelihood_rolling(requests, disable_tqdm=True)
    model = load_model_weights(cfg, find_checkpoint(run_dir))
    for text, score in zip(texts, scores):
        ids = tok.encode(text)
        assert score == pytest.approx(megatron_loglik(model, [tok.eod], ids, cfg.model.seq_length), abs=1e-3)


def test_the_summary_line_names_each_task_s_own_metrics():
    """A perplexity task has no acc: its line said "acc nan ± nan"; it gives the task's metrics."""
    from eval.lm_eval_cmd import summary_line

    tasks = {
        "pydoc_ppl": {"sample_len": 3, "word_perplexity": 2548432875.85, "bits_per_byte": 3.64548},
        "pydoc_continuation": {"sample_len": 10, "acc": 0.4, "acc_stderr": 0.163299, "acc_norm": 0.3},
    }
    assert summary_line(tasks) == (
        "pydoc_ppl word_perplexity 2.548e+09, bits_per_byte 3.645; pydoc_continuation acc 0.4 ± 0.1633, acc_norm 0.3"
    )


def test_an_export_of_an_older_format_is_redone(tmp_path, monkeypatch):
    """An export written before the tokenizer fix (format 1: BOS "<s>", "</s>" in text read as
    EOD) of the checkpoint asked for was reused as it was; it is exported again, once."""
    import eval.lm_eval_cmd as cmd
    from training.export_hf import EXPORT_FORMAT_VERSION

    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000030").mkdir(parents=True)
    (run / "checkpoints" / "step_00000030" / "common.json").write_text('{"step": 30}')
    (run / "checkpoints" / "latest").write_text("step_00000030\n")
    (run / "config.yaml").write_text("{}\n")
    (run / "hf").mkdir()
    exported = []

    def fake_export(target, folder, step):
        exported.append((target, folder, step))
        record = {"format_version": EXPORT_FORMAT_VERSION, "checkpoint": "step_00000030"}
        (folder / "export.json").write_text(json.dumps(record))

    monkeypatch.setattr(cmd, "export", fake_export)
    (run / "hf" / "export.json").write_text(json.dumps({"format_version": 1, "checkpoint": "step_00000030"}))
    assert EXPORT_FORMAT_VERSION == 2
    assert cmd.model_folder(run, None) == (run / "hf", run) and exported == [(run, run / "hf", None)]
    assert cmd.model_folder(run, None) == (run / "hf", run) and len(exported) == 1  # now current: reused

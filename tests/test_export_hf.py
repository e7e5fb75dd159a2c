"""training.export_hf: trained checkpoints -> stock GPT-2 / Llama that compute the same logits.

Runs are trained by train_gpt.py in subprocesses (a few steps at a high LR, so biases and
norms move away from their init) at a non-base shape: width 128 over base 64 (m_d = 2),
depth 4 over base 2 (m_L = 2). Every multiplier a preset has is then != 1. The default run
covers each preset once, both layouts and TP = 2; ``-m slow`` runs the full matrix.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from runconfig import dump_yaml
from tests.conftest import REPO, TINY, env, free_port, tiny_config
from training.export_hf import LOGIT_RTOL, LOSS_ATOL, export, main
from training.hf_layout import ExportError

SHAPE = [
    "model.hidden_size=128",
    "model.num_layers=4",
    "parametrization.base_num_layers=2",
    "parametrization.base_head_dim=16",
]
FAST = ["training.steps=2", "scheduler.warmup_steps=1", "optimizer.lr=0.02", "logging.progress_bar=false"]
LAYOUTS = {
    "gpt2": [],
    "llama": [
        "model.normalization=RMSNorm",
        "model.position_embedding_type=rope",
        "model.activation=swiglu",
        "model.num_query_groups=2",
    ],
}
ARCH = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}
DEFAULT_CASES = [("sp", "gpt2", 1), ("mup", "llama", 1), ("depth_mup", "gpt2", 2), ("ode", "llama", 2)]
ALL_CASES = [(p, layout, tp) for p in ("sp", "mup", "depth_mup", "ode") for layout in LAYOUTS for tp in (1, 2)]
SLOW_CASES = [c for c in ALL_CASES if c not in DEFAULT_CASES]


def train(run_dir: Path, overrides: list[str], tp: int = 1) -> Path:
    args = ["train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *overrides]
    if tp > 1:
        args += [f"parallel.tensor_model_parallel_size={tp}"]
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(tp),
            "--master-port",
            str(free_port()),
        ]
        cmd += args
    else:
        cmd = [sys.executable, *args]
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return run_dir


def case_overrides(preset: str, layout: str) -> list[str]:
    return [f"parametrization.preset={preset}", *SHAPE, *FAST, *LAYOUTS[layout]]


def check_export(run_dir: Path, out: Path, layout: str, preset: str, weights_only: bool = True) -> dict:
    """``weights_only``: the runs here train on mock data, which has no tokenizer to export."""
    from transformers import AutoModelForCausalLM

    record = export(run_dir, out, weights_only=weights_only)
    assert record["layout"] == layout and record["preset"] == preset
    p = record["parity"]
    assert p["max_rel_logit_diff"] <= LOGIT_RTOL and p["loss_diff"] <= LOSS_ATOL, p
    assert p["tokens"] >= 8 * 64 - 8 and record["passed"]
    model = AutoModelForCausalLM.from_pretrained(str(out))  # stock class, no custom code
    assert type(model).__name__ == ARCH[layout]
    return record


def expected_folds(preset: str) -> dict:
    """Hand values at m_d = 2, m_L = 2, head dim d = 32 over base d0 = 16."""
    branch = {"sp": 1.0, "mup": 1.0, "depth_mup": 2**-0.5, "ode": 0.5}[preset]
    logit = 1.0 if preset == "sp" else 0.5  # muP output multiplier 1 / m_d
    # muP softmax scale sqrt(d0)/d = 4/32; the HF models use 1/sqrt(32): the query rows carry the ratio
    query = 1.0 if preset == "sp" else (4.0 / 32.0) * 32**0.5
    return {"branch": branch, "query": query, "logit": logit, "embedding": 1.0}


@pytest.mark.parametrize("preset,layout,tp", DEFAULT_CASES)
def test_export_matches_megatron(tmp_path, megatron, preset, layout, tp):
    run = train(tmp_path / "run", case_overrides(preset, layout), tp)
    record = check_export(run, tmp_path / "hf", layout, preset)
    assert record["folds"] == pytest.approx(expected_folds(preset))
    assert record["tokenizer"] is None  # mock data has no tokenizer


@pytest.mark.slow
@pytest.mark.parametrize("preset,layout,tp", SLOW_CASES)
def test_export_matches_megatron_full_matrix(tmp_path, megatron, preset, layout, tp):
    run = train(tmp_path / "run", case_overrides(preset, layout), tp)
    check_export(run, tmp_path / "hf", layout, preset)


def test_an_unfolded_multiplier_fails_parity(tmp_path, megatron, monkeypatch):
    """The parity check can fail: export depth-muP without its branch multiplier."""
    import training.export_hf as export_hf

    run = train(tmp_path / "run", case_overrides("depth_mup", "gpt2"))
    assert export(run, tmp_path / "good", weights_only=True)["passed"]
    real = export_hf.folds
    monkeypatch.setattr(export_hf, "folds", lambda cfg, r: dataclasses.replace(real(cfg, r), branch=1.0))
    assert main([str(run), "--out", str(tmp_path / "bad"), "--weights-only"]) == 1
    bad = json.loads((tmp_path / "bad" / "export.json").read_text())
    assert not bad["passed"] and bad["parity"]["max_rel_logit_diff"] > 100 * LOGIT_RTOL


def test_a_run_without_a_tokenizer_exports_only_with_weights_only(tmp_path, megatron, capsys):
    """Mock data has no tokenizer: the export refuses (exit 2, saying why) unless --weights-only;
    lm-eval then refuses that export with a message, not an assertion inside transformers."""
    from eval.__main__ import main as eval_main

    run = train(tmp_path / "run", FAST)
    assert main([str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "trained on mock data (data.mock=true): there is no tokenizer to export" in err and "--weights-only" in err
    assert not (tmp_path / "hf").exists()
    assert main([str(run), "--out", str(tmp_path / "hf"), "--weights-only"]) == 0
    record = json.loads((tmp_path / "hf" / "export.json").read_text())
    assert record["passed"] and record["weights_only"] and record["tokenizer"] is None
    assert not (tmp_path / "hf" / "tokenizer.json").exists()
    capsys.readouterr()
    assert eval_main(["lm-eval", str(tmp_path / "hf"), "--tasks", "pydoc_continuation"]) == 2
    assert "exported without a tokenizer" in capsys.readouterr().err
    assert eval_main(["lm-eval", str(run), "--tasks", "pydoc_continuation"]) == 2  # a run dir: exported first
    # one path, and no word of export's --weights-only, which lm-eval has not and which could not help
    assert capsys.readouterr().err == (
        f"error: {run}: trained on mock data (data.mock=true): there is no tokenizer to export; "
        "lm-eval scores text through the run's tokenizer\n"
    )


def config_only_run(tmp_path: Path, *overrides: str) -> Path:
    run = tmp_path / "cfg_run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_yaml(tiny_config(*overrides)))
    return run


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["model.block=linear1"], "model.block"),
        (["model.normalization=RMSNorm"], "model.normalization"),
        (["model.position_embedding_type=rope"], "model.normalization"),
        (["model.num_query_groups=2"], "model.num_query_groups"),
        (
            ["model.untie_embeddings_and_output_weights=false", "model.hidden_size=128", "parametrization.preset=mup"],
            "model.untie_embeddings_and_output_weights",
        ),
        (["parametrization.embedding_multiplier=2", "model.untie_embeddings_and_output_weights=false"], "embedding"),
    ],
)
def test_unexportable_configs_name_the_key(tmp_path, overrides, key):
    run = config_only_run(tmp_path, *overrides)
    with pytest.raises(ExportError, match=key.replace(".", r"\.")):
        export(run, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_tied_embeddings_at_the_base_width_export(tmp_path, megatron):
    run = train(tmp_path / "run", ["model.untie_embeddings_and_output_weights=false", *FAST])
    record = check_export(run, tmp_path / "hf", "gpt2", "depth_mup")
    assert record["folds"]["logit"] == 1.0


def test_out_must_be_an_export_folder(tmp_path):
    run = config_only_run(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert main([str(run), "--out", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_step_without_a_checkpoint_lists_the_steps_kept(tmp_path, capsys):
    run = config_only_run(tmp_path)
    kept = run / "checkpoints" / "step_00000040"
    kept.mkdir(parents=True)
    (kept / "common.json").write_text(json.dumps({"step": 40}))
    (run / "checkpoints" / "latest").write_text("step_00000040\n")
    assert main([str(run), "--out", str(tmp_path / "hf"), "--step", "20"]) == 2
    err = capsys.readouterr().err
    assert "no checkpoint at step 20" in err and "steps with one: 40" in err
    assert not (tmp_path / "hf").exists()


def test_hugging_face_tokenizer_json_is_exported_as_is(tmp_path, megatron):
    """A run whose data_prep used a tokenizer.json: the export carries it; ids identical."""
    from pydoc_data.topics import topics

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from data_prep.api import build_from_texts

    texts = [t for t in topics.values() if len(t) > 500]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    data = tmp_path / "data"
    build_from_texts(
        texts, data, workers=1, valid_fraction=0.1, overrides=[f"tokenizer.path={tmp_path / 'tokenizer.json'}"]
    )
    run = train(tmp_path / "run", ["data.mock=false", f"data.manifest={data}", "model.vocab_size=null", *FAST])
    record = check_export(run, tmp_path / "hf", "gpt2", "depth_mup", weights_only=False)
    assert record["tokenizer"]["type"] == "huggingface" and record["tokenizer"]["eos_token"] == "<|endoftext|>"
    parity = record["tokenizer"]["parity"]
    assert parity["texts"] >= 30 and parity["identical_ids"] == parity["texts"] == parity["identical_decode"]
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert exported.eos_token_id == tok.token_to_id("<|endoftext|>") == record["vocab"]["eod_id"]
    assert exported.model_max_length == 64 == record["tokenizer"]["model_max_length"]  # model.seq_length
    # 600 ids padded to 640 rows: the padding logits stay (the parity loss above is over them), and
    # generate() never emits one: planted as the next token's argmax, it is emitted only unsuppressed
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "hf"))
    prompt = exported("def f(x):", return_tensors="pt")
    with torch.no_grad():
        last = model(**prompt, output_hidden_states=True).hidden_states[-1][0, -1]
        model.lm_head.weight[620] = 1e3 * last / last.norm()
    unsuppressed = model.generate(**prompt, max_new_tokens=1, do_sample=False, suppress_tokens=[])
    generated = model.generate(**prompt, max_new_tokens=1, do_sample=False)
    assert unsuppressed[0, -1] == 620 and generated[0, -1] < 600
    assert model.generation_config.suppress_tokens == list(range(600, 640))
    assert record["vocab"] == {"tokenizer": 600, "rows": 640, "eod_id": 0, "suppressed_in_generation": 40}
    # The tokenizer file changed after the data was made (here: trained to another size): refused.
    other = Tokenizer(models.BPE())
    other.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    other.train_from_iterator(texts[:20], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"]))
    other.save(str(data / "tokenizer.json"))
    with pytest.raises(ExportError, match=r"tokenizer.json: sha256 .* is not the manifest's .*--weights-only"):
        export(run, tmp_path / "hf2")
    (data / "tokenizer.json").unlink()
    with pytest.raises(ExportError, match=r"tokenizer.json: the run's tokenizer file does not exist"):
        export(run, tmp_path / "hf2")
    assert not (tmp_path / "hf2").exists()


def test_gpu_dist_checkpoint_exports(tmp_path, megatron, monkeypatch):
    """A run whose checkpoint is the GPU path's dist_checkpointing folder (written here from a
    trained CPU run's weights, as tests/test_eval_diversity.py does): same export, same parity."""
    import shutil

    import torch
    from megatron.core import dist_checkpointing

    from training.checkpoint import find_checkpoint, load_model_weights, one_process_config
    from training.export_hf import read_run_config

    src = train(tmp_path / "src", case_overrides("ode", "llama"))
    cfg = one_process_config(read_run_config(src))
    model = load_model_weights(cfg, find_checkpoint(src))
    run = tmp_path / "gpu_run"
    step = run / "checkpoints" / "step_00000002"
    (step / "dist").mkdir(parents=True)
    shutil.copy(src / "config.yaml", run / "config.yaml")
    common = json.loads((find_checkpoint(src).path / "common.json").read_text())
    (step / "common.json").write_text(json.dumps({**common, "layout": {"tp": 2, "pp": 1, "dp": 1}}))
    (run / "checkpoints" / "latest").write_text("step_00000002\n")
    # megatron's saver synchronizes CUDA unconditionally; on a CPU-only torch those calls are stubbed here
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    dist_checkpointing.save({"model": model.sharded_state_dict()}, str(step / "dist"))
    monkeypatch.undo()
    record = check_export(run, tmp_path / "hf", "llama", "ode")
    assert record["checkpoint_format"] == "dist"
    baseline = export(src, tmp_path / "hf_cpu", weights_only=True)
    assert record["parity"]["loss_megatron"] == pytest.approx(baseline["parity"]["loss_megatron"], abs=1e-6)


def test_tokenizer_parity_on_documents_longer_than_the_model_warns_of_nothing(tmp_path, capfd):
    """The parity check encodes whole held-out documents, longer than model.seq_length on
    purpose: transformers' "will result in indexing errors" warning would be a false alarm on
    every export and lm-eval."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from training.hf_tokenizer import encoding_parity

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["a b c d"] * 4, trainers.BpeTrainer(vocab_size=30))
    PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=8).save_pretrained(str(tmp_path))

    class Ours:
        def encode(self, text):
            return tok.encode(text).ids

    texts = ["a b c d " * 10]
    assert len(Ours().encode(texts[0])) == 40 > 8
    record = encoding_parity(Ours(), tmp_path, texts)
    assert record["identical_ids"] == 1
    assert "indexing errors" not in "".join(capfd.readouterr())


@pytest.fixture(scope="module")
def sp_tokenizer(tmp_path_factory):
    """A SentencePiece BPE model as data_prep trains it (control pieces <unk>=0, <s>=1, </s>=2)."""
    from data_prep.config import TokenizerConfig
    from data_prep.tokenizer import load_tokenizer, train_sentencepiece
    from tests.data_prep_fixtures import english_doc

    path = tmp_path_factory.mktemp("sp") / "tokenizer.model"
    train_sentencepiece([english_doc(i) for i in range(40)], path, TokenizerConfig(vocab_size=400, train_threads=1))
    return path, load_tokenizer(path)


SPECIAL_TEXTS = ["a </s> b", "x<s>y", "<unk>", "code: if a<s>b: print('</s>')"]


def test_sentencepiece_export_encodes_special_token_strings_as_text(tmp_path, sp_tokenizer):
    """data_prep's SentencePiece encodes the text "</s>" as characters, never as the EOD id: the
    exported tokenizer must too (it matched "<s>", "</s>", "<unk>" in text as the control ids 1, 2, 0,
    ids the model never saw there), and its BOS is the document boundary the model trained on
    (EOD, id 2), not "<s>" (id 1), which no training sequence holds: lm-eval prefixes that id to
    every empty-context request."""
    from transformers import AutoTokenizer

    from training.hf_tokenizer import encoding_parity, export_tokenizer

    path, ours = sp_tokenizer
    record = export_tokenizer(path, ours.eod, tmp_path, 64)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path))
    for text in SPECIAL_TEXTS:
        ids = theirs.encode(text, add_special_tokens=False)
        assert ids == ours.encode(text), text
        assert not {0, 1, 2} & set(ids)
        assert theirs.decode(ids) == text
    assert theirs("a </s> b")["input_ids"] == ours.encode("a </s> b")  # add_special_tokens adds nothing
    assert (theirs.bos_token_id, theirs.eos_token_id, ours.eod, ours.bos) == (2, 2, 2, 1)
    assert record["bos_token"] == record["eos_token"] == "</s>"
    # the parity check probes every special token's string, so a tokenizer that reads them as
    # control ids fails it even when no held-out document holds one
    parity = encoding_parity(ours, tmp_path, ["plain text"])
    assert parity["texts"] == parity["identical_ids"] == parity["identical_decode"] > 1
    theirs.split_special_tokens = False
    theirs.save_pretrained(str(tmp_path / "matching"))
    bad = encoding_parity(ours, tmp_path / "matching", ["plain text"])
    assert bad["identical_ids"] == 1 < bad["texts"] and "</s>" in bad["first_difference"]["text"]


def test_a_tokenizer_json_that_adds_a_bos_is_exported_adding_nothing(tmp_path):
    """A Llama-style tokenizer.json whose post-processor puts "<s>" (id 3) before every text:
    data_prep encodes without it, so no training sequence holds id 3, but transformers encodes with
    add_special_tokens=True by default: the export drops that post-processor (before: "a b" gave
    [3, 0, 1]), and the parity check counts the default encoding (an export that kept it: 0 of 4)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import AutoTokenizer

    from data_prep.tokenizer import load_tokenizer
    from training.hf_tokenizer import encoding_parity, export_tokenizer

    tok = Tokenizer(models.WordLevel({"a": 0, "b": 1, "</s>": 2, "<s>": 3}, unk_token="a"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(["</s>", "<s>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 3)])
    tok.save(str(tmp_path / "tokenizer.json"))
    ours = load_tokenizer(tmp_path / "tokenizer.json")
    assert (ours.encode("a b"), ours.eod, tok.encode("a b").ids) == ([0, 1], 2, [3, 0, 1])
    record = export_tokenizer(tmp_path / "tokenizer.json", ours.eod, tmp_path / "hf", 64)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    assert theirs("a b")["input_ids"] == [0, 1] == theirs.encode("b a")[::-1]
    assert record["dropped_post_processor"] == "TemplateProcessing"
    assert (theirs.bos_token_id, theirs.eos_token_id) == (2, 2)  # BOS is EOD, as the data has it
    parity = encoding_parity(ours, tmp_path / "hf", ["a b", "b b a"])
    assert parity["texts"] == parity["identical_ids"] == 4  # 2 texts, a probe each of "</s>" and "<s>"
    kept = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    theirs._tokenizer.post_processor = kept.post_processor
    theirs.save_pretrained(str(tmp_path / "kept"))
    bad = encoding_parity(ours, tmp_path / "kept", ["a b", "b b a"])
    assert bad["identical_ids"] == 0 and bad["first_difference"]["export"] == [3, 0, 1]


def test_exported_config_starts_documents_with_the_end_of_document_token(tmp_path):
    from training.export_hf import read_run_config
    from training.hf_layout import hf_config

    for layout, overrides in LAYOUTS.items():
        (tmp_path / layout).mkdir()
        cfg = read_run_config(config_only_run(tmp_path / layout, *overrides))
        config = hf_config(layout, cfg, 512, 7)
        assert (config.bos_token_id, config.eos_token_id, config.architectures) == (7, 7, [ARCH[layout]])


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_padded_batch_gives_each_text_its_unpadded_logits(tmp_path, sp_tokenizer, layout):
    """The export pads with EOD (the tokenizer's pad_token, the config's pad_token_id): a batch
    of texts of different lengths, padded, gives each text the logits it gets alone, under both
    layouts (learned positions and RoPE). It had no pad token: ``tokenizer(batch, padding=True)``
    raised and lm-eval / generate() users had to pick one."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.export_hf import read_run_config
    from training.hf_layout import hf_config
    from training.hf_tokenizer import export_tokenizer

    path, ours = sp_tokenizer
    out = tmp_path / "hf"
    record = export_tokenizer(path, ours.eod, out, 64)
    cfg = read_run_config(config_only_run(tmp_path, *LAYOUTS[layout]))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(hf_config(layout, cfg, 512, ours.eod)).save_pretrained(str(out))
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tok = AutoTokenizer.from_pretrained(str(out))
    assert record["pad_token"] == tok.pad_token == "</s>" and tok.pad_token_id == model.config.pad_token_id == 2
    texts = ["The report was short.", "The second report of the year was a great deal longer than the first."]
    batch = tok(texts, padding=True, return_tensors="pt")
    lengths = [len(tok(t)["input_ids"]) for t in texts]
    assert lengths[0] < lengths[1] == batch["input_ids"].shape[1]
    assert batch["input_ids"][0, lengths[0] :].tolist() == [2] * (lengths[1] - lengths[0])  # right, with EOD
    with torch.no_grad():
        padded = model(**batch).logits
        for i, text in enumerate(texts):
            alone = model(**tok(text, return_tensors="pt")).logits[0]
            torch.testing.assert_close(padded[i, : lengths[i]], alone, rtol=1e-5, atol=1e-5)
    # generation pads on the left; transformers derives the positions from the attention mask
    tok.padding_side = "left"
    with torch.no_grad():
        together = model.generate(**tok(texts, padding=True, return_tensors="pt"), max_new_tokens=4, do_sample=False)
        for i, text in enumerate(texts):
            alone = model.generate(**tok(text, return_tensors="pt"), max_new_tokens=4, do_sample=False)
            assert together[i, -4:].tolist() == alone[0, -4:].tolist()


def diverged_run(tmp_path: Path, steps: tuple[int, ...]) -> Path:
    """A run that diverged at step 11 after keeping checkpoints at ``steps`` (folders only)."""
    run = config_only_run(tmp_path)
    summary = {"status": "diverged", "reason": "loss 10.71 above bound 9.238 at step 11", "exit_code": 3, "steps": 11}
    (run / "summary.json").write_text(json.dumps(summary))
    for step in steps:
        kept = run / "checkpoints" / f"step_{step:08d}"
        kept.mkdir(parents=True)
        (kept / "common.json").write_text(json.dumps({"step": step}))
        (run / "checkpoints" / "latest").write_text(f"step_{step:08d}\n")
    return run


def test_a_diverged_run_is_exported_only_at_a_step_asked_for(tmp_path, capsys):
    """A diverged run's latest checkpoint is from before it diverged: exporting it as the run's
    result (it exported step 10 of a run that diverged at step 11, exit 0, and lm-eval scored it)
    is refused, exit 2, naming summary.json, the reason and the steps kept; --step exports one."""
    from eval.__main__ import main as eval_main

    run = diverged_run(tmp_path, (8, 10))
    assert main([str(run), "--out", str(tmp_path / "hf")]) == 2
    message = (
        f"error: {run / 'summary.json'}: the run diverged (loss 10.71 above bound 9.238 at step 11); its "
        "checkpoints (steps 8, 10) are from before that: --step N exports one of them\n"
    )
    assert capsys.readouterr().err == message and not (tmp_path / "hf").exists()
    assert eval_main(["lm-eval", str(run), "--tasks", "pydoc_continuation"]) == 2
    assert capsys.readouterr().err == message
    # --step: past the check (this checkpoint folder holds no weights, so the load then refuses it)
    assert main([str(run), "--out", str(tmp_path / "hf"), "--step", "10"]) == 2
    assert "has neither model_tp0_pp0.pt" in capsys.readouterr().err
    (tmp_path / "early").mkdir()
    empty = diverged_run(tmp_path / "early", ())
    assert main([str(empty), "--out", str(tmp_path / "hf")]) == 2
    assert capsys.readouterr().err == (
        f"error: {empty / 'summary.json'}: the run diverged (loss 10.71 above bound 9.238 at step 11) "
        "before its first checkpoint: nothing to export\n"
    )


def test_a_normalizing_sentencepiece_model_is_refused_before_model_work_naming_weights_only(tmp_path, capsys):
    """A SentencePiece model that normalizes (nmt_nfkc, as many Megatron-LM users' models do) has
    no exact fast-tokenizer export: the export refused it only after building and saving the
    model, with no way out named; now it exits 2 before loading the checkpoint (an empty weights
    file here), naming the file, the normalization and --weights-only. lm-eval, which needs the
    tokenizer, names no --weights-only."""
    import io

    import sentencepiece as spm

    from eval.__main__ import main as eval_main
    from tests.data_prep_fixtures import english_doc

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter([english_doc(i) for i in range(40)]),
        model_writer=model,
        vocab_size=400,
        model_type="bpe",
        normalization_rule_name="nmt_nfkc",
        byte_fallback=True,
        num_threads=1,
    )
    path = tmp_path / "nfkc.model"
    path.write_bytes(model.getvalue())
    run = config_only_run(
        tmp_path, "data.mock=false", f"data.tokenizer={path}", "data.train_prefixes=[none]", "model.vocab_size=null"
    )
    (run / "checkpoints" / "step_00000002").mkdir(parents=True)
    (run / "checkpoints" / "step_00000002" / "common.json").write_text(json.dumps({"step": 2}))
    (run / "checkpoints" / "step_00000002" / "model_tp0_pp0.pt").write_bytes(b"")  # no weights in it
    (run / "checkpoints" / "latest").write_text("step_00000002\n")
    assert main([str(run), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {path}: normalization 'nmt_nfkc' (remove_extra_whitespaces=True) has no exact fast-tokenizer "
        "equivalent; data_prep trains with identity normalization; --weights-only exports the weights without a "
        "tokenizer\n"
    )
    assert not (tmp_path / "hf").exists() and not (tmp_path / "hf.partial").exists()
    assert main([str(run), "--out", str(tmp_path / "hf"), "--weights-only"]) == 2  # past the tokenizer: the load
    assert capsys.readouterr().err.startswith(f"error: cannot read {run / 'checkpoints' / 'step_00000002'}")
    assert eval_main(["lm-eval", str(run), "--tasks", "pydoc_continuation"]) == 2
    err = capsys.readouterr().err
    assert "normalization 'nmt_nfkc'" in err and "lm-eval scores text through the run's tokenizer" in err
    assert "--weights-only" not in err

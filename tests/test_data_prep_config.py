"""Config schema, shipped configs, and the command line (flag form, overrides, exit codes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.__main__ import main
from data_prep.api import load_data_prep_config
from data_prep.config import DataPrepConfig, fingerprint
from runconfig import ConfigError
from tests.data_prep_fixtures import english_doc, write_jsonl

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "data_prep").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load(path):
    cfg = load_data_prep_config(path)
    assert isinstance(cfg, DataPrepConfig) and cfg.input.paths


def test_gopher_full_config_enables_ngram_rules():
    cfg = load_data_prep_config(REPO / "configs" / "data_prep" / "gopher_full.yaml")
    assert cfg.clean.quality.top_ngram_max_char_fraction == [[2, 0.2], [3, 0.18], [4, 0.16]]
    assert len(cfg.clean.quality.duplicate_ngram_max_char_fraction) == 6


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["clean.quality.min_wordz=3"], "clean.quality.min_wordz"),
        (["input.format=html"], "input.format: must be one of"),
        (["clean.language.min_score=1.5"], "clean.language.min_score: must be in [0, 1]"),
        (["tokenizer.vocab_size=100"], "tokenizer.vocab_size: must be >= 260"),
        (["split.valid_fraction=abc"], "split.valid_fraction"),
        (["output.valid_prefix=train"], "output.valid_prefix: must differ"),
        (["clean.quality.top_ngram_max_char_fraction=[[2, 0.2, 1]]"], "each entry is [n, fraction]"),
        (["runtime.workers=-1"], "runtime.workers: must be >= 0"),
        (["input.paths=a.jsonl"], "input.paths: must be a list, got 'a.jsonl' (YAML: [a, b]; command line: input."),
    ],
)
def test_bad_values_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as info:
        load_data_prep_config(None, ["input.paths=[x.jsonl]", *overrides])
    assert message in str(info.value)


def test_input_paths_required():
    with pytest.raises(ConfigError, match="input.paths: give at least one"):
        load_data_prep_config(None, [])


def test_fingerprint_ignores_runtime_but_not_filters():
    a = load_data_prep_config(None, ["input.paths=[x]"])
    b = load_data_prep_config(None, ["input.paths=[x]", "runtime.workers=7", "errors.max_listed=3"])
    c = load_data_prep_config(None, ["input.paths=[x]", "clean.quality.min_words=10"])
    assert fingerprint(a.input, a.clean) == fingerprint(b.input, b.clean) != fingerprint(c.input, c.clean)


def test_cli_exit_2_on_config_errors(tmp_path, capsys):
    assert main(["--input", "x.jsonl", "clean.bogus=1"]) == 2
    assert "clean.bogus" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
    assert main(["--input", str(tmp_path / "*.jsonl"), "--output", str(tmp_path / "o")]) == 2
    assert "matches no file" in capsys.readouterr().err
    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    out = tmp_path / "never"
    assert main(["--input", str(tmp_path), "--output", str(out), "--tokenizer", str(tmp_path / "nope.model")]) == 2
    assert "tokenizer file not found" in capsys.readouterr().err and not out.exists()


def test_cli_flag_form_runs(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    write_jsonl(tmp_path / "in" / "a.jsonl.gz", [english_doc(i) for i in range(20)])
    argv = [
        *("--input", str(tmp_path / "in" / "*.jsonl.gz"), "--output", str(tmp_path / "out")),
        *("--vocab-size", "400", "--workers", "0", "--no-progress", "split.valid_fraction=0.1"),
    ]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert summary["train"] == manifest["train"] and summary["documents"]["kept"] == 20
    assert manifest["config"]["tokenizer"]["vocab_size"] == 400 and manifest["config"]["split"]["valid_fraction"] == 0.1
    assert main([*argv, "--restart"]) == 0
    rerun = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert rerun["run"]["reused"] == {"clean": 0, "tokenizer": 0, "tokenize": 0, "merge": 0}  # --restart dropped .work
    assert {k: v for k, v in rerun.items() if k != "run"} == {k: v for k, v in manifest.items() if k != "run"}


def test_split_config_valid_fraction_zero_means_no_valid_split():
    cfg = load_data_prep_config(None, ["input.paths=[x]", "split.valid_fraction=0"])
    assert cfg.split.min_valid_documents == 0  # nothing is topped up from train
    cfg = load_data_prep_config(None, ["input.paths=[x]", "split.valid_fraction=0.001"])
    assert cfg.split.min_valid_documents == 1


def test_no_valid_split_writes_no_valid_files(tmp_path):
    """valid_fraction=0: no valid.bin/.idx (Megatron cannot map an empty one), manifest "valid"
    lists no prefix, a stale valid.bin from an earlier run is removed, and training falls back to
    data.split of the train blend."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from data_prep.api import build_from_texts
    from tests.conftest import tiny_config
    from training.data import dataset_config, tokenizer_info

    texts = [english_doc(i) for i in range(12)]
    out = tmp_path / "demo"
    first = build_from_texts(texts, out, vocab_size=400, workers=0, valid_fraction=0.2, filters=False)
    assert first["valid"]["prefixes"] == ["valid"] and first["valid"]["documents"] >= 1
    assert (out / "valid.bin").exists()
    m = build_from_texts(  # another split into the completed build: replacing it is asked for
        texts, out, vocab_size=400, workers=0, valid_fraction=0.0, filters=False, overrides=["output.overwrite=true"]
    )
    assert m["valid"] == {"prefixes": [], "documents": 0, "tokens": 0}
    assert m["train"]["prefixes"] == ["train"] and m["train"]["documents"] == 12
    assert m["config"]["split"]["min_valid_documents"] == 0
    assert not (out / "valid.bin").exists() and not (out / "valid.idx").exists()
    assert len(IndexedDataset(str(out / "train"))) == 12
    # A split the hash leaves empty (min_valid_documents=0) is not written either.
    m = build_from_texts(
        texts[:3],
        tmp_path / "few",
        vocab_size=400,
        workers=0,
        valid_fraction=0.01,
        filters=False,
        overrides=["split.min_valid_documents=0"],
    )
    assert m["valid"] == {"prefixes": [], "documents": 0, "tokens": 0} and m["train"]["documents"] == 3
    assert sorted(p.name for p in (tmp_path / "few").glob("*.bin")) == ["train.bin"]
    cfg = tiny_config(f"data.manifest={out}", "data.mock=false")
    # check=False: 98,2,0 of these 12 documents leaves the validation part empty, which the
    # file checks refuse (tests/test_training_data_checks.py); here only the blend is looked at
    config = dataset_config(cfg, tokenizer_info(cfg), None, check=False)
    assert config.blend == ([str(out / "train")], None) and config.blend_per_split is None
    assert config.split == cfg.data.split == "98,2,0"
    (out / "manifest.json").write_text(
        json.dumps({**m, "train": {"prefixes": [], "documents": 0, "tokens": 0}, "tokenizer": m["tokenizer"]})
    )
    with pytest.raises(ValueError, match=r'data.manifest: .* has no training data \("train": \{"prefixes": \[\]\}\)'):
        dataset_config(cfg, tokenizer_info(cfg), None)

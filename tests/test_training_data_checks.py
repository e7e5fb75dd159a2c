"""Broken training data exits 2 with one line naming the file, before anything is built
(training/data.py ``check_data``), and a data source given on top of ``data.mock: true`` wins
(runconfig/validate.py ``apply_data_source``).

Each case builds its files here with megatron's own ``IndexedDatasetBuilder`` and breaks them
as a user's disk or another tool would. All cases run through ``train_gpt.main`` in one
subprocess (one import of torch and megatron), which reports each exit code and stderr.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runconfig import ConfigError
from tests.conftest import REPO, TINY, env, tiny_config

VOCAB = 512
EOD = VOCAB - 1


def make_prefix(prefix: Path, docs: list[list[int]], dtype=np.uint16) -> Path:
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in docs:
        builder.add_document(torch.tensor(doc), [len(doc)])
    builder.finalize(f"{prefix}.idx")
    return prefix


def random_docs(n: int, seed: int, high: int = EOD) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[*rng.integers(0, high, size=int(rng.integers(20, 200))).tolist(), EOD] for _ in range(n)]


def make_manifest(out: Path, train: list[list[int]], valid: list[list[int]] | None, **prefix_kw) -> Path:
    """A data_prep-style folder: train (and valid) prefixes and a manifest (no tokenizer file:
    training needs only the vocabulary size and the end-of-document id)."""
    out.mkdir(parents=True)
    make_prefix(out / "train", train, **prefix_kw)
    if valid is not None:
        make_prefix(out / "valid", valid)
    manifest = {
        "train": {"prefixes": ["train"]},
        "valid": {"prefixes": ["valid"] if valid is not None else []},
        "tokenizer": {"vocab_size": VOCAB, "eod_id": EOD},
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def good(out: Path) -> Path:
    return make_manifest(out, random_docs(60, 0), random_docs(10, 1))


def idx_layout(idx: Path) -> tuple[int, int, int]:
    """(dtype code, sequences, document boundaries) of a megatron index."""
    _, _, code, n, bounds = struct.unpack("<9sQBQQ", idx.read_bytes()[:34])
    return code, n, bounds


# case name -> (how to build it in a folder, expected stderr fragments (besides the file))
def corrupt_idx(out: Path) -> None:
    idx = good(out) / "train.idx"
    idx.write_bytes(b"\x93NUMPY garbage!!" + idx.read_bytes()[16:])


def truncated_idx(out: Path) -> None:
    idx = good(out) / "train.idx"
    idx.write_bytes(idx.read_bytes()[:200])


def truncated_bin(out: Path) -> None:
    path = good(out) / "train.bin"
    path.write_bytes(path.read_bytes()[:1000])


def other_bin(out: Path) -> None:
    good(out)
    shutil.copy(out / "valid.bin", out / "train.bin")  # idx/bin of two different datasets


def bin_of_another_dtype(out: Path) -> None:
    good(out)
    tokens = np.fromfile(out / "train.bin", dtype=np.uint16)
    tokens.astype(np.int32).tofile(out / "train.bin")  # the index still says uint16


def float_dtype(out: Path) -> None:
    make_manifest(out, random_docs(60, 0), random_docs(10, 1), dtype=np.float32)


def unknown_dtype_code(out: Path) -> None:
    idx = good(out) / "train.idx"
    raw = bytearray(idx.read_bytes())
    raw[17] = 42  # the dtype code byte, after the 9-byte magic and the u64 version
    idx.write_bytes(bytes(raw))


def bad_pointers(out: Path) -> None:
    idx = good(out) / "train.idx"
    _, n, _ = idx_layout(idx)
    raw = bytearray(idx.read_bytes())
    at = 34 + 4 * n + 8 * 5  # the sixth sequence pointer
    raw[at : at + 8] = struct.pack("<q", 12345)
    idx.write_bytes(bytes(raw))


def other_vocabulary(out: Path) -> None:
    # tokens of a 50k-vocabulary tokenizer under a manifest that says 512 ids (int32: ids > 65535 fit)
    make_manifest(out, random_docs(60, 0, high=50_000), random_docs(10, 1), dtype=np.int32)


def empty_prefix(out: Path) -> None:
    make_manifest(out, [], random_docs(10, 1))


def binary_manifest(out: Path) -> None:
    good(out)
    (out / "manifest.json").write_bytes(bytes(range(256)) * 2)


def empty_split(out: Path) -> None:
    # no valid prefixes: data.split 98,2,0 of 3 documents leaves the validation part empty
    make_manifest(out, random_docs(3, 0), None)


CASES = {
    "corrupt_idx": (corrupt_idx, ["train.idx is not a megatron index"]),
    "truncated_idx": (truncated_idx, ["train.idx is 200 bytes but its header", "truncated or corrupt"]),
    "truncated_bin": (truncated_bin, ["train.bin is 1000 bytes but train.idx says", "truncated"]),
    "other_bin": (other_bin, ["train.bin is", "but train.idx says", "truncated"]),
    "bin_of_another_dtype": (bin_of_another_dtype, ["train.bin is", "exactly 2x", "another dtype"]),
    "float_dtype": (float_dtype, ["train.idx stores tokens as float32", "must be integers"]),
    "unknown_dtype_code": (unknown_dtype_code, ["train.idx has dtype code 42"]),
    "bad_pointers": (bad_pointers, ["train.idx is corrupt", "pointers"]),
    "other_vocabulary": (other_vocabulary, ["train.bin holds token id", "(512 ids)", "another tokenizer"]),
    "empty_prefix": (empty_prefix, ["train is empty (0 sequences"]),
    "binary_manifest": (binary_manifest, ["manifest.json is not JSON text", "not UTF-8"]),
    "empty_split": (empty_split, ["data.split: '98,2,0' leaves the validation split of", "train empty (0 of its 3"]),
}
FILES = {  # the file each message must name
    "binary_manifest": "/manifest.json",
    "empty_prefix": "/train",
    "empty_split": "/train",
}
FAST = ["training.steps=4", "scheduler.warmup_steps=1", "logging.progress_bar=false", "checkpoint.final=false"]

DRIVER = r"""
import contextlib, io, json, sys
import train_gpt
import training.session, training.runner  # their import-time warnings before the capture
for name, args in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = train_gpt.main(args)
    print(json.dumps({"case": name, "rc": int(rc), "err": err.getvalue()}), flush=True)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, dict]:
    root = tmp_path_factory.mktemp("broken")
    runs = {}
    for name, (build, _) in CASES.items():
        build(root / name)
        runs[name] = ["--config", str(TINY), f"run.dir={root / 'runs' / name}", f"data.manifest={root / name}", *FAST]
    # A manifest on top of tiny_cpu.yaml's mock: true trains on it: every token 7, so the loss
    # falls far below the mock data's (5.70 after these 4 steps; ln 512 = 6.24).
    planted = make_manifest(root / "planted", [[7] * 300 + [EOD]] * 40, [[7] * 300 + [EOD]] * 8)
    runs["planted"] = [
        "--config",
        str(TINY),
        f"run.dir={root / 'runs' / 'planted'}",
        f"data.manifest={planted}",
        "optimizer.lr=0.01",
        *FAST,
    ]
    # data made with one tokenizer, data.tokenizer another (test_a_manifest_with_another_data_tokenizer_...)
    data = prepared(root / "other_tokenizer", word_tokenizer(root / "ours" / "tokenizer.json", VOCAB))
    other = word_tokenizer(root / "other" / "tokenizer.json", 600)
    runs["other_tokenizer"] = ["--config", str(TINY), f"run.dir={root / 'runs' / 'other_tokenizer'}"]
    runs["other_tokenizer"] += [f"data.manifest={data}", f"data.tokenizer={other}", *FAST]
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(runs)],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    found = {r["case"]: r for r in map(json.loads, out.stdout.splitlines())}
    for r in found.values():
        r["run_dir"] = root / "runs" / r["case"]
    return found


@pytest.mark.parametrize("case", list(CASES))
def test_broken_data_exits_2_with_one_line_naming_the_file(outcomes, case):
    result = outcomes[case]
    assert result["rc"] == 2, result["err"][-2000:]
    errors = [line for line in result["err"].splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result["err"].strip().endswith(errors[0]), result["err"]
    line = errors[0]
    for fragment in CASES[case][1]:
        assert fragment in line, line
    assert f"/{case}{FILES.get(case, '/train.')}" in line  # the file, by its path
    assert "data.manifest" in line or "data.split" in line  # and the key it came from
    assert not (result["run_dir"] / "metrics.jsonl").exists()  # nothing trained
    assert not (result["run_dir"] / "summary.json").exists()


def test_a_manifest_on_top_of_mock_true_is_trained_on(outcomes):
    result = outcomes["planted"]
    assert result["rc"] == 0, result["err"][-2000:]
    run = result["run_dir"]
    assert "mock: false" in (run / "config.yaml").read_text()
    final = json.loads((run / "summary.json").read_text())["final_val_loss"]
    assert final < 4.5, final  # measured: 3.53 here; the same run on mock data ends at 5.70


def test_data_source_wins_over_mock_or_is_refused_naming_both_keys():
    assert tiny_config().data.mock is True
    assert tiny_config("data.manifest=/some/dir").data.mock is False
    assert tiny_config("data.train_prefixes=[/a/train]").data.mock is False
    with pytest.raises(ConfigError, match=r"data.valid_prefixes: given with data.mock=true and no training data"):
        tiny_config("data.valid_prefixes=[/a/valid]")
    with pytest.raises(ConfigError, match=r"data.manifest: given together with data.train_prefixes"):
        tiny_config("data.manifest=/some/dir", "data.train_prefixes=[/a/train]")


def test_the_vocabulary_check_reads_a_bounded_sample(tmp_path, monkeypatch):
    """A planted out-of-vocabulary id inside the sampled windows is found; the check reads at most
    VOCAB_SAMPLE_TOKENS ids (here 16 windows of 4 of the 1,000)."""
    from training import data

    doc = [1] * 999 + [EOD]
    prefix = make_prefix(tmp_path / "p", [doc])
    assert len(data.check_indexed_dataset(str(prefix), "k", VOCAB)) == 1
    monkeypatch.setattr(data, "VOCAB_SAMPLE_TOKENS", 64)
    tokens = np.memmap(f"{prefix}.bin", dtype=np.uint16, mode="r+")
    tokens[500] = 9999  # between the windows: not seen
    tokens.flush()
    data.check_indexed_dataset(str(prefix), "k", VOCAB)
    tokens[0] = 9999  # in the first window
    tokens.flush()
    with pytest.raises(ValueError, match=r"k: .*p.bin holds token id 9999, outside the vocabulary"):
        data.check_indexed_dataset(str(prefix), "k", VOCAB)


def test_data_identity_reads_each_index_header_once_through_the_checked_reader(tmp_path):
    """The identity a checkpoint stores: per prefix the .idx header's dtype code and counts (read
    by hand here with struct) and the file sizes; a file that is no megatron index is refused
    with the key and the file, as the dataset check refuses it."""
    from types import SimpleNamespace

    from training.data import data_identity

    tokenizer = SimpleNamespace(unique_identifiers={"identity": "tok"})
    out = good(tmp_path / "good")
    identity = data_identity(tiny_config(f"data.manifest={out}"), tokenizer)
    for split in ("train", "valid"):
        code, sequences, documents = idx_layout(out / f"{split}.idx")
        sizes = [(out / f"{split}.bin").stat().st_size, (out / f"{split}.idx").stat().st_size]
        assert identity[split] == [[split, code, sequences, documents, *sizes]]
    assert identity["tokenizer"] == "tok"
    bad = tmp_path / "bad"
    corrupt_idx(bad)
    with pytest.raises(ValueError, match=r"data.manifest: .*bad/train.idx is not a megatron index"):
        data_identity(tiny_config(f"data.manifest={bad}"), tokenizer)


def word_tokenizer(path: Path, n: int) -> Path:
    """A Hugging Face tokenizer.json of ``n`` ids: words w0..w{n-2}, then <|endoftext|> (id n-1)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(n - 1)} | {"<|endoftext|>": n - 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def prepared(out: Path, tokenizer: Path) -> Path:
    """A data_prep output folder made with ``tokenizer`` (its copy, sha256, vocabulary and EOD in the
    manifest). The ids stay below 511, so any tokenizer of >= 512 ids passes the vocabulary check."""
    from data_prep.tokenizer import load_tokenizer

    good(out)
    shutil.copy(tokenizer, out / "tokenizer.json")
    tok = load_tokenizer(out / "tokenizer.json")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tokenizer"] = {
        "path": "tokenizer.json",
        "sha256": tok.sha256,
        "vocab_size": tok.vocab_size,
        "eod_id": tok.eod,
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def test_data_tokenizer_must_be_the_one_the_data_was_made_with(tmp_path):
    """The data was made with a 512-id tokenizer; data.tokenizer names a 600-id one (every id of
    the data fits it, so the vocabulary check passes). Before, a manifest run ignored data.tokenizer
    and a prefixes run trained with it, silently; now both are refused naming both files."""
    from training.data import check_data

    ours = word_tokenizer(tmp_path / "ours" / "tokenizer.json", VOCAB)
    other = word_tokenizer(tmp_path / "other" / "tokenizer.json", 600)
    data = prepared(tmp_path / "data", ours)
    runs = {
        "data.manifest": [f"data.manifest={data}"],
        "data.train_prefixes": [f"data.train_prefixes=[{data / 'train'}]", f"data.valid_prefixes=[{data / 'valid'}]"],
    }
    for key, source in runs.items():
        info = check_data(tiny_config(*source, f"data.tokenizer={ours.parent}", "model.vocab_size=null"))
        assert (info.vocab_size, info.eod) == (VOCAB, EOD)  # the folder's tokenizer.json: the data's own
        with pytest.raises(ValueError) as refused:
            check_data(tiny_config(*source, f"data.tokenizer={other}", "model.vocab_size=null"))
        line = str(refused.value)
        assert line.startswith("data.tokenizer: ") and f"tokenizer {key}" in line, line
        assert f"{other} (sha256 " in line and "600 ids, end of document 599)" in line, line
        assert f"{data / 'manifest.json'} records {data / 'tokenizer.json'} (sha256 " in line, line
        assert "512 ids, end of document 511)" in line, line
    # prefixes copied without their manifest: nothing recorded, so data.tokenizer is the run's
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("train.bin", "train.idx", "valid.bin", "valid.idx"):
        shutil.copy(data / name, bare / name)
    info = check_data(
        tiny_config(
            f"data.train_prefixes=[{bare / 'train'}]",
            f"data.valid_prefixes=[{bare / 'valid'}]",
            f"data.tokenizer={other}",
        )
    )
    assert (info.vocab_size, info.eod) == (600, 599)


def test_a_manifest_with_another_data_tokenizer_exits_2_before_training(outcomes):
    """The command line: exit 2, one error line naming both tokenizers, nothing trained."""
    result = outcomes["other_tokenizer"]
    assert result["rc"] == 2, result["err"][-2000:]
    errors = [line for line in result["err"].splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result["err"].strip().endswith(errors[0]), result["err"]
    assert "/other/tokenizer.json (sha256 " in errors[0] and "/other_tokenizer/tokenizer.json (sha256 " in errors[0]
    assert not (result["run_dir"] / "metrics.jsonl").exists()

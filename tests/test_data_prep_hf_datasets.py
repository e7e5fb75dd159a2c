"""Hugging Face datasets as data_prep input (data_prep/hf_datasets.py, the Arrow reader).

The datasets are built here with ``datasets`` itself (no download): a ``save_to_disk``
folder of several Arrow files, a ``DatasetDict``, and a hub-cache repository
(``datasets--ORG--NAME/{refs,blobs,snapshots}``, files as links into ``blobs``, as
huggingface_hub lays them out) of parquet files with a train and a test split. Each must give
the same bytes as the same texts in a JSONL file: tokenizer, ``.bin`` and ``.idx``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from data_prep.api import load_data_prep_config
from data_prep.pipeline import run
from data_prep.readers import InputError
from tests.data_prep_fixtures import english_doc, write_jsonl

# The texts, in order; None is a row without its text (a skipped record in every format).
TEXTS: list[str | None] = [english_doc(i) for i in range(30)]
TEXTS[5] = None
OTHER_SPLIT = [english_doc(i) for i in range(100, 106)]  # must never be read
SHA = "0123456789abcdef0123456789abcdef01234567"


def overrides(paths: list[Path], out: Path, *extra: str) -> list[str]:
    return [
        f"input.paths=[{','.join(str(p) for p in paths)}]",
        "input.text_key=content",
        f"output.dir={out}",
        "tokenizer.vocab_size=500",
        "split.valid_fraction=0.2",
        "runtime.workers=0",
        "runtime.progress=false",
        "clean.language.enabled=false",  # the readers are under test, not the filters
        "clean.quality.enabled=false",
        "clean.c4.enabled=false",
        *extra,
    ]


def prep(paths: list[Path], out: Path, *extra: str) -> dict:
    return run(load_data_prep_config(None, overrides(paths, out, *extra)))


def outputs(out: Path) -> dict[str, bytes]:
    m = json.loads((out / "manifest.json").read_text())
    names = [m["tokenizer"]["path"]] + [
        f"{p}{ext}" for s in ("train", "valid") for p in m[s]["prefixes"] for ext in (".bin", ".idx")
    ]
    return {name: (out / name).read_bytes() for name in names}


def dataset(texts: list):
    from datasets import Dataset

    return Dataset.from_dict({"id": list(range(len(texts))), "content": texts})


def hub_repo(root: Path) -> Path:
    """``datasets--org--corpus`` as the hub cache holds it: blobs by hash, a snapshot of links."""
    repo = root / "datasets--org--corpus"
    snapshot = repo / "snapshots" / SHA
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(SHA)

    def put(relative: str, texts: list) -> None:
        tmp = repo / "blobs" / "incoming"
        dataset(texts).to_parquet(str(tmp), batch_size=4)  # row groups of 4 rows: spans inside files
        blob = repo / "blobs" / hashlib.sha256(tmp.read_bytes()).hexdigest()
        tmp.rename(blob)
        link = snapshot / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))

    put("data/train-00000-of-00002.parquet", TEXTS[:17])
    put("data/train-00001-of-00002.parquet", TEXTS[17:])
    put("data/test-00000-of-00001.parquet", OTHER_SPLIT)
    (snapshot / "README.md").write_text("# a corpus\n")
    return repo


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The same texts as JSONL, with the record whose text is missing as ``"content": null``."""
    root = tmp_path_factory.mktemp("hf")
    jsonl = write_jsonl(root / "texts.jsonl", [{"id": i, "content": t} for i, t in enumerate(TEXTS)])
    manifest = prep([jsonl], root / "jsonl_out")
    assert manifest["skipped_total"] == 1 and manifest["skipped"][0]["where"] == "line 6"
    return {"root": root, "manifest": manifest, "bytes": outputs(root / "jsonl_out")}


def test_save_to_disk_folder_equals_jsonl_and_resumes(reference):
    root = reference["root"]
    folder = root / "saved"
    dataset(TEXTS).save_to_disk(str(folder), num_shards=3)
    out = root / "saved_out"
    m = prep([folder], out, "input.shard_bytes=4096")  # rows of each Arrow file in several shards
    assert [Path(i["path"]).name for i in m["inputs"]] == [f"data-0000{k}-of-00003.arrow" for k in range(3)]
    assert m["skipped_total"] == 1
    (skip,) = m["skipped"]
    assert skip["where"] == "row 5" and "key 'content' is null" in skip["reason"]
    assert Path(skip["path"]).name == "data-00000-of-00003.arrow"
    assert m["documents"] == reference["manifest"]["documents"]
    assert outputs(out) == reference["bytes"]  # byte-identical to the JSONL run
    shards = m["run"]["reused"]  # the first run reused nothing
    again = prep([folder], out, "input.shard_bytes=4096")
    assert again["run"]["reused"]["tokenizer"] == 1
    assert again["run"]["reused"]["clean"] == again["run"]["reused"]["tokenize"] > 3 > shards["clean"]
    assert outputs(out) == reference["bytes"]


def test_hub_cache_snapshot_equals_jsonl_and_reads_only_its_split(reference):
    root = reference["root"]
    repo = hub_repo(root / "hub")
    for i, path in enumerate([repo, repo / "snapshots" / SHA]):  # the repository or its snapshot
        out = root / f"hub_out{i}"
        m = prep([path], out, "input.shard_bytes=2048")  # row groups of each file in several shards
        names = [Path(p["path"]).name for p in m["inputs"]]
        assert names == ["train-00000-of-00002.parquet", "train-00001-of-00002.parquet"]  # not the test split
        assert [e["where"] for e in m["skipped"]] == ["row 5"]
        assert outputs(out) == reference["bytes"]
    reused = prep([repo], root / "hub_out0", "input.shard_bytes=2048")["run"]["reused"]
    assert reused["clean"] == reused["tokenize"] > 2 and reused["tokenizer"] == 1  # resumed, nothing redone


def test_dataset_dict_split_and_bad_keys_are_named(reference, tmp_path):
    from datasets import DatasetDict

    folder = tmp_path / "dict"
    DatasetDict({"train": dataset(TEXTS), "test": dataset(OTHER_SPLIT)}).save_to_disk(str(folder))
    m = prep([folder], tmp_path / "out")
    assert outputs(tmp_path / "out") == reference["bytes"]
    assert all("/train/" in i["path"] for i in m["inputs"])
    with pytest.raises(
        InputError, match=r"input.hf_split: .*dict has no split 'validation' \(it has \['test', 'train'\]\)"
    ):
        prep([folder], tmp_path / "out2", "input.hf_split=validation")
    repo = hub_repo(tmp_path / "hub")
    with pytest.raises(InputError, match=r"input.hf_split: .*has no split 'validation'"):
        prep([repo], tmp_path / "out3", "input.hf_split=validation")


def test_a_missing_text_column_fails_the_file_by_name(tmp_path):
    from datasets import Dataset

    folder = tmp_path / "saved"
    Dataset.from_dict({"body": [english_doc(i) for i in range(5)]}).save_to_disk(str(folder))
    with pytest.raises(Exception, match="nothing could be read|no input"):
        prep([folder], tmp_path / "out")
    skipped = [json.loads(line) for line in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    assert skipped[0]["where"] == "file" and "no column 'content'" in skipped[0]["reason"]

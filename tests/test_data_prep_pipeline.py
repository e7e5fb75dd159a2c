"""End-to-end data_prep: planted filter answers, exact token counts, round trip, resume, manifest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from data_prep.api import build_from_texts, load_data_prep_config
from data_prep.filters import FILTER_NAMES
from data_prep.normalize import normalize_text
from data_prep.pipeline import DataPrepError, manifest_without_run, run
from data_prep.readers import read_all_texts
from data_prep.tokenizer import load_tokenizer
from tests.data_prep_fixtures import (
    FOREIGN,
    english_doc,
    html_page,
    write_jsonl,
    write_parquet,
    write_warc,
    write_wet,
)

REPO = Path(__file__).resolve().parents[1]
HUGE = " ".join([english_doc(100)] * 30)  # > clean.max_chars=20000 below
SHORT = ["Too short to keep.", "Buy now and save big!", "Click here."]


def planted_inputs(raw: Path) -> dict:
    """Five shards in five formats with known answers (see the asserts in test_planted_counts)."""
    raw.mkdir(parents=True, exist_ok=True)
    write_jsonl(
        raw / "a_docs.jsonl.gz",
        [english_doc(i) for i in range(12)]
        + [english_doc(3), FOREIGN["de"], FOREIGN["fr"], SHORT[0], SHORT[1], "   \n\t ", HUGE],
    )
    write_jsonl(
        raw / "b_docs.jsonl.zst",
        [english_doc(i) for i in range(12, 22)] + [english_doc(5), english_doc(12), FOREIGN["es"], SHORT[2]],
    )
    write_parquet(raw / "c_docs.parquet", [english_doc(i) for i in range(22, 28)] + [FOREIGN["ru"], english_doc(0)])
    write_wet(raw / "d_crawl.warc.wet.gz", [english_doc(i) for i in range(28, 32)] + [english_doc(7)])
    pages = [
        (
            f"https://example.org/{i}",
            "200 OK",
            "text/html; charset=utf-8",
            html_page(f"Page {i}", english_doc(i).split("\n\n")),
        )
        for i in range(32, 35)
    ]
    pages += [
        ("https://example.org/logo.png", "200 OK", "image/png", b"\x89PNG\r\n\x1a\n0000"),
        ("https://example.org/gone", "404 Not Found", "text/html", b"<html>gone</html>"),
    ]
    write_warc(raw / "e_pages.warc.gz", pages)
    expected = [normalize_text(english_doc(i)) for i in range(35) if i < 32]
    expected += [normalize_text(t) for t in read_all_texts(raw / "e_pages.warc.gz")[0]]
    return {"expected": expected}


def planted_overrides(raw: Path, out: Path, workers: int = 0) -> list[str]:
    return [
        f"input.paths=[{raw}]",
        f"output.dir={out}",
        "clean.max_chars=20000",
        "tokenizer.vocab_size=600",
        "split.valid_fraction=0.2",
        f"runtime.workers={workers}",
        "runtime.progress=false",
    ]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("planted")
    info = planted_inputs(root / "raw")
    out = root / "out"
    manifest = run(load_data_prep_config(None, planted_overrides(root / "raw", out)))
    return {"root": root, "raw": root / "raw", "out": out, "manifest": manifest, **info}


def read_dataset(prefix: Path) -> list[np.ndarray]:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    assert len(dataset.document_indices) == len(dataset) + 1  # one sequence per document
    return [np.array(dataset[i]) for i in range(len(dataset))]  # copies: the mmap closes with dataset


def test_planted_counts(planted):
    m = planted["manifest"]
    dropped = {k: v for k, v in m["filters"].items() if v}
    assert dropped == {
        "too_long": 1,
        "not_html": 2,
        "empty": 1,
        "gopher_min_words": 3,
        "language": 4,
        "exact_dedup": 5,
    }
    assert set(m["filters"]) == set(FILTER_NAMES)
    # read: 19 + 14 + 8 + 5 JSONL/parquet/WET records, 5 WARC responses (2 of them not HTML)
    assert m["documents"] == {"read": 51, "after_filters": 40, "kept": 35}
    assert m["train"]["documents"] + m["valid"]["documents"] == 35
    assert m["valid"]["documents"] >= 1 and m["train"]["documents"] >= 1
    assert m["skipped_total"] == 0 and m["skipped"] == []
    assert [i["status"] for i in m["inputs"]] == ["ok"] * 5
    assert [i["format"] for i in m["inputs"]] == ["jsonl", "jsonl", "parquet", "wet", "warc"]
    assert [i["kept"] for i in m["inputs"]] == [12, 10, 6, 4, 3]


def test_exact_token_counts_and_round_trip(planted):
    out, m = planted["out"], planted["manifest"]
    tokenizer = load_tokenizer(out / m["tokenizer"]["path"])
    expected = planted["expected"]
    total = sum(len(tokenizer.encode(text)) + 1 for text in expected)
    assert m["train"]["tokens"] + m["valid"]["tokens"] == total
    decoded = {}
    for split in ("train", "valid"):
        docs = read_dataset(out / m[split]["prefixes"][0])
        assert len(docs) == m[split]["documents"]
        assert sum(len(d) for d in docs) == m[split]["tokens"]
        assert all(d[-1] == tokenizer.eod for d in docs)
        assert all(tokenizer.eod not in d[:-1] for d in docs)
        decoded[split] = [tokenizer.decode(d[:-1].tolist()) for d in docs]
        order = [expected.index(text) for text in decoded[split]]  # exact text, or ValueError
        assert order == sorted(order), f"{split} documents are not in input order"
    assert sorted(decoded["train"] + decoded["valid"]) == sorted(expected)


def test_manifest_contract(planted):
    out, m = planted["out"], planted["manifest"]
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == m
    assert m["format_version"] == 1
    assert m["train"]["prefixes"] == ["train"] and m["valid"]["prefixes"] == ["valid"]
    assert m["dtype"] == "uint16"
    tok = m["tokenizer"]
    assert tok["type"] == "sentencepiece" and tok["path"] == "tokenizer.model" and tok["trained"] is True
    assert tok["eod_id"] == 2 and tok["pad_id"] == -1 and tok["vocab_size"] <= 600
    import hashlib

    assert tok["sha256"] == hashlib.sha256((out / "tokenizer.model").read_bytes()).hexdigest()
    for entry in m["inputs"]:
        assert entry["sha256"] == hashlib.sha256(Path(entry["path"]).read_bytes()).hexdigest()
    assert (out / "skipped.jsonl").read_text() == ""
    assert set(m["run"]) >= {"started_at", "elapsed_s", "workers", "reused", "stage_seconds"}


def test_output_dir_can_move(planted, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(planted["out"], moved, ignore=shutil.ignore_patterns(".work"))
    m = json.loads((moved / "manifest.json").read_text())
    docs = read_dataset(moved / m["train"]["prefixes"][0])
    assert len(docs) == m["train"]["documents"]
    assert load_tokenizer(moved / m["tokenizer"]["path"]).vocab_size == m["tokenizer"]["vocab_size"]


def test_rerun_reuses_everything_and_is_identical(planted, tmp_path):
    """Nothing changed: not even the merge runs again (the .bin/.idx files stay the same
    files); a merged file gone, it does, to the same bytes."""
    out = tmp_path / "copy"
    shutil.copytree(planted["out"], out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    files = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.[bi][id]*")}
    manifest = run(load_data_prep_config(None, planted_overrides(planted["raw"], out)))
    assert manifest["run"]["reused"] == {"clean": 5, "tokenizer": 1, "tokenize": 5, "merge": 1}
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in out.glob("*.[bi][id]*")} == files
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert set(after) == set(before)
    for name in before:
        if name != "manifest.json":
            assert after[name] == before[name], name
    assert manifest_without_run(manifest) == manifest_without_run(planted["manifest"])
    assert manifest["run"]["cost"]["merge"] == planted["manifest"]["run"]["cost"]["merge"]
    (out / "valid.idx").unlink()
    manifest = run(load_data_prep_config(None, planted_overrides(planted["raw"], out)))
    assert manifest["run"]["reused"]["merge"] == 0
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    assert manifest_without_run(manifest) == manifest_without_run(planted["manifest"])


def test_a_run_reads_each_clean_marker_twice_at_most(planted, tmp_path, monkeypatch):
    """Once to decide whether the shard needs cleaning, once for every later stage together
    (a snapshot has hundreds of thousands of markers; with near-dedup on they were read 6
    times each, once per stage that needs them)."""
    import data_prep.stages as stages

    out = tmp_path / "copy"
    shutil.copytree(planted["out"], out)
    reads: dict[str, int] = {}
    real = stages.read_json

    def counting(path, *args, **kwargs):
        if f"{os.sep}clean{os.sep}" in str(path):
            reads[str(path)] = reads.get(str(path), 0) + 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(stages, "read_json", counting)
    overrides = [*planted_overrides(planted["raw"], out), "clean.near_dedup.enabled=true"]  # the stages that read them
    overrides.append("output.overwrite=true")  # another config than the copied build's
    manifest = run(load_data_prep_config(None, overrides))
    assert manifest["run"]["reused"]["clean"] == 5
    assert len(reads) == 5 and set(reads.values()) == {2}, reads


def test_two_workers_write_the_same_bytes(planted, tmp_path):
    out = tmp_path / "w2"
    manifest = run(load_data_prep_config(None, planted_overrides(planted["raw"], out, workers=2)))
    assert manifest["run"]["workers"] == 2
    for name in ("train.bin", "train.idx", "valid.bin", "valid.idx", "tokenizer.model"):
        assert (out / name).read_bytes() == (planted["out"] / name).read_bytes(), name
    assert manifest_without_run(manifest) == manifest_without_run(planted["manifest"])


def test_crash_in_tokenize_stage_resumes_identically(planted, tmp_path, monkeypatch):
    import data_prep.pipeline as pipeline

    real = pipeline.tokenize_shard
    calls = []

    def dies_on_third_shard(task):
        calls.append(task.shard_id)
        if len(calls) == 3:
            raise KeyboardInterrupt("simulated kill")
        return real(task)

    out = tmp_path / "crash"
    overrides = planted_overrides(planted["raw"], out)
    monkeypatch.setattr(pipeline, "tokenize_shard", dies_on_third_shard)
    with pytest.raises(KeyboardInterrupt):
        run(load_data_prep_config(None, overrides))
    assert not (out / "manifest.json").exists()
    assert not (out / "train.bin").exists()
    monkeypatch.setattr(pipeline, "tokenize_shard", real)
    manifest = run(load_data_prep_config(None, overrides))
    assert manifest["run"]["reused"] == {"clean": 5, "tokenizer": 1, "tokenize": 2, "merge": 0}
    for name in ("train.bin", "train.idx", "valid.bin", "valid.idx"):
        assert (out / name).read_bytes() == (planted["out"] / name).read_bytes(), name
    assert manifest_without_run(manifest) == manifest_without_run(planted["manifest"])
    assert not list(out.glob(".*.tmp")) and not list((out / ".work" / "tokens").glob(".*.tmp"))


def test_sigkill_during_run_then_rerun_is_identical(planted, tmp_path):
    """A real kill -9 of the CLI mid-run; the rerun skips finished shards and writes the same bytes."""
    raw = tmp_path / "raw"
    shutil.copytree(planted["raw"], raw)
    for i in range(6):  # more, bigger shards so the kill lands while shards are still being cleaned
        write_jsonl(raw / f"f_more_{i}.jsonl", [english_doc(1000 + 200 * i + j) for j in range(200)])
    overrides = [o for o in planted_overrides(raw, tmp_path / "ref") if not o.startswith("runtime.workers")]
    reference = run(load_data_prep_config(None, [*overrides, "runtime.workers=0"]))

    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "data_prep", *[o.replace(str(tmp_path / "ref"), str(out)) for o in overrides]]
    cmd.append("runtime.workers=1")
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    markers = out / ".work" / "clean"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(markers.glob("*.json"))) < 2 and proc.poll() is None:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before_kill = len(list(markers.glob("*.json")))
    assert 2 <= done_before_kill < 11, "the kill should land while shards are being cleaned"
    assert not (out / "manifest.json").exists()

    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run"]["reused"]["clean"] >= done_before_kill
    for name in ("train.bin", "train.idx", "valid.bin", "valid.idx", "tokenizer.model"):
        assert (out / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    assert manifest_without_run(manifest) == manifest_without_run(reference)


def _descendants(pid: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()  # "pid (comm) state ppid ..."
        except OSError:  # gone meanwhile
            continue
        if len(fields) > 1:
            parents[int(stat.parent.name)] = int(fields[1])
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        kids = [c for c, p in parents.items() if p == parent]
        found.update(kids)
        todo += kids
    return found


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_exits_75_with_one_line_and_no_worker_left(planted, tmp_path, sig):
    """SIGTERM (a scheduler) or SIGINT (Ctrl-C, which a terminal sends the whole group) stops the
    workers at once: exit 75, one line, no traceback, no process left behind; a rerun finishes."""
    raw = tmp_path / "raw"
    shutil.copytree(planted["raw"], raw)
    for i in range(6):
        write_jsonl(raw / f"f_more_{i}.jsonl", [english_doc(1000 + 200 * i + j) for j in range(200)])
    out = tmp_path / "stopped"
    overrides = [o for o in planted_overrides(raw, out) if not o.startswith("runtime.workers")]
    cmd = [sys.executable, "-m", "data_prep", *overrides, "runtime.workers=2"]
    proc = subprocess.Popen(  # SIGINT as a terminal leaves it (a background job's parent may ignore it)
        cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    markers = out / ".work" / "clean"
    deadline = time.time() + 120
    while time.time() < deadline and not list(markers.glob("*.json")) and proc.poll() is None:
        time.sleep(0.01)
    children = _descendants(proc.pid)
    assert children, "the run should have its workers when it is stopped"
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 75, err[-2000:]
    assert "Traceback" not in err and "finished units are kept: rerun the same command to resume" in err
    deadline = time.time() + 15
    while time.time() < deadline and any(Path(f"/proc/{c}").exists() for c in children):
        time.sleep(0.1)
    assert not [c for c in children if Path(f"/proc/{c}").exists()], "a worker outlived the run"
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]


def test_bad_inputs_are_skipped_named_and_counted(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    good = [english_doc(i) for i in range(40)]
    write_jsonl(raw / "a_good.jsonl", good[:20])
    # b: a gzip stream cut in half (truncated download): its first lines are kept
    whole = write_jsonl(tmp_path / "b.jsonl.gz", good[20:40]).read_bytes()
    (raw / "b_truncated.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    # c: one undecodable line and one line of broken JSON between good lines
    lines = [
        json.dumps({"text": english_doc(50)}).encode(),
        b'{"text": "caf\xe9 au lait, \xff\xfe"}',
        b'{"text": "unterminated',
        json.dumps({"text": english_doc(51)}).encode(),
    ]
    (raw / "c_mixed.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    # d: a WET file whose last record is cut off
    wet = write_wet(tmp_path / "d.warc.wet.gz", [english_doc(60), english_doc(61), english_doc(62)]).read_bytes()
    (raw / "d_truncated.warc.wet.gz").write_bytes(wet[:-40])
    # e: not gzip at all; f: a dangling link (unreadable)
    (raw / "e_not_gzip.jsonl.gz").write_bytes(b"this is not gzip data\n")
    (raw / "f_gone.jsonl").symlink_to(tmp_path / "does-not-exist.jsonl")

    overrides = [
        f"input.paths=[{raw}]",
        f"output.dir={tmp_path / 'out'}",
        "tokenizer.vocab_size=500",
        "runtime.workers=0",
        "runtime.progress=false",
        "errors.max_skipped_fraction=0.2",
        "errors.max_failed_inputs_fraction=0.4",
    ]
    m = run(load_data_prep_config(None, overrides))
    status = {Path(i["path"]).name: i["status"] for i in m["inputs"]}
    assert status == {
        "a_good.jsonl": "ok",
        "b_truncated.jsonl.gz": "partial",
        "c_mixed.jsonl": "ok",
        "d_truncated.warc.wet.gz": "ok",
        "e_not_gzip.jsonl.gz": "failed",
        "f_gone.jsonl": "failed",
    }
    by_file = {}
    for entry in m["skipped"]:
        by_file.setdefault(Path(entry["path"]).name, []).append(entry)
    assert set(by_file) == {
        "b_truncated.jsonl.gz",
        "c_mixed.jsonl",
        "d_truncated.warc.wet.gz",
        "e_not_gzip.jsonl.gz",
        "f_gone.jsonl",
    }
    assert "corrupt compressed data" in by_file["b_truncated.jsonl.gz"][0]["reason"]
    assert [e["where"] for e in by_file["c_mixed.jsonl"]] == ["line 2", "line 3"]
    assert "undecodable" in by_file["c_mixed.jsonl"][0]["reason"]
    assert "invalid JSON" in by_file["c_mixed.jsonl"][1]["reason"]
    (wet_skip,) = by_file["d_truncated.warc.wet.gz"]
    assert wet_skip["where"].startswith("offset ") and "<urn:uuid:" in wet_skip["where"]
    assert "truncated record" in wet_skip["reason"]
    assert by_file["f_gone.jsonl"][0]["where"] == "file"
    assert m["skipped_total"] == len(m["skipped"]) == 6
    logged = [json.loads(line) for line in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    assert logged == m["skipped"]
    kept = m["documents"]["kept"]
    b_kept = next(i["kept"] for i in m["inputs"] if i["path"].endswith("b_truncated.jsonl.gz"))
    assert 0 < b_kept < 20
    assert kept == 20 + b_kept + 2 + 2  # a, part of b, the two good lines of c, two intact WET records


def test_error_budget_exceeded_fails_and_keeps_work(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "a_good.jsonl", [english_doc(i) for i in range(10)])
    (raw / "b_bad.jsonl.gz").write_bytes(b"not gzip")
    overrides = [
        f"input.paths=[{raw}]",
        f"output.dir={tmp_path / 'out'}",
        "tokenizer.vocab_size=400",
        "runtime.workers=0",
        "runtime.progress=false",
    ]
    with pytest.raises(
        DataPrepError, match=r"1 of 2 inputs unreadable .*b_bad.jsonl.gz.*max_failed_inputs_fraction=0.2"
    ):
        run(load_data_prep_config(None, [*overrides, "errors.max_failed_inputs_fraction=0.2"]))
    assert json.loads((tmp_path / "out" / "skipped.jsonl").read_text())["path"].endswith("b_bad.jsonl.gz")
    assert len(list((tmp_path / "out" / ".work" / "clean").glob("*.json"))) == 2
    cli = subprocess.run(
        [sys.executable, "-m", "data_prep", *overrides, "errors.max_failed_inputs_fraction=0.2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 1 and "max_failed_inputs_fraction" in cli.stderr
    m = run(
        load_data_prep_config(
            None, [*overrides, "errors.max_failed_inputs_fraction=0.5", "errors.max_skipped_fraction=0.2"]
        )
    )
    assert m["run"]["reused"]["clean"] == 1  # the good shard; the failed input is retried
    assert m["documents"]["kept"] == 10


def test_nothing_readable_fails(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "a.jsonl.gz").write_bytes(b"garbage")
    (raw / "b.warc.gz").write_bytes(b"also garbage")
    with pytest.raises(DataPrepError, match="nothing could be read"):
        run(
            load_data_prep_config(
                None,
                [
                    f"input.paths=[{raw}]",
                    f"output.dir={tmp_path / 'out'}",
                    "runtime.workers=0",
                    "runtime.progress=false",
                ],
            )
        )


def test_a_wrong_text_key_is_named_in_the_failure(tmp_path):
    """A dump whose text is under another key: the failure says why the records were skipped
    and which keys they have, without opening skipped.jsonl."""
    path = write_jsonl(tmp_path / "a.jsonl", [english_doc(i) for i in range(4)], text_key="content")
    overrides = [f"input.paths=[{path}]", f"output.dir={tmp_path / 'out'}", "runtime.workers=0"]
    expected = (
        "Most frequent reasons: 4 x key 'text' is missing (the record's keys: 'id', 'content'; "
        "input.text_key names the text's). Skipped records are listed in"
    )
    with pytest.raises(DataPrepError) as failed:
        run(load_data_prep_config(None, overrides))
    assert expected in str(failed.value)


def test_an_empty_input_is_named_and_exits_1(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    cli = subprocess.run(
        [sys.executable, "-m", "data_prep", "--input", str(empty), "--output", str(tmp_path / "out"), "--no-progress"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 1  # docs/data_prep.md: nothing readable is a failed run, exit 1
    assert f"nothing could be read from 1 input(s) ({empty})" in cli.stderr
    assert "Traceback" not in cli.stderr


def test_everything_filtered_fails_with_counts(tmp_path):
    path = write_jsonl(tmp_path / "short.jsonl", SHORT)
    with pytest.raises(DataPrepError, match='no document passed the filters: .*"gopher_min_words": 3'):
        run(
            load_data_prep_config(
                None,
                [
                    f"input.paths=[{path}]",
                    f"output.dir={tmp_path / 'out'}",
                    "runtime.workers=0",
                    "runtime.progress=false",
                ],
            )
        )


def test_build_from_texts_one_call(tmp_path):
    texts = [english_doc(i) for i in range(30)] + ["tiny"]
    m = build_from_texts(texts, tmp_path / "demo", vocab_size=400, workers=0, valid_fraction=0.1, filters=False)
    assert m["documents"] == {"read": 31, "after_filters": 31, "kept": 31}
    assert m["train"]["documents"] + m["valid"]["documents"] == 31
    assert (tmp_path / "demo" / "input" / "texts.jsonl").exists()
    # the same texts as a JSONL path, filters on: "tiny" is too short
    m2 = build_from_texts(tmp_path / "demo" / "input" / "texts.jsonl", tmp_path / "demo2", vocab_size=400, workers=0)
    assert m2["filters"]["gopher_min_words"] == 1 and m2["documents"]["kept"] == 30


def test_gpt_dataset_reads_the_output(planted):
    """What the training side does: GPTDataset over the manifest's prefixes, with our tokenizer."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    out, m = planted["out"], planted["manifest"]
    tokenizer = load_tokenizer(out / m["tokenizer"]["path"])
    config = GPTDatasetConfig(
        random_seed=1234,
        sequence_length=64,
        blend_per_split=[([str(out / p) for p in m[s]["prefixes"]], None) for s in ("train", "valid")] + [None],
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        mid_level_dataset_surplus=0.005,
    )
    train, valid, _ = BlendedMegatronDatasetBuilder(GPTDataset, [8, 2, 0], lambda: True, config).build()
    sample = train[0]
    assert sample["tokens"].shape == (64,) and int(sample["tokens"].max()) < tokenizer.vocab_size
    assert len(valid) >= 2


def test_adding_an_input_reuses_finished_shards(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "a.jsonl", [english_doc(i) for i in range(15)])
    write_jsonl(raw / "b.jsonl", [english_doc(i) for i in range(15, 30)])
    overrides = [
        f"input.paths=[{raw}/*.jsonl]",
        f"output.dir={tmp_path / 'out'}",
        "tokenizer.vocab_size=400",
        "runtime.workers=0",
        "runtime.progress=false",
    ]
    first = run(load_data_prep_config(None, overrides))
    write_jsonl(raw / "c.jsonl", [english_doc(i) for i in range(25, 40)])  # 5 duplicates of b
    again = [*overrides, f"tokenizer.path={tmp_path / 'out' / 'tokenizer.model'}", "output.overwrite=true"]
    second = run(load_data_prep_config(None, again))  # another tokenizer key: replacing the build is asked for
    assert second["run"]["reused"]["clean"] == 2 and second["run"]["reused"]["tokenize"] == 2
    assert second["filters"]["exact_dedup"] == 5 and second["documents"]["kept"] == first["documents"]["kept"] + 10


def test_a_completed_build_of_another_config_is_refused_unless_overwrite(planted, tmp_path, capsys):
    """The same command again keeps every file; another config into the completed output exits
    2 naming the folder and the differing key, nothing touched; --overwrite replaces it."""
    from data_prep.__main__ import main

    out = tmp_path / "copy"
    shutil.copytree(planted["out"], out)
    args = planted_overrides(planted["raw"], out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(args) == 0
    assert json.loads((out / "manifest.json").read_text())["run"]["reused"]["merge"] == 1
    capsys.readouterr()
    other = [a for a in args if not a.startswith("split.")] + ["split.valid_fraction=0.3"]
    for extra in ([], ["--executor", "slurm", "--dry-run"]):
        assert main([*other, *extra]) == 2
        err = capsys.readouterr().err
        assert f"data_prep: config error: output.dir {out} holds a completed build of another config" in err
        assert "split.valid_fraction: 0.2 -> 0.3. Give another output.dir, or --overwrite" in err
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert {k: v for k, v in after.items() if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    assert json.loads(after["manifest.json"])["config"] == planted["manifest"]["config"]
    assert main([*other, "--overwrite"]) == 0
    replaced = json.loads((out / "manifest.json").read_text())
    assert replaced["config"]["split"]["valid_fraction"] == 0.3
    assert replaced["valid"]["documents"] != planted["manifest"]["valid"]["documents"]
    assert main(other) == 0  # the replaced build is now the one the same command finds


def test_an_edited_input_is_tokenized_again(tmp_path):
    """Same document count, no valid split, a given tokenizer: the plan's assignment and the
    tokenizer are unchanged, yet the tokens must be the new text's (they were the old file's)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    docs = [english_doc(i) for i in range(8)]
    write_jsonl(raw / "a.jsonl", docs)
    overrides = [
        f"input.paths=[{raw}/a.jsonl]",
        f"output.dir={tmp_path / 'first'}",
        "tokenizer.vocab_size=400",
        "runtime.workers=0",
        "runtime.progress=false",
    ]
    run(load_data_prep_config(None, overrides))
    overrides = [
        *overrides[:1],
        f"output.dir={tmp_path / 'out'}",
        *overrides[2:],
        f"tokenizer.path={tmp_path / 'first' / 'tokenizer.model'}",
        "split.valid_fraction=0",
    ]
    run(load_data_prep_config(None, overrides))
    docs[0] = docs[0].replace("This is report", "That is report")
    write_jsonl(raw / "a.jsonl", docs)
    manifest = run(load_data_prep_config(None, overrides))
    assert manifest["run"]["reused"]["tokenize"] == 0
    tok = load_tokenizer(tmp_path / "out" / "tokenizer.model")
    first = read_dataset(tmp_path / "out" / "train")[0]
    assert tok.decode(first[:-1].tolist()) == normalize_text(docs[0])


def test_an_output_folder_inside_the_input_folder_is_not_read_back(tmp_path):
    """input.paths=[data], output.dir=data/out: the rerun read its own manifest.json and
    skipped.jsonl as JSONL inputs and failed on the error budget."""
    write_jsonl(tmp_path / "a.jsonl", [english_doc(i) for i in range(6)])
    overrides = [f"input.paths=[{tmp_path}]", f"output.dir={tmp_path / 'out'}", "tokenizer.vocab_size=400"]
    overrides += ["runtime.workers=0", "runtime.progress=false"]
    first = run(load_data_prep_config(None, overrides))
    again = run(load_data_prep_config(None, overrides))
    assert [i["path"] for i in again["inputs"]] == [str(tmp_path / "a.jsonl")]
    assert manifest_without_run(again) == manifest_without_run(first)


def test_second_run_on_the_same_directory_is_refused(tmp_path):
    import fcntl

    path = write_jsonl(tmp_path / "a.jsonl", [english_doc(i) for i in range(5)])
    (tmp_path / "out" / ".work").mkdir(parents=True)
    with open(tmp_path / "out" / ".work" / ".lock", "a+") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(DataPrepError, match="another data_prep run is using"):
            run(
                load_data_prep_config(
                    None, [f"input.paths=[{path}]", f"output.dir={tmp_path / 'out'}", "runtime.workers=0"]
                )
            )


def test_manifest_records_each_stages_cost(planted):
    """run.cost sums the CPU seconds the units' markers recorded: what data_prep.costs scales."""
    from data_prep import costs

    out, m = planted["out"], planted["manifest"]
    cost = m["run"]["cost"]
    for stage, folder in (("clean", "clean"), ("tokenize", "tokens")):
        markers = [json.loads(p.read_text()) for p in (out / ".work" / folder).glob("*.json")]
        assert cost[stage]["units"] == len(markers) == 5
        assert cost[stage]["cpu_seconds"] == pytest.approx(sum(mk["cpu_seconds"] for mk in markers), abs=2e-3)
        assert cost[stage]["cpu_seconds"] > 0
    # data_prep.costs takes the pilot's size from the manifest's inputs: the files' sizes
    assert costs.input_bytes(m) == sum(Path(e["path"]).stat().st_size for e in m["inputs"]) > 0
    assert (
        cost["merge"]["units"] == 1
        and 0 <= cost["merge"]["cpu_seconds"] < m["run"]["stage_seconds"]["tokenize_and_merge"]
    )
    assert "signatures" not in cost and "buckets" not in cost  # near dedup is off here

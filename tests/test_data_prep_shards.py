"""Shards of one input file read back exactly the whole file: every record once, in order, same skips."""

from __future__ import annotations

import json
import random

import pytest

from data_prep.config import InputConfig
from data_prep.readers import InputFile, ReadLog, read_documents, rebase_lines
from data_prep.shards import plan_shards, shards_from_json, shards_to_json
from tests.data_prep_fixtures import english_doc, html_page, write_parquet, write_warc, write_wet


def read_sharded(path, fmt: str, shard_bytes: int, **cfg_keys) -> tuple[list[str], list[dict], dict]:
    """Texts and skip entries of every shard in order, line numbers rebased as the pipeline does."""
    cfg = InputConfig(paths=[str(path)], shard_bytes=shard_bytes, **cfg_keys)
    shards = plan_shards([InputFile(str(path), fmt)], cfg)
    texts, skipped, lines, records = [], [], 0, 0
    for shard in shards:
        log = ReadLog(str(path))
        texts += [t for batch in read_documents(shard.source, cfg, log) for t in batch]
        skipped += rebase_lines(log.skipped, lines)
        lines += log.lines
        records += log.records
    return texts, skipped, {"shards": len(shards), "lines": lines, "records": records}


def jsonl_with_traps(path, docs: list[str]) -> None:
    """Good lines, bad lines, a blank line, a line over max_record_bytes, no final newline."""
    lines = [json.dumps({"text": d}).encode() for d in docs]
    lines.insert(3, b'{"text": "unterminated')
    lines.insert(7, b"")
    lines.insert(9, json.dumps({"text": "x" * 5000}).encode())  # too long with max_record_bytes=4096
    lines.insert(12, b'{"text": "caf\xe9 \xff"}')
    lines.insert(15, b"[1, 2]")
    path.write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("shard_bytes", [1, 97, 700, 4096, 1 << 30])
def test_jsonl_byte_ranges_read_the_same_records_and_skips_as_the_whole_file(tmp_path, shard_bytes):
    path = tmp_path / "big.jsonl"
    jsonl_with_traps(path, [english_doc(i) for i in range(40)])
    keys = {"max_record_bytes": 4096, "read_block_bytes": 1024}
    whole, whole_skips, whole_info = read_sharded(path, "jsonl", 1 << 30, **keys)
    assert whole_info["shards"] == 1 and len(whole) == 40
    assert [e["where"] for e in whole_skips] == ["line 4", "line 13", "line 16"]
    texts, skips, info = read_sharded(path, "jsonl", shard_bytes, **keys)
    assert texts == whole
    assert skips == whole_skips
    assert info["lines"] == whole_info["lines"] == 44  # 45 lines, the last without a newline
    expected_shards = -(-path.stat().st_size // shard_bytes)
    assert info["shards"] == (expected_shards if expected_shards > 1 else 1)


def test_single_member_gzip_jsonl_stays_one_shard(tmp_path):
    import gzip

    path = tmp_path / "a.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps({"text": english_doc(i)}).encode() + b"\n" for i in range(50))))
    shards = plan_shards([InputFile(str(path), "jsonl")], InputConfig(paths=[str(path)], shard_bytes=100))
    assert len(shards) == 1 and shards[0].source.span is None


def test_parquet_row_group_spans_keep_row_numbers(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    docs = [english_doc(i) for i in range(30)]
    texts = docs[:13] + [None] + docs[13:]  # row 13 has no text
    pq.write_table(pa.table({"text": texts}), path, row_group_size=4)
    whole, whole_skips, _ = read_sharded(path, "parquet", 1 << 30)
    texts_read, skips, info = read_sharded(path, "parquet", 1)
    assert info["shards"] == 8  # 31 rows in row groups of 4
    assert texts_read == whole == docs
    assert skips == whole_skips and [e["where"] for e in skips] == ["row 13"]


def test_shard_list_round_trips_and_whole_files_keep_their_ids(tmp_path):
    small = write_parquet(tmp_path / "small.parquet", [english_doc(0)])
    big = tmp_path / "big.jsonl"
    jsonl_with_traps(big, [english_doc(i) for i in range(40)])
    cfg = InputConfig(paths=[str(tmp_path)], shard_bytes=4096)
    shards = plan_shards([InputFile(str(big), "jsonl"), InputFile(str(small), "parquet")], cfg)
    assert [s.part for s in shards][-1] == 0 and shards[-1].source.span is None
    assert [s.index for s in shards] == list(range(len(shards)))
    assert shards_from_json(json.loads(json.dumps(shards_to_json(shards)))) == shards
    import hashlib

    assert shards[-1].shard_id == hashlib.sha1(str(small).encode()).hexdigest()[:16]


def test_a_skipped_long_line_ending_at_a_block_end_does_not_end_the_file(tmp_path):
    """The newline of an over-long line is the last byte of a read block: the lines after it stay."""
    path = tmp_path / "long.jsonl"
    first = json.dumps({"text": "x" * (4095 - 12)}).encode()  # 4095 bytes + newline = 4 blocks of 1024
    assert len(first) == 4095
    path.write_bytes(first + b"\n" + json.dumps({"text": english_doc(1)}).encode() + b"\n")
    texts, skipped, info = read_sharded(path, "jsonl", 1 << 30, max_record_bytes=2048, read_block_bytes=1024)
    assert texts == [english_doc(1)] and skipped == [] and info["lines"] == 2


def multi_member_jsonl(path, docs: list[str], layout: str) -> None:
    """Members of whole lines ("lines"), of fixed byte blocks that cut lines ("blocks", like
    bgzip), or stored (level 0) with a bad line that holds the gzip magic ("stored")."""
    import gzip

    data = b"".join(json.dumps({"text": d}).encode() + b"\n" for d in docs)
    if layout == "lines":
        lines = data.splitlines(keepends=True)
        members = [b"".join(lines[k : k + 3]) for k in range(0, len(lines), 3)]
        path.write_bytes(b"".join(gzip.compress(m, mtime=0) for m in members))
    elif layout == "blocks":  # members end mid-line, and now and then at a line end
        rng = random.Random(0)
        ends = [k + 1 for k in range(len(data)) if data[k] == 10 and rng.random() < 0.2]
        cuts = sorted({0, len(data), *ends, *(rng.randrange(len(data)) for _ in range(40))})
        path.write_bytes(b"".join(gzip.compress(data[a:b], mtime=0) for a, b in zip(cuts, cuts[1:])))
    else:
        lines = data.splitlines(keepends=True)
        lines.insert(5, b'{"text": "\x1f\x8b\x08\x00 not a member"}\n')
        path.write_bytes(
            b"".join(gzip.compress(b"".join(lines[k : k + 4]), 0, mtime=0) for k in range(0, len(lines), 4))
        )


@pytest.mark.parametrize("layout", ["lines", "blocks", "stored"])
@pytest.mark.parametrize("shard_bytes", [500, 3000])
def test_multi_member_gzip_jsonl_is_cut_at_line_starts(tmp_path, layout, shard_bytes):
    path = tmp_path / "members.jsonl.gz"
    multi_member_jsonl(path, [english_doc(i) for i in range(60)], layout)
    whole, whole_skips, whole_info = read_sharded(path, "jsonl", 1 << 30)
    assert whole_info["shards"] == 1 and len(whole) == 60
    texts, skips, info = read_sharded(path, "jsonl", shard_bytes)
    assert info["shards"] > 2
    assert texts == whole and skips == whole_skips and info["lines"] == whole_info["lines"]
    assert [e["where"] for e in skips] == (["line 6"] if layout == "stored" else [])


@pytest.mark.parametrize("shard_bytes", [1, 1500, 5000])
def test_wet_and_warc_members_are_cut_at_record_starts(tmp_path, shard_bytes):
    wet = write_wet(tmp_path / "a.warc.wet.gz", [english_doc(i) for i in range(40)] + [b"caf\xe9 \xff"])
    pages = [("https://example.org/x", "200 OK", "text/html", html_page(f"P{i}", [english_doc(i)])) for i in range(20)]
    pages.insert(7, ("https://example.org/gone", "404 Not Found", "text/html", b"<html>gone</html>"))
    warc = write_warc(tmp_path / "b.warc.gz", pages)
    for path, fmt in ((wet, "wet"), (warc, "warc")):
        whole, whole_skips, whole_info = read_sharded(path, fmt, 1 << 30)
        texts, skips, info = read_sharded(path, fmt, shard_bytes)
        assert info["shards"] > (1 if shard_bytes == 5000 else 4)
        assert texts == whole and skips == whole_skips and info["records"] == whole_info["records"]
    assert [e["where"].split()[0] for e in read_sharded(wet, "wet", 1)[1]] == ["offset"]


def test_gzip_member_cuts_are_checked_member_starts(tmp_path):
    """Every cut is where a member starts: inflating from it gives the member sequence of the whole file."""
    import zlib

    from data_prep.shards import _gzip_member_spans

    path = tmp_path / "blocks.jsonl.gz"
    multi_member_jsonl(path, [english_doc(i) for i in range(60)], "blocks")
    data = path.read_bytes()
    starts, position = [0], 0
    while position < len(data):
        decoder = zlib.decompressobj(wbits=31)
        decoder.decompress(data[position:])
        position = len(data) - len(decoder.unused_data)
        starts.append(position)
    spans = _gzip_member_spans(str(path), "jsonl", 1000)
    assert len(spans) > 3 and spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert {start for start, _ in spans} <= set(starts)


def test_pipeline_output_is_the_same_with_gzip_members_cut(tmp_path):
    """WET and multi-member JSONL cut into member runs write the bytes and manifest of whole files."""
    from data_prep.api import load_data_prep_config
    from data_prep.pipeline import manifest_without_run, run

    raw = tmp_path / "raw"
    raw.mkdir()
    write_wet(raw / "a.warc.wet.gz", [english_doc(i) for i in range(60)] + [b"caf\xe9 \xff"])
    multi_member_jsonl(raw / "b.jsonl.gz", [english_doc(i) for i in range(60, 120)], "blocks")
    outputs = {}
    for shard_bytes in (1 << 30, 3000):
        out = tmp_path / f"out-{shard_bytes}"
        manifest = run(
            load_data_prep_config(
                None,
                [
                    f"input.paths=[{raw}]",
                    f"output.dir={out}",
                    f"input.shard_bytes={shard_bytes}",
                    "tokenizer.vocab_size=400",
                    "split.valid_fraction=0.2",
                    "runtime.workers=2",
                    "runtime.progress=false",
                ],
            )
        )
        shards = len(list((out / ".work" / "clean").glob("*.json")))
        files = {name: (out / name).read_bytes() for name in ("train.bin", "train.idx", "valid.bin", "valid.idx")}
        manifest = manifest_without_run(manifest)
        manifest["config"]["input"].pop("shard_bytes")
        outputs[shard_bytes] = (shards, files, manifest)
    assert outputs[1 << 30][0] == 2 and outputs[3000][0] > 6
    assert outputs[3000][1] == outputs[1 << 30][1] and outputs[3000][2] == outputs[1 << 30][2]

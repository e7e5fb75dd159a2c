"""Shards of one input file read back exactly the whole file: every record once, in order, same skips."""

from __future__ import annotations

import json

import pytest

from data_prep.config import InputConfig
from data_prep.readers import InputFile, ReadLog, read_documents, rebase_lines
from data_prep.shards import plan_shards, shards_from_json, shards_to_json
from tests.data_prep_fixtures import english_doc, write_parquet


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


def test_compressed_jsonl_stays_one_shard(tmp_path):
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

"""Readers: every format, and every kind of bad input named by file and line / offset / row."""

from __future__ import annotations

import gzip
import json

import pytest

from data_prep.config import InputConfig
from data_prep.readers import InputError, detect_format, expand_inputs, read_all_texts
from tests.data_prep_fixtures import english_doc, html_page, write_jsonl, write_parquet, write_warc, write_wet


def cfg(**kw) -> InputConfig:
    return InputConfig(paths=["unused"], **kw)


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("CC-MAIN-2024-10-00001.warc.wet.gz", "wet"),
        ("x.warc.gz", "warc"),
        ("c4-train.00001-of-01024.json.gz", "jsonl"),
        ("rp.jsonl.zst", "jsonl"),
        ("fineweb-000.parquet", "parquet"),
        ("notes.txt", None),
    ],
)
def test_detect_format(name, fmt):
    assert detect_format(name) == fmt


def test_expand_inputs_sorted_globs_and_errors(tmp_path):
    for name in ("b.jsonl", "a.jsonl.gz", "c.parquet", "readme.txt"):
        (tmp_path / name).write_bytes(b"")
    files = expand_inputs(InputConfig(paths=[str(tmp_path)]))  # a directory: known formats only
    assert [(f.path.rsplit("/", 1)[1], f.format) for f in files] == [
        ("a.jsonl.gz", "jsonl"),
        ("b.jsonl", "jsonl"),
        ("c.parquet", "parquet"),
    ]
    with pytest.raises(InputError, match="matches no file"):
        expand_inputs(InputConfig(paths=[str(tmp_path / "*.warc.gz")]))
    with pytest.raises(InputError, match="cannot tell the format of .*readme.txt"):
        expand_inputs(InputConfig(paths=[str(tmp_path / "readme.txt")]))
    assert expand_inputs(InputConfig(paths=[str(tmp_path / "readme.txt")], format="jsonl"))[0].format == "jsonl"


def test_a_walked_directory_skips_hidden_and_underscore_names(tmp_path):
    """A Spark/Hadoop output folder: part files, their hidden .crc checksums, _SUCCESS, a
    _temporary folder. Only the part files are data, also with an explicit input.format."""
    (tmp_path / "_temporary" / "0").mkdir(parents=True)
    (tmp_path / ".cache").mkdir()
    for name in ("part-00000", "part-00001", ".part-00000.crc", "_SUCCESS", "_temporary/0/part-00002", ".cache/x.json"):
        (tmp_path / name).write_bytes(b"")
    files = expand_inputs(InputConfig(paths=[str(tmp_path)], format="jsonl"))
    assert [f.path.rsplit("/", 1)[1] for f in files] == ["part-00000", "part-00001"]
    named = expand_inputs(InputConfig(paths=[str(tmp_path / "_SUCCESS")], format="jsonl"))  # named: taken
    assert [f.path for f in named] == [str(tmp_path / "_SUCCESS")]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_compressions_and_text_key(tmp_path, suffix):
    docs = [english_doc(i) for i in range(5)]
    path = write_jsonl(tmp_path / f"d{suffix}", [{"content": d, "meta": {"n": i}} for i, d in enumerate(docs)])
    texts, log = read_all_texts(path, cfg(text_key="content"))
    assert texts == docs and log.records == 5 and log.skipped == []


def test_jsonl_bad_lines_are_named(tmp_path):
    lines = [
        json.dumps({"text": "first good"}),
        "",  # blank line: ignored
        '{"text": "broken',
        json.dumps({"other": "no text key"}),
        json.dumps({"text": 42}),
        json.dumps(["not", "an", "object"]),
        '{"text": "lone surrogate \\ud800 here"}',
        json.dumps({"text": "last good"}),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(("\n".join(lines)).encode() + b'\n{"text": "bad byte \xff"}')  # no final newline
    texts, log = read_all_texts(path, cfg())
    assert texts == ["first good", "last good"]
    assert [(s["where"], s["reason"].split(":")[0]) for s in log.skipped] == [
        ("line 3", "invalid JSON"),
        ("line 4", "key 'text' is missing (the record's keys"),
        ("line 5", "key 'text' is int, not a string"),
        ("line 6", "not a JSON object but list"),
        ("line 7", "undecodable text"),
        ("line 9", "undecodable bytes (not UTF-8)"),
    ]
    assert all(s["path"] == str(path) for s in log.skipped)
    assert (
        log.skipped[1]["reason"]
        == "key 'text' is missing (the record's keys: 'other'; input.text_key names the text's)"
    )
    texts, log = read_all_texts(path, cfg(on_decode_error="replace"))
    assert texts[-2:] == ["last good", "bad byte \ufffd"] and "lone surrogate ? here" in texts


def test_jsonl_huge_line_is_dropped_not_loaded(tmp_path):
    path = tmp_path / "huge.jsonl"
    path.write_text(
        json.dumps({"text": "small one"})
        + "\n"
        + json.dumps({"text": "x" * 50_000})
        + "\n"
        + json.dumps({"text": "after"})
        + "\n"
    )
    texts, log = read_all_texts(path, cfg(max_record_bytes=10_000, read_block_bytes=4096))
    assert texts == ["small one", "after"] and log.dropped["too_long"] == 1 and log.skipped == []


def test_jsonl_many_blocks_keep_line_numbers(tmp_path):
    records = [english_doc(i) for i in range(300)]
    records[217] = {"text": None}
    path = write_jsonl(tmp_path / "many.jsonl.gz", records)
    texts, log = read_all_texts(path, cfg(read_block_bytes=4096))
    assert len(texts) == 299 and texts[217] == english_doc(218)
    assert log.skipped == [{"path": str(path), "where": "line 218", "reason": "key 'text' is null"}]


def test_truncated_and_corrupt_gzip(tmp_path):
    data = write_jsonl(tmp_path / "whole.jsonl.gz", [english_doc(i) for i in range(200)]).read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: len(data) // 2])
    texts, log = read_all_texts(cut, cfg())
    assert 0 < len(texts) < 200 and texts == [english_doc(i) for i in range(len(texts))]
    (skip,) = log.skipped
    assert skip["where"] == f"line {len(texts) + 1}" and "ends early" in skip["reason"] and log.stopped_early
    garbage = tmp_path / "garbage.jsonl.gz"
    garbage.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 64)
    texts, log = read_all_texts(garbage, cfg())
    assert texts == [] and log.skipped[0]["where"] == "file" and "corrupt compressed data" in log.skipped[0]["reason"]


def test_multi_member_gzip(tmp_path):
    path = tmp_path / "members.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"text": "one"}\n') + gzip.compress(b'{"text": "two"}\n'))
    assert read_all_texts(path, cfg())[0] == ["one", "two"]


def test_parquet_rows_nulls_and_missing_column(tmp_path):
    path = write_parquet(tmp_path / "p.parquet", ["a doc", None, "another doc", "x" * 100], row_group_size=2)
    texts, log = read_all_texts(path, cfg(max_record_bytes=50))
    assert texts == ["a doc", "another doc"] and log.dropped["too_long"] == 1
    assert log.skipped == [{"path": str(path), "where": "row 1", "reason": "key 'text' is null"}]
    texts, log = read_all_texts(path, cfg(text_key="body"))
    assert texts == [] and log.stopped_early and "no column 'body'" in log.skipped[0]["reason"]
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not really")
    texts, log = read_all_texts(bad, cfg())
    assert texts == [] and log.skipped[0]["where"] == "file" and "parquet" in log.skipped[0]["reason"]


def test_wet_records_and_truncation(tmp_path):
    docs = [english_doc(i) for i in range(3)]
    path = write_wet(tmp_path / "a.warc.wet.gz", docs)
    texts, log = read_all_texts(path, cfg())
    assert texts == docs and log.records == 3
    cut = tmp_path / "cut.warc.wet.gz"
    cut.write_bytes(path.read_bytes()[:-40])
    texts, log = read_all_texts(cut, cfg())
    assert texts == docs[:2]
    (skip,) = log.skipped
    assert (
        skip["where"].startswith("offset ") and "<urn:uuid:" in skip["where"] and "truncated record" in skip["reason"]
    )
    offset = int(skip["where"].split()[1])
    assert cut.read_bytes()[offset : offset + 2] == b"\x1f\x8b"  # the record's own gzip member starts there


def test_wet_undecodable_record(tmp_path):
    path = write_wet(tmp_path / "u.warc.wet.gz", [english_doc(1), b"caf\xe9 \xff broken", english_doc(2)])
    texts, log = read_all_texts(path, cfg())
    assert texts == [english_doc(1), english_doc(2)]
    assert len(log.skipped) == 1 and "undecodable bytes" in log.skipped[0]["reason"]
    texts, _ = read_all_texts(path, cfg(on_decode_error="replace"))
    assert texts[1] == "caf\ufffd \ufffd broken"


def test_warc_html_extraction_and_not_html(tmp_path):
    pages = [
        ("https://e.org/a", "200 OK", "text/html; charset=utf-8", html_page("Alpha", [english_doc(1)])),
        ("https://e.org/b.png", "200 OK", "image/png", b"\x89PNG"),
        ("https://e.org/c", "404 Not Found", "text/html", b"<p>missing</p>"),
        (
            "https://e.org/d",
            "200 OK",
            "text/html; charset=iso-8859-1",
            html_page("Caf\xe9", ["Une tasse de caf\xe9."]).decode().encode("latin-1"),
        ),
    ]
    path = write_warc(tmp_path / "p.warc.gz", pages)
    texts, log = read_all_texts(path, cfg())
    assert len(texts) == 2 and log.dropped == {"not_html": 2} and log.skipped == []
    assert english_doc(1).split("\n\n")[0] in texts[0] and "Home" not in texts[0]  # navigation removed
    assert "Une tasse de café." in texts[1]  # decoded with the HTTP charset
    traf, _ = read_all_texts(path, cfg(html_extractor="trafilatura")) if _has_trafilatura() else (None, None)
    if traf is not None:
        assert english_doc(1).split("\n\n")[0][:60] in traf[0]


def _has_trafilatura() -> bool:
    try:
        import trafilatura  # noqa: F401
    except ImportError:
        return False
    return True


def test_warc_corrupt_member_is_skipped_and_reading_resumes(tmp_path):
    pages = [(f"https://e.org/{i}", "200 OK", "text/html", html_page(f"P{i}", [english_doc(i)])) for i in range(4)]
    path = write_warc(tmp_path / "c.warc.gz", pages)
    data = bytearray(path.read_bytes())
    members = [i for i in range(len(data)) if data[i : i + 3] == b"\x1f\x8b\x08"]
    assert len(members) == 4
    start, end = members[1], members[2]
    data[start + 40 : start + 80] = b"\x00" * 40  # damage the second record's deflate data
    path.write_bytes(bytes(data))
    texts, log = read_all_texts(path, cfg())
    assert len(texts) == 3 and "P1" not in " ".join(texts) and "P3" in texts[-1]
    (skip,) = log.skipped
    assert skip["where"] == f"offset {members[0]}-{end}" or skip["where"].endswith(f"-{end}")
    assert "skipped up to the next record" in skip["reason"] and not log.stopped_early


def test_offsets_after_a_corrupt_member_are_file_offsets(tmp_path):
    """A record named after reading resumed is named by its own file offset (it was counted twice)."""
    path = write_wet(tmp_path / "c.warc.wet.gz", [english_doc(i) for i in range(3)] + [b"caf\xe9 \xff"])
    data = bytearray(path.read_bytes())
    members = [i for i in range(len(data)) if data[i : i + 3] == b"\x1f\x8b\x08"]
    data[members[1] + 40 : members[1] + 80] = b"\x00" * 40
    path.write_bytes(bytes(data))
    texts, log = read_all_texts(path, cfg())
    assert len(texts) == 2
    assert [e["where"].split()[1] for e in log.skipped] == [f"{members[0]}-{members[2]}", str(members[3])]


def test_uncompressed_warc_and_garbage(tmp_path):
    pages = [("https://e.org/a", "200 OK", "text/html", html_page("A", [english_doc(3)]))]
    plain = write_warc(tmp_path / "plain.warc", pages, gzip_records=False)
    assert len(read_all_texts(plain, cfg())[0]) == 1
    junk = tmp_path / "junk.warc.gz"
    junk.write_bytes(b"hello, I am not a WARC file at all\n" * 3)
    texts, log = read_all_texts(junk, cfg())
    assert texts == [] and log.stopped_early and "corrupt WARC data" in log.skipped[0]["reason"]


def test_unreadable_file(tmp_path):
    missing = tmp_path / "gone.jsonl"
    texts, log = read_all_texts(missing, cfg())
    assert texts == [] and log.skipped[0]["where"] == "file" and "unreadable" in log.skipped[0]["reason"]

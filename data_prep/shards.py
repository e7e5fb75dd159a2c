"""Units of work over the input list: whole files, or byte / row-group ranges of large ones.

A worker's speed is one shard's speed, so a single large input must become many shards for
the cores (or array tasks) to share it. Plain JSONL is cut into ``input.shard_bytes`` byte
ranges (a line belongs to the range holding its first byte, data_prep.readers); parquet into
runs of row groups of about that much uncompressed data; Arrow files (Hugging Face datasets)
into runs of rows of about that much data; multi-member gzip files (WET and
WARC files, where each record is its own member, and concatenated or block-compressed JSONL)
into runs of whole members of about that many compressed bytes, cut only where a record
(WARC/WET) or a line (JSONL) starts: see :func:`_gzip_member_spans`. A single-member gzip and
zstd stay one shard: a deflate or zstd stream can only be read from its start.

Shards are numbered in input order, then file order, so reading them in order reproduces the
documents of the whole input in order, and every cross-shard decision made in that order
(dedup, split, tokenizer sample) is the same whatever the cut. The layout depends only on the
inputs and ``input.shard_bytes``, never on the number of workers or array tasks.
"""

from __future__ import annotations

import hashlib
import math
import os
import zlib
from dataclasses import dataclass
from typing import BinaryIO

from data_prep.config import InputConfig
from data_prep.readers import InputFile

_COMPRESSED = (".gz", ".zst", ".zstd")
_GZIP_MAGIC = b"\x1f\x8b\x08"  # ID1 ID2 and CM=deflate: how every gzip member starts
_WARC_HEADER = b"WARC/1."


@dataclass(frozen=True)
class Shard:
    index: int  # position in the run's shard list (input order, then file order)
    source: InputFile  # the file and the span of it this shard reads
    shard_id: str  # stable name of this shard's files under .work/
    part: int  # 0 for a file's first shard: it also hashes the whole file for the manifest

    def describe(self) -> str:
        """The shard in an error message: the path, plus the span when it is part of a file."""
        if self.source.span is None:
            return self.source.path
        unit = {"parquet": "row groups", "arrow": "rows"}.get(self.source.format, "bytes")
        return f"{self.source.path} ({unit} {self.source.span[0]}-{self.source.span[1]})"


def shard_id(path: str, span: tuple[int, int] | None) -> str:
    """A whole file keeps the id it always had (the hash of its path); a span adds its bounds."""
    key = path if span is None else f"{path}#{span[0]}-{span[1]}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def plan_shards(sources: list[InputFile], cfg: InputConfig) -> list[Shard]:
    shards: list[Shard] = []
    for source in sources:
        for part, span in enumerate(_spans(source, cfg.shard_bytes)):
            piece = InputFile(source.path, source.format, span)
            shards.append(Shard(len(shards), piece, shard_id(source.path, span), part))
    return shards


def _spans(source: InputFile, shard_bytes: int) -> list[tuple[int, int] | None]:
    """[None] for a file read whole, else consecutive spans covering it."""
    if source.format == "jsonl" and not source.path.lower().endswith(_COMPRESSED):
        try:
            size = os.path.getsize(source.path)
        except OSError:
            return [None]  # the reader reports the problem, once
        count = math.ceil(size / shard_bytes)
        if count <= 1:
            return [None]
        bounds = [size * k // count for k in range(count + 1)]  # equal sizes: balanced tasks
        return list(zip(bounds[:-1], bounds[1:]))
    if source.format == "parquet":
        return _row_group_spans(source.path, shard_bytes)
    if source.format == "arrow":
        return _row_spans(source.path, shard_bytes)
    if source.path.lower().endswith(".gz"):
        try:
            return _gzip_member_spans(source.path, source.format, shard_bytes)
        except OSError:
            return [None]
    return [None]


def _gzip_member_spans(path: str, fmt: str, shard_bytes: int) -> list[tuple[int, int] | None]:
    """Cuts of a multi-member gzip file at member starts, near equal compressed sizes.

    Near each target offset the first gzip magic (``1f 8b 08``) is taken as a candidate and
    checked by inflating that whole member, which zlib verifies against the member's CRC-32
    and length; the bytes after it must start another member or end the file. A WARC/WET cut
    is taken only at a member that inflates to a WARC header (a record start); a JSONL cut
    only after a member whose text ends in a newline (a line start), walking a few members on
    from the candidate. Where no such cut lies before the next target, there is none: the
    shard is bigger. Costs one inflated member (or a few) per cut, not a pass over the file.
    A reader of a span stops at its end, which must be a member end (data_prep.readers), so
    every record is read once, in order, by the shard holding its first member.
    """
    size = os.path.getsize(path)
    count = math.ceil(size / shard_bytes)
    if count <= 1:
        return [None]
    cuts = [0]
    with open(path, "rb") as fh:
        if fh.read(len(_GZIP_MAGIC)) != _GZIP_MAGIC:
            return [None]  # not gzip: the reader reports it
        for k in range(1, count):
            start, limit = max(size * k // count, cuts[-1] + 1), size * (k + 1) // count
            cut = _member_cut(fh, start, limit, fmt, size) if start < limit else None
            if cut is not None:
                cuts.append(cut)
    if len(cuts) == 1:
        return [None]
    return list(zip(cuts, [*cuts[1:], size]))


def _member_cut(fh: BinaryIO, start: int, limit: int, fmt: str, size: int) -> int | None:
    """Where a shard of a multi-member gzip may start, from the first member start in [start,
    limit) (a JSONL cut may lie a few members past it), or None."""
    candidate = _find_magic(fh, start, limit)
    while candidate is not None:
        member = _inflate_member(fh, candidate, size)
        if member is not None:
            break
        candidate = _find_magic(fh, candidate + 1, limit)
    else:
        return None
    if fmt in ("wet", "warc"):
        end, head, _ = member
        if head.startswith(_WARC_HEADER) and (end == size or _inflate_member(fh, end, size) is not None):
            return candidate
        return None
    for _ in range(64):  # JSONL: the next member start that follows a newline
        end, _, last = member
        if end >= size:
            return None
        following = _inflate_member(fh, end, size)
        if following is None:
            return None
        if last == b"\n":
            return end
        member = following
    return None


def _find_magic(fh: BinaryIO, start: int, limit: int) -> int | None:
    window = 1 << 16  # WET/WARC members are a few KB: the first window usually holds one
    position = start
    while position < limit:
        fh.seek(position)
        data = fh.read(min(window, limit - position) + len(_GZIP_MAGIC) - 1)
        found = data.find(_GZIP_MAGIC)
        if 0 <= found and position + found < limit:
            return position + found
        if len(data) < len(_GZIP_MAGIC):
            return None
        position += len(data) - len(_GZIP_MAGIC) + 1
        window = min(window * 2, 1 << 22)
    return None


def _inflate_member(fh: BinaryIO, offset: int, size: int) -> tuple[int, bytes, bytes] | None:
    """(end offset, first bytes, last byte) of the gzip member at ``offset``; None unless it
    inflates to its end and matches its CRC-32 and length (zlib checks both)."""
    fh.seek(offset)
    decoder = zlib.decompressobj(wbits=31)
    head, last, fed = b"", b"", 0
    try:
        while not decoder.eof:
            raw = fh.read(1 << 16)
            if not raw:
                return None  # the file ends inside the member
            fed += len(raw)
            out = decoder.decompress(raw)
            if out:
                if len(head) < 16:
                    head += out[: 16 - len(head)]
                last = out[-1:]
    except zlib.error:
        return None
    return offset + fed - len(decoder.unused_data), head, last


def _row_group_spans(path: str, shard_bytes: int) -> list[tuple[int, int] | None]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
    except (OSError, pa.ArrowException):
        return [None]  # not readable: the reader reports it
    spans: list[tuple[int, int] | None] = []
    first, size = 0, 0
    for group in range(meta.num_row_groups):
        size += meta.row_group(group).total_byte_size
        if size >= shard_bytes:
            spans.append((first, group + 1))
            first, size = group + 1, 0
    if first < meta.num_row_groups:
        spans.append((first, meta.num_row_groups))
    return spans if len(spans) > 1 else [None]


def _row_spans(path: str, shard_bytes: int) -> list[tuple[int, int] | None]:
    """Runs of rows of an Arrow file holding about ``shard_bytes`` of data each (its rows are
    memory-mapped: any row range is read without the rows before it)."""
    from data_prep.readers import open_arrow

    try:
        table = open_arrow(path).data
    except Exception:
        return [None]  # not readable: the reader reports it
    rows, size = table.num_rows, table.nbytes
    count = min(rows, math.ceil(size / shard_bytes)) if rows else 0
    if count <= 1:
        return [None]
    bounds = [rows * k // count for k in range(count + 1)]
    return list(zip(bounds[:-1], bounds[1:]))


def shards_to_json(shards: list[Shard]) -> list[dict]:
    return [{"path": s.source.path, "format": s.source.format, "span": s.source.span, "part": s.part} for s in shards]


def shards_from_json(entries: list[dict]) -> list[Shard]:
    """The frozen shard list of a SLURM submission (every task reads the same one)."""
    shards = []
    for index, entry in enumerate(entries):
        span = tuple(entry["span"]) if entry["span"] is not None else None
        source = InputFile(entry["path"], entry["format"], span)  # type: ignore[arg-type]
        shards.append(Shard(index, source, shard_id(entry["path"], span), entry["part"]))
    return shards

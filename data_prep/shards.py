"""Units of work over the input list: whole files, or byte / row-group ranges of large ones.

A worker's speed is one shard's speed, so a single large input must become many shards for
the cores (or array tasks) to share it. Plain JSONL is cut into ``input.shard_bytes`` byte
ranges (a line belongs to the range holding its first byte, data_prep.readers); parquet into
runs of row groups of about that much uncompressed data. Compressed JSONL (gzip, zstd), WET
and WARC files stay one shard each: a compressed stream can only be read from its start
(a multi-member gzip could be cut at member starts, but finding them means inflating it all).

Shards are numbered in input order, then file order, so reading them in order reproduces the
documents of the whole input in order, and every cross-shard decision made in that order
(dedup, split, tokenizer sample) is the same whatever the cut. The layout depends only on the
inputs and ``input.shard_bytes``, never on the number of workers or array tasks.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass

from data_prep.config import InputConfig
from data_prep.readers import InputFile

_COMPRESSED = (".gz", ".zst", ".zstd")


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
        unit = "bytes" if self.source.format == "jsonl" else "row groups"
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
    return [None]


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

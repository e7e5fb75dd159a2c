"""Read raw shards (JSONL, parquet, Arrow, WET, WARC) into batches of document texts.

Every reader yields ``list[str]`` batches and reports what it could not use to a
:class:`ReadLog`: records it skipped (with the file and the line, row group, or WARC
offset and record ID) and records it dropped on purpose (``too_long``, ``not_html``).
A bad record never stops the file; a corrupt compressed stream ends the file with one
skip entry naming where reading stopped, and a WARC file is resynchronised at the next
intact gzip member so only the damaged records are lost.
"""

from __future__ import annotations

import glob
import io
import json
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Optional

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from data_prep.config import InputConfig

# Longest suffix first: ".warc.wet.gz" must win over ".warc.gz".
_SUFFIX_FORMATS = (
    (".warc.wet.gz", "wet"),
    (".wet.gz", "wet"),
    (".wet", "wet"),
    (".warc.gz", "warc"),
    (".warc", "warc"),
    (".jsonl.gz", "jsonl"),
    (".jsonl.zst", "jsonl"),
    (".jsonl.zstd", "jsonl"),
    (".json.gz", "jsonl"),
    (".json.zst", "jsonl"),
    (".jsonl", "jsonl"),
    (".ndjson", "jsonl"),
    (".json", "jsonl"),
    (".parquet", "parquet"),
    (".arrow", "arrow"),  # a Hugging Face dataset's Arrow stream file (save_to_disk, hub cache)
)
_GZIP_MAGIC = b"\x1f\x8b\x08"
NEWLINE = b"\n"
_BATCH_DOCS = 512  # documents per yielded batch for record-at-a-time formats


class InputError(ValueError):
    """The input list itself is unusable (no files match, unknown format)."""


@dataclass
class InputFile:
    path: str  # absolute path
    format: str  # jsonl | parquet | arrow | wet | warc
    # Part of the file to read (data_prep/shards.py): byte range [start, end) of a plain JSONL
    # file (the lines whose first byte lies in it), whole gzip members [start, end) of a
    # multi-member gzip file, row groups [first, last) of a parquet file, or rows [first,
    # last) of an Arrow file.
    span: Optional[tuple[int, int]] = None


@dataclass
class ReadLog:
    """What one input file produced besides documents."""

    path: str
    records: int = 0  # documents handed to the cleaner
    skipped: list[dict] = field(default_factory=list)  # {"path", "where", "reason"}
    dropped: Counter = field(default_factory=Counter)  # reader-level filters: too_long, not_html
    stopped_early: bool = False  # the rest of the file could not be read
    lines: int = 0  # JSONL: newlines read; the next byte-range shard of the file numbers its lines from here
    relative_lines: bool = False  # a byte-range shard past the file's start: "line N" counts from its start

    def skip(self, where: str, reason: str) -> None:
        self.skipped.append({"path": self.path, "where": where, "reason": reason})

    def skip_line(self, line: int, reason: str) -> None:
        """A bad JSONL line; in a byte-range shard the entry keeps ``line`` for :func:`rebase_lines`."""
        self.skip(f"line {line}", reason)
        if self.relative_lines:
            self.skipped[-1]["line"] = line


def rebase_lines(entries: list[dict], first_line: int) -> list[dict]:
    """Skip entries of a byte-range shard with file line numbers: ``first_line`` lines precede the shard."""
    out = []
    for entry in entries:
        entry = dict(entry)
        line = entry.pop("line", None)
        if line is not None:
            entry["where"] = f"line {line + first_line}"
        out.append(entry)
    return out


def detect_format(path: str) -> str | None:
    name = os.path.basename(path).lower()
    for suffix, fmt in _SUFFIX_FORMATS:
        if name.endswith(suffix):
            return fmt
    return None


def _ignored(name: str) -> bool:
    """Hidden and ``_``-prefixed names in a walked directory are no data (Spark's ``_SUCCESS`` and
    ``.part-*.crc``, editors' files), as Hugging Face datasets resolves data folders."""
    return name.startswith((".", "_"))


def expand_inputs(cfg: InputConfig) -> list[InputFile]:
    """Files from ``input.paths`` (files, directories, globs), sorted, each with its format.

    A directory that is a Hugging Face dataset (save_to_disk, hub cache) gives the files of
    ``input.hf_split`` in the dataset's own row order (data_prep/hf_datasets.py), not sorted.
    """
    from data_prep.hf_datasets import HFDatasetError, hf_dataset_files, is_hf_dataset

    found: dict[str, str | None] = {}
    ordered: list[InputFile] = []  # Hugging Face datasets: their order, before the sorted rest
    for pattern in cfg.paths:
        pattern = os.path.expanduser(pattern)
        if os.path.isdir(pattern) and is_hf_dataset(pattern):
            try:
                ordered += [InputFile(path, fmt) for path, fmt in hf_dataset_files(pattern, cfg)]
            except HFDatasetError as exc:
                raise InputError(str(exc)) from exc
            continue
        if os.path.isdir(pattern):
            for root, dirs, files in os.walk(pattern):
                dirs[:] = [d for d in dirs if not _ignored(d)]
                for name in files:
                    if _ignored(name):
                        continue
                    full = os.path.join(root, name)
                    fmt = detect_format(full) if cfg.format == "auto" else cfg.format
                    if fmt is not None:  # directories: take the files we know how to read
                        found[os.path.abspath(full)] = fmt
            continue
        if glob.has_magic(pattern):
            matches = sorted(glob.glob(pattern, recursive=True))
        else:
            matches = [pattern] if os.path.lexists(pattern) else []
        if not matches:
            raise InputError(f"input.paths: {pattern!r} matches no file")
        for match in matches:
            if os.path.isdir(match):
                continue
            found[os.path.abspath(match)] = detect_format(match) if cfg.format == "auto" else cfg.format
    unknown = [p for p, fmt in found.items() if fmt is None]
    if unknown:
        raise InputError(
            f"input.format: cannot tell the format of {unknown[0]!r} from its name; "
            f"set input.format to one of jsonl, parquet, arrow, wet, warc"
        )
    if not found and not ordered:
        raise InputError(f"input.paths: {list(cfg.paths)} holds no readable input files")
    return ordered + [InputFile(path, fmt) for path, fmt in sorted(found.items())]  # type: ignore[arg-type]


def read_documents(source: InputFile, cfg: InputConfig, log: ReadLog) -> Iterator[list[str]]:
    """Batches of document texts from one file (or its ``span``); problems go to ``log``, never raise."""
    log.relative_lines = source.span is not None and source.span[0] > 0
    try:
        if source.format == "jsonl":
            yield from _read_jsonl(source.path, cfg, log, source.span)
        elif source.format == "parquet":
            yield from _read_parquet(source.path, cfg, log, source.span)
        elif source.format == "arrow":
            yield from _read_arrow(source.path, cfg, log, source.span)
        else:
            if source.span is not None and not source.path.lower().endswith(".gz"):
                raise ValueError(f"{source.path}: only gzip {source.format} files are read in spans")
            yield from {"wet": _read_wet, "warc": _read_warc}[source.format](source.path, cfg, log, source.span)
    except OSError as exc:  # cannot open or decompress, or an I/O error the format reader did not catch
        what = "corrupt compressed data" if isinstance(exc, CorruptStream) else "unreadable"
        log.skip("file" if log.records == 0 else f"after record {log.records}", f"{what}: {exc}")
        log.stopped_early = True


# ----------------------------------------------------------------------------- JSONL


class CorruptStream(OSError):
    """A compressed stream ended early or holds bad data; everything before it was returned."""


def _decompressed_chunks(path: str, chunk_bytes: int, span: tuple[int, int] | None = None) -> Iterator[bytes]:
    """Decompressed data of a plain, gzip (multi-member) or zstd file, chunk by chunk; with
    ``span``, of the gzip members in that byte range (it must end where a member ends).

    Damage raises :class:`CorruptStream` only after every byte before it has been yielded,
    so a truncated download still gives its first documents.
    """
    lower = path.lower()
    with open(path, "rb") if span is None else _Window(path, *span) as fh:
        if not lower.endswith((".gz", ".zst", ".zstd")):
            while chunk := fh.read(chunk_bytes):
                yield chunk
            return
        if lower.endswith(".gz"):
            new_decoder = lambda: zlib.decompressobj(wbits=31)  # noqa: E731
            errors: tuple[type[BaseException], ...] = (zlib.error,)
        else:
            import zstandard

            new_decoder = zstandard.ZstdDecompressor().decompressobj
            errors = (zstandard.ZstdError,)
        decoder = new_decoder()
        read = 0
        while raw := fh.read(1 << 20):
            read += len(raw)
            try:
                data = decoder.decompress(raw)
                while decoder.eof and decoder.unused_data:  # next member of a multi-member file
                    rest = decoder.unused_data
                    decoder = new_decoder()
                    data += decoder.decompress(rest)
            except errors as exc:
                raise CorruptStream(f"bad compressed data near byte {read} of the file: {exc}") from exc
            if data:
                yield data
        if not decoder.eof:
            raise CorruptStream(f"compressed stream ends early (file cut off at {read} bytes)")


class _Window(io.RawIOBase):
    """A file read only up to ``end`` (end of file there), first positioned at ``start``;
    seek and tell use file offsets."""

    def __init__(self, path: str, start: int, end: int) -> None:
        super().__init__()
        self._fh = open(path, "rb")
        self._fh.seek(start)
        self._end = end

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def readinto(self, buffer) -> int:
        room = self._end - self._fh.tell()
        if room <= 0:
            return 0
        view = memoryview(buffer)
        return self._fh.readinto(view[: min(len(view), room)])

    def close(self) -> None:
        self._fh.close()
        super().close()


def _span_chunks(path: str, start: int, end: int, chunk_bytes: int) -> Iterator[bytes]:
    """The lines of a plain file whose first byte lies in [start, end), chunk by chunk.

    A line belongs to the span holding its first byte, so consecutive spans give every line
    exactly once, in order: the bytes before the first line start are skipped, and the line
    running over ``end`` is read to its newline.
    """
    with open(path, "rb") as fh:
        position = 0
        if start > 0:
            fh.seek(start - 1)
            position = start - 1
            while True:  # a line starts after the first newline at or after start - 1
                data = fh.read(chunk_bytes)
                cut = data.find(NEWLINE)
                if cut >= 0:
                    position += cut + 1
                    break
                position += len(data)
                if not data or position >= end:
                    return
            if position >= end:
                return
            fh.seek(position)
        last = b"\n"
        while position < end:
            data = fh.read(min(chunk_bytes, end - position))
            if not data:
                return
            position += len(data)
            last = data[-1:]
            yield data
        while last != NEWLINE:  # finish the line that crosses the span's end
            data = fh.read(chunk_bytes)
            if not data:
                return
            cut = data.find(NEWLINE)
            if cut >= 0:
                yield data[: cut + 1]
                return
            yield data


def _read_jsonl(path: str, cfg: InputConfig, log: ReadLog, span: tuple[int, int] | None) -> Iterator[list[str]]:
    """Blocks of whole lines parsed by pyarrow; a block that fails is re-parsed line by line."""
    schema = pa.schema([(cfg.text_key, pa.large_string())])
    parse_options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    line_no = 0  # lines before the current block
    pending = b""
    skipping_long_line = False
    if span is None:
        chunks = _decompressed_chunks(path, cfg.read_block_bytes)
    elif path.lower().endswith(".gz"):  # whole gzip members, cut where a line starts (data_prep/shards.py)
        chunks = _decompressed_chunks(path, cfg.read_block_bytes, span)
    elif path.lower().endswith((".zst", ".zstd")):
        raise ValueError(f"{path}: a zstd file cannot be read from a byte offset")
    else:
        chunks = _span_chunks(path, span[0], span[1], cfg.read_block_bytes)
    while True:
        try:
            chunk = next(chunks, b"")
        except CorruptStream as exc:
            if log.records == 0 and line_no == 0 and not pending:
                raise  # nothing readable at all: the file fails
            complete = pending[: pending.rfind(NEWLINE) + 1]
            log.skip_line(
                line_no + complete.count(NEWLINE) + 1, f"corrupt compressed data, rest of file skipped: {exc}"
            )
            log.stopped_early = True
            chunk, pending = b"", complete
        end_of_file = not chunk  # (a chunk emptied below by a skipped line's end is not the end)
        if skipping_long_line:
            cut = chunk.find(NEWLINE)
            if cut < 0:
                if end_of_file:
                    log.lines = line_no
                    break
                continue
            chunk, skipping_long_line = chunk[cut + 1 :], False
            line_no += 1
        data = pending + chunk
        if end_of_file:  # end of file (or of its readable part): what is left is the last line
            if data.strip():
                yield from _parse_jsonl_block(data, line_no, cfg, parse_options, log)
            log.lines = line_no + data.count(NEWLINE)
            break
        cut = data.rfind(NEWLINE)
        if cut < 0:
            if len(data) > cfg.max_record_bytes:
                log.dropped["too_long"] += 1
                pending, skipping_long_line = b"", True
            else:
                pending = data
            continue
        block, pending = data[: cut + 1], data[cut + 1 :]
        texts = _parse_jsonl_block(block, line_no, cfg, parse_options, log)
        line_no += block.count(NEWLINE)
        yield from texts


def _parse_jsonl_block(
    block: bytes, first_line: int, cfg: InputConfig, parse_options: pa_json.ParseOptions, log: ReadLog
) -> list[list[str]]:
    if len(block) <= cfg.max_record_bytes:  # fast path; long lines need the per-line size check
        try:
            table = pa_json.read_json(
                pa.BufferReader(block),
                read_options=pa_json.ReadOptions(block_size=len(block) + 1, use_threads=False),
                parse_options=parse_options,
            )
            column = table.column(0)
            if column.null_count == 0:
                texts = column.to_pylist()
                log.records += len(texts)
                return [texts]
        except (pa.ArrowException, UnicodeDecodeError):
            pass
    return [_parse_jsonl_lines(block, first_line, cfg, log)]


def _parse_jsonl_lines(block: bytes, first_line: int, cfg: InputConfig, log: ReadLog) -> list[str]:
    """The slow path: one line at a time, so each bad line is named."""
    texts = []
    for offset, line in enumerate(block.split(b"\n")):
        if not line.strip():
            continue
        line_no = first_line + offset + 1
        where = f"line {line_no}"
        if len(line) > cfg.max_record_bytes:
            log.dropped["too_long"] += 1
            continue
        try:
            record = json.loads(line)
        except UnicodeDecodeError as exc:
            if cfg.on_decode_error == "skip":
                log.skip_line(line_no, f"undecodable bytes (not UTF-8): {exc.reason} at byte {exc.start}")
                continue
            record = _loads_or_none(line.decode("utf-8", errors="replace"))
            if record is None:
                log.skip_line(line_no, "invalid JSON")
                continue
        except ValueError as exc:
            log.skip_line(line_no, f"invalid JSON: {exc}")
            continue
        if not isinstance(record, dict):
            log.skip_line(line_no, f"not a JSON object but {type(record).__name__}")
            continue
        text = record.get(cfg.text_key)
        if not isinstance(text, str):
            log.skip_line(line_no, f"key {cfg.text_key!r} is {_not_text(record, cfg.text_key)}")
            continue
        text = _valid_utf8(text, cfg, log, where, line_no)
        if text is not None:
            texts.append(text)
            log.records += 1
    return texts


def _not_text(record: dict, key: str) -> str:
    """Why ``record[key]`` is no text; a missing key names the record's keys (input.text_key)."""
    if key not in record:
        keys = list(record)
        listed = ", ".join(map(repr, keys[:8])) + (", ..." if len(keys) > 8 else "")
        return f"missing (the record's keys: {listed or 'none'}; input.text_key names the text's)"
    text = record[key]
    return "null" if text is None else f"{type(text).__name__}, not a string"


def _loads_or_none(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _valid_utf8(text: str, cfg: InputConfig, log: ReadLog, where: str, line: int | None = None) -> str | None:
    """JSON may carry lone surrogates (\\ud800) that no UTF-8 file can hold."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError as exc:
        if cfg.on_decode_error == "skip":
            reason = f"undecodable text: {exc.reason} at character {exc.start}"
            if line is None:
                log.skip(where, reason)
            else:
                log.skip_line(line, reason)
            return None
        return text.encode("utf-8", errors="replace").decode("utf-8")


# ----------------------------------------------------------------------------- parquet


def _column_texts(values: list, first_row: int, cfg: InputConfig, log: ReadLog) -> list[str]:
    """The texts of one batch of a parquet or Arrow column (file rows from ``first_row``): a
    missing text is a skipped ``row N``, an over-long one ``too_long``."""
    texts = []
    for row, text in enumerate(values, start=first_row):
        if text is None:
            log.skip(f"row {row}", f"key {cfg.text_key!r} is null")
            continue
        if len(text) > cfg.max_record_bytes:
            log.dropped["too_long"] += 1
            continue
        text = _valid_utf8(text, cfg, log, f"row {row}")  # a no-op for Arrow strings (UTF-8 checked by Arrow)
        if text is not None:
            texts.append(text)
    log.records += len(texts)
    return texts


def _read_parquet(path: str, cfg: InputConfig, log: ReadLog, span: tuple[int, int] | None) -> Iterator[list[str]]:
    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        log.skip("file", f"not a readable parquet file: {exc}")
        log.stopped_early = True
        return
    if cfg.text_key not in parquet.schema_arrow.names:
        log.skip("file", f"no column {cfg.text_key!r} (columns: {parquet.schema_arrow.names[:20]})")
        log.stopped_early = True
        return
    groups = range(parquet.num_row_groups) if span is None else range(*span)
    first_row = sum(parquet.metadata.row_group(g).num_rows for g in range(groups.start))  # file row numbers
    for group in groups:
        rows = parquet.metadata.row_group(group).num_rows
        where = f"row group {group} (rows {first_row}-{first_row + rows - 1})"
        first_row += rows
        try:
            column = parquet.read_row_group(group, columns=[cfg.text_key]).column(0)
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                log.skip(where, f"column {cfg.text_key!r} has type {column.type}, not string")
                continue
            values = column.to_pylist()
        except (OSError, pa.ArrowException, UnicodeDecodeError) as exc:
            log.skip(where, f"unreadable row group: {exc}")
            continue
        yield _column_texts(values, first_row - rows, cfg, log)


# ----------------------------------------------------------------------------- Arrow


def open_arrow(path: str):
    """A Hugging Face dataset Arrow file, memory-mapped by ``datasets`` (nothing is copied)."""
    from datasets import Dataset

    return Dataset.from_file(path)


def _read_arrow(path: str, cfg: InputConfig, log: ReadLog, span: tuple[int, int] | None) -> Iterator[list[str]]:
    """Rows [first, last) of a Hugging Face dataset's Arrow stream file, as the parquet reader:
    a missing text is a skipped ``row N``, an over-long one ``too_long``."""
    try:
        table = open_arrow(path).data
    except Exception as exc:  # pyarrow and datasets raise their own errors for broken files
        log.skip("file", f"not a readable Arrow file: {type(exc).__name__}: {exc}")
        log.stopped_early = True
        return
    if cfg.text_key not in table.column_names:
        log.skip("file", f"no column {cfg.text_key!r} (columns: {table.column_names[:20]})")
        log.stopped_early = True
        return
    kind = table.schema.field(cfg.text_key).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        log.skip("file", f"column {cfg.text_key!r} has type {kind}, not string")
        log.stopped_early = True
        return
    first, last = span if span is not None else (0, table.num_rows)
    column = table.column(cfg.text_key)
    for start in range(first, last, _BATCH_DOCS):
        values = column.slice(start, min(_BATCH_DOCS, last - start)).to_pylist()
        yield _column_texts(values, start, cfg, log)


# ----------------------------------------------------------------------------- WARC / WET


def _batched(texts: Iterator[str]) -> Iterator[list[str]]:
    """Record-at-a-time readers yield lists of ``_BATCH_DOCS`` texts, like the columnar ones."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) >= _BATCH_DOCS:
            yield batch
            batch = []
    if batch:
        yield batch


def _read_wet(path: str, cfg: InputConfig, log: ReadLog, span: tuple[int, int] | None = None) -> Iterator[list[str]]:
    """WET ``conversion`` records hold the text Common Crawl extracted (UTF-8)."""
    from fastwarc.warc import conversion

    return _batched(_wet_texts(path, conversion, cfg, log, span))


def _wet_texts(path: str, conversion, cfg: InputConfig, log: ReadLog, span) -> Iterator[str]:
    for _record, where, payload in _iter_warc_payloads(path, conversion, False, cfg, log, None, span):
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError as exc:
            if cfg.on_decode_error == "skip":
                log.skip(where, f"undecodable bytes (not UTF-8): {exc.reason} at byte {exc.start}")
                continue
            text = payload.decode("utf-8", errors="replace")
        log.records += 1
        yield text


def _is_html_ok(record) -> bool:
    content_type = (record.http_content_type or "").lower()
    status = record.http_headers.status_code if record.http_headers is not None else None
    return status == 200 and content_type in ("text/html", "application/xhtml+xml")


def _read_warc(path: str, cfg: InputConfig, log: ReadLog, span: tuple[int, int] | None = None) -> Iterator[list[str]]:
    """WARC ``response`` records with HTML, turned into text by resiliparse or trafilatura."""
    from fastwarc.warc import response

    return _batched(_warc_texts(path, response, cfg, log, span))


def _warc_texts(path: str, response, cfg: InputConfig, log: ReadLog, span) -> Iterator[str]:
    from data_prep.extract import html_to_text

    for record, where, payload in _iter_warc_payloads(path, response, True, cfg, log, _is_html_ok, span):
        try:
            text = html_to_text(payload, record.http_charset, cfg)
        except UnicodeError as exc:
            log.skip(where, f"undecodable HTML: {exc}")
            continue
        except Exception as exc:  # the extractors raise their own parser exceptions
            log.skip(where, f"HTML extraction failed: {type(exc).__name__}: {exc}")
            continue
        log.records += 1
        yield text


def _iter_warc_payloads(path: str, record_type, parse_http: bool, cfg: InputConfig, log: ReadLog, want, span=None):
    """(record, "offset N <record id>", payload) for each intact record of ``record_type``.

    Records ``want`` rejects count as ``not_html``; oversized ones as ``too_long``; a record
    whose payload ends early is skipped as truncated; after corrupt data the reader restarts
    at the next record header it can find. With ``span``, the records of the gzip members in
    that byte range (offsets stay file offsets).
    """
    from fastwarc.warc import ArchiveIterator

    base = 0 if span is None else span[0]  # file offset where the current iterator started
    last_good = -1  # file offset of the last record that parsed
    with open(path, "rb") if span is None else _Window(path, *span) as fh:
        while True:
            fh.seek(base)
            try:
                for record in ArchiveIterator(fh, record_types=record_type, parse_http=parse_http):
                    offset = record.stream_pos  # a file offset: fastwarc counts from where fh was put
                    last_good = offset
                    where = f"offset {offset} {record.record_id or ''}".rstrip()
                    if want is not None and not want(record):
                        record.consume()
                        log.dropped["not_html"] += 1
                        continue
                    expected = record.content_length
                    if expected > cfg.max_record_bytes:
                        record.consume()
                        log.dropped["too_long"] += 1
                        continue
                    payload = record.reader.read()
                    if len(payload) < expected:
                        log.skip(where, f"truncated record: {len(payload)} of {expected} payload bytes")
                        continue
                    yield record, where, payload
                return
            except OSError as exc:
                start = max(last_good, base) + 1
                resume = _next_record_start(fh, start)
                stop = f"offset {start - 1}" if last_good >= 0 else "file start"
                if resume is None:
                    log.skip(f"after {stop}", f"corrupt WARC data, rest of file skipped: {exc}")
                    log.stopped_early = True
                    return
                log.skip(f"{stop}-{resume}", f"corrupt WARC data skipped up to the next record: {exc}")
                base = resume


def _next_record_start(fh: BinaryIO, start: int) -> int | None:
    """File offset of the next gzip member that inflates to a WARC header, or of a plain WARC header."""
    fh.seek(start)
    window = 1 << 20
    position = start
    carry = b""
    while True:
        data = fh.read(window)
        if not data:
            return None
        buf = carry + data
        buf_start = position - len(carry)
        for marker in (_GZIP_MAGIC, b"WARC/1."):
            index = buf.find(marker)
            while index >= 0:
                candidate = buf_start + index
                if candidate >= start and _looks_like_record(fh, candidate, marker):
                    return candidate
                index = buf.find(marker, index + 1)
        position += len(data)
        carry = buf[-8:]


def _looks_like_record(fh: BinaryIO, offset: int, marker: bytes) -> bool:
    here = fh.tell()
    try:
        fh.seek(offset)
        head = fh.read(4096)
        if marker == _GZIP_MAGIC:
            try:
                head = zlib.decompressobj(wbits=31).decompress(head, 16)
            except zlib.error:
                return False
        return head.startswith(b"WARC/1.")
    finally:
        fh.seek(here)


def read_all_texts(path: str | Path, cfg: InputConfig | None = None) -> tuple[list[str], ReadLog]:
    """Every document of one file (for tests and small tools)."""
    cfg = cfg or InputConfig(paths=[str(path)])
    fmt = detect_format(str(path)) if cfg.format == "auto" else cfg.format
    if fmt is None:
        raise InputError(f"cannot tell the format of {path}")
    log = ReadLog(str(path))
    texts = [text for batch in read_documents(InputFile(str(path), fmt), cfg, log) for text in batch]
    return texts, log


__all__ = ["InputError", "InputFile", "ReadLog", "detect_format", "expand_inputs", "read_all_texts", "read_documents"]

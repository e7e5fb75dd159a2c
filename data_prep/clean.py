"""Stage 1, one worker task per shard (an input file, or a span of one): read, normalize, filter, hash, write.

Outputs in ``<work>/clean/``: ``<id>.arrow`` (the kept, normalized texts, in input order),
``<id>.hash.npy`` (first 16 bytes of the SHA-256 of each kept text, for the global dedup) and the marker
``<id>.json`` (counts, skipped records, the input's sha256). The marker is written last,
atomically, so a shard is either finished or redone.
"""

from __future__ import annotations

import hashlib
import os
import time
import traceback
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from data_prep.config import CleanConfig, InputConfig
from data_prep.filters import FILTER_NAMES, DocumentFilter
from data_prep.normalize import normalize_encoded
from data_prep.readers import InputFile, ReadLog, read_documents
from data_prep.tokenizer import file_sha256
from jobscripts.atomic import atomic_write_json, publish, tmp_path

TEXT_SCHEMA = pa.schema([("text", pa.large_string())])
_FILTERS: dict[str, DocumentFilter] = {}  # one per worker process and config


@dataclass
class CleanTask:
    shard_id: str
    source: InputFile
    out_dir: str  # <work>/clean
    fingerprint: str
    input_cfg: InputConfig
    clean_cfg: CleanConfig


def shard_paths(out_dir: str, shard_id: str) -> dict[str, str]:
    base = os.path.join(out_dir, shard_id)
    return {"texts": base + ".arrow", "hashes": base + ".hash.npy", "marker": base + ".json"}


def input_identity(path: str) -> dict:
    """Size and mtime: a finished shard is reused only while its input is unchanged."""
    try:
        st = os.stat(path)
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    except OSError:
        return {"size": None, "mtime_ns": None}


def clean_shard(task: CleanTask) -> dict:
    """Never raises for bad input: unexpected errors are reported as a failed input."""
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        result = _clean(task)
    except Exception as exc:  # a bug or a library crash on this input: fail the input, keep the run
        result = _failed_result(task, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
    result["seconds"] = round(time.perf_counter() - started, 3)
    result["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
    atomic_write_json(shard_paths(task.out_dir, task.shard_id)["marker"], result)
    return result


def _base_result(task: CleanTask) -> dict:
    return {
        "shard_id": task.shard_id,
        "path": task.source.path,
        "format": task.source.format,
        "span": task.source.span,
        "fingerprint": task.fingerprint,
        **input_identity(task.source.path),
    }


def _failed_result(task: CleanTask, reason: str) -> dict:
    return {
        **_base_result(task),
        "sha256": None,
        "records": 0,
        "kept": 0,
        "text_bytes": 0,
        "filters": dict.fromkeys(FILTER_NAMES, 0),
        "skipped": [{"path": task.source.path, "where": "file", "reason": reason}],
        "stopped_early": True,
        "failed": True,
    }


def _clean(task: CleanTask) -> dict:
    key = repr((task.clean_cfg,))
    doc_filter = _FILTERS.get(key)
    if doc_filter is None:
        doc_filter = _FILTERS[key] = DocumentFilter(task.clean_cfg)
    paths = shard_paths(task.out_dir, task.shard_id)
    os.makedirs(task.out_dir, exist_ok=True)
    tmp_texts, tmp_hashes = tmp_path(paths["texts"]), tmp_path(paths["hashes"])
    log = ReadLog(task.source.path)
    dropped: Counter = Counter()
    digests: list[bytes] = []
    text_bytes = 0
    max_chars = task.clean_cfg.max_chars
    form = task.clean_cfg.unicode_normalization
    tidy = task.clean_cfg.tidy_whitespace
    sha256 = hashlib.sha256  # hardware-accelerated on x86 (SHA-NI) and ARMv8
    with pa.OSFile(tmp_texts, "wb") as sink, pa.ipc.new_file(sink, TEXT_SCHEMA) as writer:
        for batch in read_documents(task.source, task.input_cfg, log):
            kept: list[str] = []
            for text in batch:
                if len(text) > max_chars:
                    dropped["too_long"] += 1
                    continue
                text, encoded = normalize_encoded(text, form, tidy)
                if not text:
                    dropped["empty"] += 1
                    continue
                reason = doc_filter(text, encoded)
                if reason is not None:
                    dropped[reason] += 1
                    continue
                text_bytes += len(encoded)
                digests.append(sha256(encoded).digest()[:16])
                kept.append(text)
            if kept:
                writer.write_batch(pa.record_batch([pa.array(kept, type=pa.large_string())], schema=TEXT_SCHEMA))
    hashes = np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(-1, 16)
    with open(tmp_hashes, "wb") as fh:
        np.save(fh, hashes)
    # The file's first shard hashes the whole file for the manifest; the others would only repeat it.
    first_part = task.source.span is None or task.source.span[0] == 0
    sha256 = _sha256_or_none(task.source.path) if first_part else None
    publish(tmp_texts, paths["texts"])
    publish(tmp_hashes, paths["hashes"])
    filters = dict.fromkeys(FILTER_NAMES, 0)
    for name, count in (log.dropped + dropped).items():
        filters[name] += count
    return {
        **_base_result(task),
        "sha256": sha256,
        "records": log.records + sum(log.dropped.values()),
        "kept": len(digests),
        "text_bytes": text_bytes,
        "filters": filters,
        "skipped": log.skipped,
        "stopped_early": log.stopped_early,
        "failed": log.records == 0 and bool(log.skipped),
        "lines": log.lines,
    }


def _sha256_or_none(path: str) -> str | None:
    try:
        return file_sha256(path)
    except OSError:
        return None

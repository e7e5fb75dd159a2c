"""Stage 3: tokenize each clean shard (workers), then merge into Megatron datasets (main process).

A worker writes, per split, the token stream exactly as Megatron lays out a ``.bin``
(documents back to back, each ending in EOD, in the Megatron dtype) plus the document
lengths. Workers do not import Megatron (it pulls in torch: ~10 s per process); the
main process feeds the parts, in shard order, to Megatron's ``IndexedDatasetBuilder``,
which writes the final ``<prefix>.bin/.idx``.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from data_prep.tokenizer import Tokenizer, load_tokenizer, token_dtype
from jobscripts.atomic import atomic_write_json, publish, tmp_path

SPLITS = ("train", "valid")
DROP, TRAIN, VALID = 0, 1, 2  # values of the per-document assignment array
_TOKENIZERS: dict[tuple[str, str | None], Tokenizer] = {}  # one per worker process


@dataclass
class TokenizeTask:
    shard_id: str
    texts_path: str  # <work>/clean/<id>.arrow
    out_dir: str  # <work>/tokens
    assignment: np.ndarray  # int8 per kept document: DROP, TRAIN or VALID
    tokenizer_path: str
    eod_token: str | None
    batch_docs: int
    fingerprint: str  # tokenizer sha256 + assignment digest


def part_paths(out_dir: str, shard_id: str) -> dict[str, str]:
    base = os.path.join(out_dir, shard_id)
    paths = {"marker": base + ".json"}
    for split in SPLITS:
        paths[f"{split}_bin"] = f"{base}.{split}.bin"
        paths[f"{split}_lengths"] = f"{base}.{split}.lengths.npy"
    return paths


def assignment_digest(assignment: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(assignment, dtype=np.int8).tobytes()).hexdigest()[:16]


def get_tokenizer(path: str, eod_token: str | None) -> Tokenizer:
    key = (path, eod_token)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = load_tokenizer(path, eod_token)
    return _TOKENIZERS[key]


def tokenize_shard(task: TokenizeTask) -> dict:
    started, cpu_started = time.perf_counter(), time.process_time()
    tokenizer = get_tokenizer(task.tokenizer_path, task.eod_token)
    dtype = token_dtype(tokenizer.vocab_size)
    paths = part_paths(task.out_dir, task.shard_id)
    os.makedirs(task.out_dir, exist_ok=True)
    tmp = {key: tmp_path(p) for key, p in paths.items() if key != "marker"}
    writers = {split: open(tmp[f"{split}_bin"], "wb") for split in SPLITS}
    lengths: dict[str, list[np.ndarray]] = {split: [] for split in SPLITS}
    try:
        with pa.memory_map(task.texts_path) as source:
            reader = pa.ipc.open_file(source)
            first = 0
            for index in range(reader.num_record_batches):
                column = reader.get_batch(index).column(0)
                rows = task.assignment[first : first + len(column)]
                first += len(column)
                for split, code in (("train", TRAIN), ("valid", VALID)):
                    selected = np.flatnonzero(rows == code)
                    for start in range(0, len(selected), task.batch_docs):
                        texts = column.take(pa.array(selected[start : start + task.batch_docs])).to_pylist()
                        tokens, doc_lengths = encode_documents(tokenizer, texts, dtype)
                        tokens.tofile(writers[split])
                        lengths[split].append(doc_lengths)
            if first != len(task.assignment):
                raise ValueError(f"{task.texts_path}: {first} documents, assignment has {len(task.assignment)}")
    finally:
        for fh in writers.values():
            fh.close()
    result = {"shard_id": task.shard_id, "fingerprint": task.fingerprint}
    for split in SPLITS:
        split_lengths = np.concatenate(lengths[split]) if lengths[split] else np.zeros(0, dtype=np.int64)
        with open(tmp[f"{split}_lengths"], "wb") as fh:
            np.save(fh, split_lengths)
        result[f"{split}_documents"] = int(len(split_lengths))
        result[f"{split}_tokens"] = int(split_lengths.sum())
    for key, tmp_file in tmp.items():
        publish(tmp_file, paths[key])
    result["seconds"] = round(time.perf_counter() - started, 3)
    result["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
    atomic_write_json(paths["marker"], result)
    return result


def encode_documents(tokenizer: Tokenizer, texts: list[str], dtype) -> tuple[np.ndarray, np.ndarray]:
    """All documents' ids back to back, each followed by EOD, and each document's length."""
    arrays = tokenizer.encode_batch_arrays(texts)
    doc_lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays)) + 1
    ends = np.cumsum(doc_lengths)
    tokens = np.empty(int(ends[-1]) if len(ends) else 0, dtype=dtype)
    is_text = np.ones(len(tokens), dtype=bool)
    is_text[ends - 1] = False
    if arrays:
        tokens[is_text] = np.concatenate(arrays)
    tokens[~is_text] = tokenizer.eod
    return tokens, doc_lengths


class DatasetMerger:
    """Appends shard parts, in shard order, to one Megatron ``IndexedDatasetBuilder`` per split."""

    def __init__(self, out_prefixes: dict[str, str], dtype) -> None:
        import warnings

        with warnings.catch_warnings():  # "Transformer Engine and Apex are not installed": not used here
            warnings.simplefilter("ignore")
            from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        self.dtype = dtype
        self.out_prefixes = out_prefixes
        self.tmp_bins = {split: tmp_path(prefix + ".bin") for split, prefix in out_prefixes.items()}
        self.builders = {split: IndexedDatasetBuilder(self.tmp_bins[split], dtype=dtype) for split in out_prefixes}
        self.documents = dict.fromkeys(out_prefixes, 0)
        self.tokens = dict.fromkeys(out_prefixes, 0)
        self.cpu_seconds = 0.0  # this thread's CPU in add_shard and finalize: the merge's own cost

    def add_shard(self, parts: dict[str, str]) -> None:
        started = time.thread_time()
        self._add_shard(parts)
        self.cpu_seconds += time.thread_time() - started

    def _add_shard(self, parts: dict[str, str]) -> None:
        for split, builder in self.builders.items():
            lengths = np.load(parts[f"{split}_lengths"])
            if not len(lengths):
                continue
            tokens = np.fromfile(parts[f"{split}_bin"], dtype=self.dtype)
            if len(tokens) != int(lengths.sum()):
                raise ValueError(f"{parts[f'{split}_bin']}: {len(tokens)} tokens, lengths say {int(lengths.sum())}")
            _add_documents(builder, tokens, lengths)
            self.documents[split] += len(lengths)
            self.tokens[split] += len(tokens)

    def finalize(self) -> None:
        """Write the .idx files, then move .bin and .idx into place.

        A split without documents gets no files (Megatron's ``IndexedDataset`` cannot map an
        empty ``.bin``), and files an earlier run left under its prefix are removed.
        """
        started = time.thread_time()
        for split, builder in self.builders.items():
            prefix = self.out_prefixes[split]
            if not self.documents[split]:
                builder.data_file.close()
                for path in (self.tmp_bins[split], prefix + ".bin", prefix + ".idx"):
                    if os.path.exists(path):
                        os.unlink(path)
                continue
            tmp_idx = tmp_path(prefix + ".idx")
            builder.finalize(tmp_idx)
            publish(self.tmp_bins[split], prefix + ".bin")
            publish(tmp_idx, prefix + ".idx")
        self.cpu_seconds += time.thread_time() - started

    def prefixes(self, split: str) -> list[str]:
        """The dataset prefixes written for ``split``: none when it has no documents."""
        return [self.out_prefixes[split]] if self.documents[split] else []

    def abort(self) -> None:
        for split, builder in self.builders.items():
            builder.data_file.close()
            for path in (self.tmp_bins[split], tmp_path(self.out_prefixes[split] + ".idx")):
                if os.path.exists(path):
                    os.unlink(path)


def _add_documents(builder, tokens: np.ndarray, lengths: np.ndarray) -> None:
    """What ``builder.add_document(doc, [len(doc)])`` does for each document in turn, in one
    write and two list extends (megatron-core 0.16.1's ``IndexedDatasetBuilder``: ``data_file``,
    ``sequence_lengths``, ``document_indices``). The merge is one process for the whole run, and
    the per-document calls' Python is most of its CPU (``benchmarks/data_prep_stages.py``
    prints the ratio). ``tests/test_data_prep_writer.py`` checks the bytes against them."""
    if builder.multimodal:
        raise ValueError("DatasetMerger writes text datasets only")
    first = len(builder.sequence_lengths)
    builder.data_file.write(np.ascontiguousarray(tokens, dtype=builder.dtype).tobytes())
    builder.sequence_lengths.extend(lengths.tolist())
    builder.document_indices.extend(range(first + 1, first + 1 + len(lengths)))

"""The merge stage's bulk append writes what Megatron's per-document ``add_document`` writes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from data_prep.writer import _add_documents

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_bulk_append_writes_the_bytes_of_per_document_calls(tmp_path, dtype):
    rng = np.random.default_rng(0)
    shards = []
    for n_docs in (5, 1, 0, 17):  # a shard without documents in this split, too
        lengths = rng.integers(1, 40, size=n_docs)
        lengths[::4] = 1  # an EOD-only document
        shards.append((rng.integers(0, 30000, size=int(lengths.sum())).astype(dtype), lengths))

    paths = {}
    for name in ("per_document", "bulk"):
        prefix = str(tmp_path / name)
        builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
        for tokens, lengths in shards:
            if name == "bulk":
                _add_documents(builder, tokens, lengths)
                continue
            start = 0
            for length in lengths.tolist():
                builder.add_document(tokens[start : start + length], [length])
                start += length
        builder.finalize(prefix + ".idx")
        paths[name] = prefix

    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"bulk{suffix}").read_bytes() == (tmp_path / f"per_document{suffix}").read_bytes()
    dataset = IndexedDataset(paths["bulk"])
    all_tokens = np.concatenate([t for t, _ in shards])
    all_lengths = np.concatenate([lengths for _, lengths in shards])
    assert len(dataset) == len(all_lengths) == 23
    ends = np.cumsum(all_lengths)
    for i in (0, 6, 22):
        np.testing.assert_array_equal(dataset[i], all_tokens[ends[i] - all_lengths[i] : ends[i]])

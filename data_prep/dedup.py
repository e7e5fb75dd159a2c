"""Global, deterministic per-document decisions from the 16-byte text hashes of all shards.

Made in the main process, in shard order, after every shard is cleaned, so they do not
depend on which worker finished first or on a resume:

* exact dedup: the first occurrence (shard order, then input order) of each text is kept
  (near dedup, data_prep/near_dedup.py, adds its own mask);
* train/valid split: bytes 0-7 of the hash, XOR a seed mask, compared to a threshold;
* tokenizer sample: the documents with the smallest bytes 8-15 of the hash.
"""

from __future__ import annotations

import numpy as np

from data_prep.config import SplitConfig
from data_prep.writer import DROP, TRAIN, VALID

_TWO_64 = float(2**64)


def first_occurrences(hashes: np.ndarray) -> np.ndarray:
    """Boolean mask over rows of an (N, 16) uint8 array: True for the first row of each value."""
    if len(hashes) == 0:
        return np.zeros(0, dtype=bool)
    words = np.ascontiguousarray(hashes).view("<u8").reshape(-1, 2)
    order = np.lexsort((words[:, 1], words[:, 0]))  # stable: equal values stay in input order
    ordered = words[order]
    new_value = np.ones(len(order), dtype=bool)
    new_value[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    keep = np.zeros(len(order), dtype=bool)
    keep[order[new_value]] = True
    return keep


def _seed_mask(seed: int) -> np.uint64:
    """SplitMix64 of the seed: different seeds give unrelated splits."""
    z = (seed + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return np.uint64(z ^ (z >> 31))


def split_keys(hashes: np.ndarray, seed: int) -> np.ndarray:
    return np.ascontiguousarray(hashes).view("<u8").reshape(-1, 2)[:, 0] ^ _seed_mask(seed)


def sample_keys(hashes: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(hashes).view("<u8").reshape(-1, 2)[:, 1]


def assign(hashes: np.ndarray, dedup: bool, cfg: SplitConfig, near_keep: np.ndarray | None = None) -> np.ndarray:
    """int8 per document: DROP (an exact duplicate, or outside ``near_keep``), TRAIN or VALID."""
    keep = first_occurrences(hashes) if dedup else np.ones(len(hashes), dtype=bool)
    if near_keep is not None:
        keep &= near_keep
    keys = split_keys(hashes, cfg.seed)
    if cfg.valid_fraction >= 1.0:
        valid = np.ones(len(hashes), dtype=bool)
    else:
        threshold = np.uint64(min(int(cfg.valid_fraction * _TWO_64), 2**64 - 1))
        valid = keys < threshold
    assignment = np.where(keep, np.where(valid, VALID, TRAIN), DROP).astype(np.int8)
    n_valid = int((assignment == VALID).sum())
    n_train = int((assignment == TRAIN).sum())
    missing = min(cfg.min_valid_documents - n_valid, n_train - 1)  # keep at least one train document
    if missing > 0:
        train_rows = np.flatnonzero(assignment == TRAIN)
        moved = train_rows[np.argsort(keys[train_rows], kind="stable")[:missing]]
        assignment[moved] = VALID
    return assignment


def sample_rows(hashes: np.ndarray, eligible: np.ndarray, lengths: np.ndarray, budget: int) -> np.ndarray:
    """Sorted row numbers of the eligible documents with the smallest sample keys, up to ``budget`` chars."""
    rows = np.flatnonzero(eligible)
    rows = rows[np.argsort(sample_keys(hashes)[rows], kind="stable")]
    total = np.cumsum(lengths[rows])
    count = int(np.searchsorted(total, budget, side="left")) + 1
    return np.sort(rows[:count])

"""Near-duplicate detection with MinHash LSH, in the pipeline's sharded steps.

1. signatures (per clean shard, workers): each document's MinHash over its word shingles.
   The values are exactly datasketch's ``MinHash(num_perm, seed).update_batch(shingles)``
   (default ``affine32`` scheme, ``sha1_hash32`` of each shingle, its ``_fmix`` pre-mix, its
   permutations), computed for a whole batch at once with numpy: every shingle of the batch
   through all permutations in one (num_perm, shingles) array, then a segmented minimum.
   Per-document ``MinHash`` objects cost ~10x more; a test checks the values are identical.
   Stored as ``(num_perm, documents)`` uint32, so a band is a contiguous slice.
2. buckets (per LSH band, workers): documents whose ``rows`` values of the band are all equal
   share a bucket; each member is paired with the bucket's first document (input order) and
   the pair is kept when the fraction of all ``num_perm`` values that agree (the MinHash
   estimate of Jaccard similarity) is >= ``threshold``. Pairing with the first member keeps
   the work linear in a bucket's size; a true pair lost this way in one band is found in
   another band, where the bucket holds no unrelated document.
3. components (plan stage, one process): connected components of all kept pairs
   (scipy's union of edges); each component keeps its first document, the rest are dropped
   as ``near_dedup``. Global document numbers follow the shard order, so the result does not
   depend on the number of workers, array tasks or shards.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import asdict, dataclass
from operator import methodcaller

import numpy as np
import pyarrow as pa

from data_prep.config import NearDedupConfig
from jobscripts.atomic import atomic_write_json, publish, tmp_path

_BATCH_SHINGLES = 16_384  # shingles through the permutations at once: (num_perm, this) uint32 in memory
_digest = methodcaller("digest")


def permutations(cfg: NearDedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine permutation parameters (a, b) for ``num_perm`` and ``seed``."""
    from datasketch import MinHash

    a, b = MinHash(num_perm=cfg.num_perm, seed=cfg.seed).permutations
    return a, b


def shingles(text: str, words: int) -> list[bytes]:
    """Runs of ``words`` lower-cased words (split at ASCII whitespace, like the Gopher rules);
    a document with fewer words is one shingle of all of them."""
    tokens = text.lower().encode("utf-8").split()
    if len(tokens) < words:
        return [b" ".join(tokens)]
    return list(map(b" ".join, zip(*(tokens[i:] for i in range(words)))))


def shingle_hashes(shingle_list: list[bytes]) -> np.ndarray:
    """datasketch's ``sha1_hash32`` of each shingle (first 4 bytes of SHA-1, little-endian), in bulk."""
    digests = b"".join(map(_digest, map(hashlib.sha1, shingle_list)))
    return np.frombuffer(digests, dtype=np.uint8).reshape(-1, 20)[:, :4].copy().view("<u4").ravel()


def signatures(texts: list[str], cfg: NearDedupConfig, perms: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """(num_perm, len(texts)) uint32: column j is datasketch's MinHash of text j's shingles."""
    from datasketch.minhash import _fmix  # datasketch's affine32 pre-mix (pinned: datasketch==2.0.0)

    a, b = perms
    out = np.empty((cfg.num_perm, len(texts)), dtype=np.uint32)
    start = 0
    while start < len(texts):
        hashes, counts = [], []
        stop = start
        total = 0
        while stop < len(texts) and (total < _BATCH_SHINGLES or stop == start):
            h = shingle_hashes(shingles(texts[stop], cfg.shingle_words))
            hashes.append(h)
            counts.append(len(h))
            total += len(h)
            stop += 1
        mixed = _fmix(np.concatenate(hashes), 32)
        permuted = a[:, None] * mixed[None, :]  # uint32 arithmetic wraps: mod 2^32, as datasketch's
        permuted += b[:, None]
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        out[:, start:stop] = np.minimum.reduceat(permuted, firsts, axis=1)
        start = stop
    return out


# ----------------------------------------------------------------------------- worker tasks


@dataclass
class SignatureTask:
    shard_id: str
    texts_path: str  # <work>/clean/<id>.arrow
    out_dir: str  # <work>/near_dedup
    cfg: NearDedupConfig
    fingerprint: str


def signature_paths(out_dir: str, shard_id: str) -> dict[str, str]:
    base = os.path.join(out_dir, shard_id)
    return {"signatures": base + ".sig.npy", "marker": base + ".sig.json"}


def _publish_array(path: str, array: np.ndarray) -> None:
    """An ``.npy`` written under a temporary name and renamed (a unit's output, before its marker)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = tmp_path(path)
    with open(tmp, "wb") as fh:
        np.save(fh, array)
    publish(tmp, path)


def _write_marker(path: str, result: dict, started: float, cpu_started: float) -> dict:
    """The unit's marker, written last, with its wall and CPU seconds."""
    result["seconds"] = round(time.perf_counter() - started, 3)
    result["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
    atomic_write_json(path, result)
    return result


def signature_shard(task: SignatureTask) -> dict:
    started, cpu_started = time.perf_counter(), time.process_time()
    perms = permutations(task.cfg)
    parts = []
    with pa.memory_map(task.texts_path) as source:
        reader = pa.ipc.open_file(source)
        for index in range(reader.num_record_batches):
            parts.append(signatures(reader.get_batch(index).column(0).to_pylist(), task.cfg, perms))
    sig = np.concatenate(parts, axis=1) if parts else np.zeros((task.cfg.num_perm, 0), dtype=np.uint32)
    paths = signature_paths(task.out_dir, task.shard_id)
    _publish_array(paths["signatures"], sig)
    result = {
        "shard_id": task.shard_id,
        "fingerprint": task.fingerprint,
        "documents": int(sig.shape[1]),
        "sha256": hashlib.sha256(sig.tobytes()).hexdigest()[:16],
    }
    return _write_marker(paths["marker"], result, started, cpu_started)


@dataclass
class BandTask:
    band: int
    signature_files: list[str]  # every shard's signatures, in shard order
    out_dir: str
    cfg: NearDedupConfig
    fingerprint: str


def band_paths(out_dir: str, band: int) -> dict[str, str]:
    base = os.path.join(out_dir, f"band-{band:04d}")
    return {"pairs": base + ".npy", "marker": base + ".json"}


def band_pairs(task: BandTask) -> dict:
    """Verified near-duplicate pairs (first, other) of one band, as global document numbers."""
    started, cpu_started = time.perf_counter(), time.process_time()
    maps = [np.load(path, mmap_mode="r") for path in task.signature_files]
    candidates, pairs = band_pairs_of(maps, task.band, task.cfg)
    paths = band_paths(task.out_dir, task.band)
    _publish_array(paths["pairs"], pairs)
    result = {
        "band": task.band,
        "fingerprint": task.fingerprint,
        "candidates": int(len(candidates)),
        "pairs": int(len(pairs)),
    }
    return _write_marker(paths["marker"], result, started, cpu_started)


def band_pairs_of(maps: list[np.ndarray], band: int, cfg: NearDedupConfig) -> tuple[np.ndarray, np.ndarray]:
    """(candidates, verified pairs) of one band over signature arrays in shard order."""
    rows = slice(band * cfg.rows, (band + 1) * cfg.rows)
    offsets = np.cumsum([0] + [m.shape[1] for m in maps])
    keys = np.concatenate([np.asarray(m[rows]) for m in maps], axis=1) if maps else np.zeros((0, 0))
    candidates = bucket_pairs(keys)
    return candidates, candidates[estimated_jaccard(maps, offsets, candidates) >= cfg.threshold]


def bucket_pairs(keys: np.ndarray) -> np.ndarray:
    """(k, 2) int64 pairs (first member, other member) of every bucket of equal key columns."""
    n = keys.shape[1] if keys.ndim == 2 else 0
    if n < 2:
        return np.zeros((0, 2), dtype=np.int64)
    order = np.lexsort(keys[::-1])  # stable: equal keys stay in document order
    ordered = keys[:, order]
    new_bucket = np.ones(n, dtype=bool)
    new_bucket[1:] = np.any(ordered[:, 1:] != ordered[:, :-1], axis=0)
    first = order[np.flatnonzero(new_bucket)][np.cumsum(new_bucket) - 1]
    member = ~new_bucket
    return np.stack([first[member], order[member]], axis=1).astype(np.int64)


def estimated_jaccard(maps: list[np.ndarray], offsets: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """Fraction of equal MinHash values of each pair (datasketch's ``MinHash.jaccard``)."""
    if not len(pairs):
        return np.zeros(0)
    docs, where = np.unique(pairs, return_inverse=True)
    where = where.reshape(pairs.shape)
    full = np.empty((maps[0].shape[0], len(docs)), dtype=np.uint32)
    shard_of = np.searchsorted(offsets, docs, side="right") - 1
    for shard in np.unique(shard_of):
        columns = np.flatnonzero(shard_of == shard)
        full[:, columns] = maps[shard][:, docs[columns] - offsets[shard]]
    return np.mean(full[:, where[:, 0]] == full[:, where[:, 1]], axis=0)


# ----------------------------------------------------------------------------- components


def component_labels(documents: int, pairs: np.ndarray) -> np.ndarray:
    """Connected component of each document under the pairs (scipy's graph search)."""
    if not len(pairs):
        return np.arange(documents)
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    graph = coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(documents,) * 2)
    return connected_components(graph, directed=False)[1]


def first_of_components(documents: int, pairs: np.ndarray) -> np.ndarray:
    """Boolean mask: True for the first document (lowest number) of each connected component."""
    labels = component_labels(documents, pairs)
    count = int(labels.max()) + 1 if documents else 0
    first = np.full(count, documents, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(documents))
    return first[labels] == np.arange(documents)


def settings(cfg: NearDedupConfig) -> dict:
    """The settings that change signatures (the rest change only the bucket step)."""
    return {k: v for k, v in asdict(cfg).items() if k in ("shingle_words", "num_perm", "seed")}

"""Training and held-out data through megatron-core's dataset builder.

Datasets are megatron ``GPTDataset``s built by ``BlendedMegatronDatasetBuilder`` from a
blend of indexed-dataset prefixes (a ``data_prep`` manifest, or prefixes in the config), or
``MockGPTDataset`` for smoke runs. Batches are addressed by index, never by iterator
state: step ``s`` uses global samples ``[s*G, (s+1)*G)`` of the training dataset, so
resuming needs only the step number, and every run of a sweep (same ``data.seed``) sees
the same tokens in the same order. Evaluation always uses the first ``eval.batches * G``
samples of the validation dataset.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset
from megatron.core.datasets.indexed_dataset import _INDEX_HEADER, DType, get_bin_path, get_idx_path

from data_prep.manifest import MANIFEST_FILE, read_manifest
from runconfig.schema import RunConfig


class TokenizerInfo:
    """The three attributes megatron's GPTDataset reads from a tokenizer."""

    def __init__(self, vocab_size: int, eod: int, identity: str) -> None:
        self.vocab_size = vocab_size
        self.eod = eod
        self.pad = -1  # never a real token: megatron masks nothing
        self.unique_identifiers = {"class": "depthmup.TokenizerInfo", "identity": identity, "eod": eod}


def tokenizer_info(cfg: RunConfig, given: Any = None) -> TokenizerInfo:
    """The run's tokenizer: the manifest's, else ``data.tokenizer``'s (``given``: loaded already)."""
    d = cfg.data
    if d.manifest:
        m = read_manifest(d.manifest)
        return TokenizerInfo(m.vocab_size, m.eod_id, m.tokenizer_sha256 or str(m.path))
    if d.tokenizer:
        tok = given if given is not None else _given_tokenizer(d.tokenizer)
        return TokenizerInfo(tok.vocab_size, tok.eod, tok.sha256)  # the file's sha256 (a folder's tokenizer.json)
    if d.mock:
        return TokenizerInfo(cfg.model.vocab_size, cfg.model.vocab_size - 1, "mock")
    raise ValueError("data: give data.manifest, data.tokenizer (with data.train_prefixes) or data.mock=true")


def _given_tokenizer(path: str) -> Any:
    """``data.tokenizer``'s file (a folder: its ``tokenizer.json``), loaded; errors name the key."""
    from data_prep.tokenizer import TokenizerError, load_tokenizer

    try:
        return load_tokenizer(path)
    except TokenizerError as exc:
        raise ValueError(f"data.tokenizer: {exc}") from None


def _describe(path: Optional[str], sha256: Optional[str], vocab_size: int, eod: int) -> str:
    digest = f"sha256 {sha256[:12]}..., " if sha256 else ""
    return f"{path or 'no tokenizer file'} ({digest}{vocab_size} ids, end of document {eod})"


def check_tokenizer_source(cfg: RunConfig, given: Any = None) -> None:
    """``data.tokenizer`` must be the tokenizer the data was made with, where data_prep recorded
    it: the manifest of ``data.manifest``, or the manifest beside a ``data.*_prefixes`` entry that
    lists it (data_prep's output folder). Compared by the file's sha256 (by vocabulary size and
    end-of-document id when the manifest records no sha256). A mismatch is a ValueError naming
    both files: training would otherwise read the data's ids as another tokenizer's, silently
    (a manifest run uses the manifest's tokenizer and ignored ``data.tokenizer`` before).
    ``given``: ``data.tokenizer`` loaded already."""
    d = cfg.data
    if not d.tokenizer or d.mock:
        return
    if given is None:
        given = _given_tokenizer(d.tokenizer)
    if d.manifest:
        made = [("data.manifest", read_manifest(d.manifest))]
        fix = "drop data.tokenizer (the manifest names its own), or prepare the data again with this one"
    else:
        made = _prefix_manifests(cfg)
        fix = "give the data's tokenizer, or prepare the data again with this one"
    for key, m in made:
        if m.tokenizer_sha256:
            same = m.tokenizer_sha256 == given.sha256
        else:
            same = (m.vocab_size, m.eod_id) == (given.vocab_size, given.eod)
        if not same:
            raise ValueError(
                f"data.tokenizer: {_describe(given.path, given.sha256, given.vocab_size, given.eod)} is not the "
                f"tokenizer {key}'s data was made with: {m.path} records "
                f"{_describe(m.tokenizer_path, m.tokenizer_sha256, m.vocab_size, m.eod_id)}; {fix}"
            )


def _prefix_manifests(cfg: RunConfig) -> list[tuple[str, Any]]:
    """The data_prep manifests that list one of the config's prefixes (each once), with that key."""
    found: dict[Path, tuple[str, Any]] = {}
    for key, prefixes in (
        ("data.train_prefixes", cfg.data.train_prefixes),
        ("data.valid_prefixes", cfg.data.valid_prefixes),
    ):
        for prefix in prefixes:
            path = Path(prefix).parent / MANIFEST_FILE
            if path.resolve() in found or not path.is_file():
                continue
            try:
                m = read_manifest(path, key)
            except ValueError:
                continue  # not a data_prep manifest: nothing recorded to compare with
            listed = {Path(p).resolve() for p in m.train_prefixes + m.valid_prefixes}
            if Path(prefix).resolve() in listed:
                found[path.resolve()] = (f"{key} ({prefix})", m)
    return list(found.values())


def _blend(prefixes: list[str], weights: Optional[list[float]]) -> Optional[tuple[list[str], Optional[list[float]]]]:
    return (list(prefixes), list(weights) if weights else None) if prefixes else None


# The fixed part of megatron's .idx header: magic, version (u64), dtype code (u8), sequence
# count (u64), document-boundary count (u64); then int32 lengths, int64 byte pointers and
# int64 document boundaries (megatron/core/datasets/indexed_dataset.py, _IndexReader).
_IDX_FIXED = struct.Struct("<9sQBQQ")
VOCAB_SAMPLE_TOKENS = 1 << 20  # token ids read per prefix for the vocabulary check (never a full scan)
_CHUNK = 1 << 20  # sequences per vectorized pass over the index


def read_idx_header(idx: Path, key: str) -> tuple[int, int, int, int]:
    """A megatron ``.idx`` file's fixed header: (version, dtype code, sequences, documents)."""
    with idx.open("rb") as fh:
        head = fh.read(_IDX_FIXED.size)
    if len(head) < _IDX_FIXED.size or head[: len(_INDEX_HEADER)] != _INDEX_HEADER:
        raise ValueError(f"{key}: {idx} is not a megatron index (no {_INDEX_HEADER!r} header)")
    _, version, code, sequences, documents = _IDX_FIXED.unpack(head)
    return version, code, sequences, documents


def check_indexed_dataset(prefix: str, key: str, vocab_size: int) -> np.ndarray:
    """Check one megatron ``.bin/.idx`` pair before megatron reads it; return its sequence lengths.

    Cheap checks only: the index header (magic, version, dtype code), the index's size against
    its own counts, pointers that follow the lengths (one vectorized pass over the index), the
    ``.bin`` size against the last pointer + length, and a bounded sample of
    :data:`VOCAB_SAMPLE_TOKENS` token ids against the vocabulary. Each failure is one
    ``ValueError`` naming ``key`` and the file.
    """
    idx, bin_ = Path(get_idx_path(prefix)), Path(get_bin_path(prefix))
    for path in (bin_, idx):
        if not path.is_file():
            raise ValueError(f"{key}: {path} does not exist")
    version, code, n, bounds = read_idx_header(idx, key)
    if version != 1:
        raise ValueError(f"{key}: {idx} has index version {version}; megatron reads version 1")
    try:
        dtype = np.dtype(DType.dtype_from_code(code))
    except ValueError:
        raise ValueError(
            f"{key}: {idx} has dtype code {code}, not one of megatron's ({[d.value for d in DType]})"
        ) from None
    if dtype.kind not in "iu":
        raise ValueError(f"{key}: {idx} stores tokens as {dtype} (dtype code {code}); token ids must be integers")
    want = _IDX_FIXED.size + 12 * n + 8 * bounds
    have = idx.stat().st_size
    if have != want:
        raise ValueError(
            f"{key}: {idx} is {have} bytes but its header ({n} sequences, {bounds} document boundaries) "
            f"needs {want}: truncated or corrupt"
        )
    if n == 0:
        raise ValueError(f"{key}: {prefix} is empty (0 sequences in {idx.name})")
    mm = np.memmap(idx, dtype=np.uint8, mode="r")
    lengths = np.frombuffer(mm, np.int32, n, _IDX_FIXED.size)
    pointers = np.frombuffer(mm, np.int64, n, _IDX_FIXED.size + 4 * n)
    docs = np.frombuffer(mm, np.int64, bounds, _IDX_FIXED.size + 12 * n)
    if bounds < 2 or docs[0] != 0 or docs[-1] != n:
        raise ValueError(f"{key}: {idx} has corrupt document boundaries (they must run from 0 to {n})")
    if pointers[0] != 0:
        raise ValueError(f"{key}: {idx} is corrupt (its first pointer is {pointers[0]}, not 0)")
    for start in range(0, n, _CHUNK):
        lens = lengths[start : start + _CHUNK + 1].astype(np.int64)
        ptrs = pointers[start : start + _CHUNK + 1]
        if (lens < 0).any() or not np.array_equal(ptrs[1:], ptrs[:-1] + lens[:-1] * dtype.itemsize):
            raise ValueError(f"{key}: {idx} is corrupt (its pointers do not follow its sequence lengths)")
    need = int(pointers[-1]) + int(lengths[-1]) * dtype.itemsize
    size = bin_.stat().st_size
    if size != need:
        why = "truncated" if size < need else "longer than its index says: not this index's .bin"
        if size in (2 * need, need // 2) and need:
            why += f" (exactly {size / need:g}x: written with another dtype than the index's {dtype}?)"
        raise ValueError(f"{key}: {bin_} is {size} bytes but {idx.name} says {need} ({dtype} tokens): {why}")
    tokens = need // dtype.itemsize
    if tokens == 0:
        raise ValueError(f"{key}: {prefix} is empty (its sequences hold 0 tokens)")
    ids = np.memmap(bin_, dtype=dtype, mode="r", shape=(tokens,))
    windows = 16
    width = max(1, VOCAB_SAMPLE_TOKENS // windows)
    starts = np.unique(np.linspace(0, max(0, tokens - width), windows).astype(np.int64))
    lo = min(int(ids[s : s + width].min()) for s in starts)
    hi = max(int(ids[s : s + width].max()) for s in starts)
    if lo < 0 or hi >= vocab_size:
        bad = hi if hi >= vocab_size else lo
        raise ValueError(
            f"{key}: {bin_} holds token id {bad}, outside the vocabulary of the run's tokenizer "
            f"({vocab_size} ids): made with another tokenizer?"
        )
    return lengths


def _prefixes(cfg: RunConfig) -> tuple[list[str], list[str], Optional[list[float]], Optional[list[float]]]:
    """(train prefixes, valid prefixes, their weights): the manifest's, else the config's."""
    d = cfg.data
    if d.manifest:
        m = read_manifest(d.manifest)
        if not m.train_prefixes:
            raise ValueError(f'data.manifest: {m.path} has no training data ("train": {{"prefixes": []}})')
        # A manifest without valid prefixes (data_prep split.valid_fraction=0): data.split of the train blend.
        return m.train_prefixes, m.valid_prefixes, None, None
    return list(d.train_prefixes), list(d.valid_prefixes), d.train_weights, d.valid_weights


# Config keys that say where the data lies, not what it is: a resume may change them when
# :func:`data_identity` is unchanged (a study or sweep directory moved or copied elsewhere).
DATA_LOCATION_KEYS = ("data.manifest", "data.train_prefixes", "data.valid_prefixes", "data.tokenizer")


def data_identity(cfg: RunConfig, tokenizer: TokenizerInfo) -> dict[str, Any]:
    """What the run's data is, wherever it lies: the tokenizer's identity and, per split, each
    prefix's file name, token dtype, sequence and document counts (its ``.idx`` header) and the
    ``.bin``/``.idx`` sizes. O(1) per prefix (no hash of a corpus that may be terabytes): it
    tells a moved copy of the same files from other data, not a bit flip inside them."""
    if cfg.data.mock:
        return {"mock": True, "tokenizer": tokenizer.unique_identifiers["identity"]}
    train, valid, train_w, valid_w = _prefixes(cfg)

    def files(prefix: str, key: str) -> list[Any]:
        idx, bin_ = Path(get_idx_path(prefix)), Path(get_bin_path(prefix))
        _, code, sequences, documents = read_idx_header(idx, key)
        return [Path(prefix).name, code, sequences, documents, bin_.stat().st_size, idx.stat().st_size]

    return {
        "tokenizer": tokenizer.unique_identifiers["identity"],
        "train": [files(p, "data.manifest" if cfg.data.manifest else "data.train_prefixes") for p in train],
        "valid": [files(p, "data.manifest" if cfg.data.manifest else "data.valid_prefixes") for p in valid],
        "train_weights": train_w,
        "valid_weights": valid_w,
    }


def dataset_config(
    cfg: RunConfig, tokenizer: TokenizerInfo, cache_dir: Optional[str], check: bool = True
) -> GPTDatasetConfig:
    """megatron's dataset config of the run; ``check``: each prefix by :func:`check_indexed_dataset` first."""
    d = cfg.data
    common = dict(
        random_seed=d.seed,
        sequence_length=cfg.model.seq_length,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
        path_to_cache=cache_dir,
        mid_level_dataset_surplus=0.005,
    )
    if d.mock:
        return GPTDatasetConfig(**common)
    train, valid, train_w, valid_w = _prefixes(cfg)
    if valid:
        config = GPTDatasetConfig(blend_per_split=[_blend(train, train_w), _blend(valid, valid_w), None], **common)
    else:
        config = GPTDatasetConfig(blend=_blend(train, train_w), split=d.split, **common)
    if check:
        by_split = None if valid else config.split_matrix  # megatron splits each train prefix by it
        for prefixes, key in ((train, "data.train_prefixes"), (valid, "data.valid_prefixes")):
            for prefix in prefixes:
                lengths = check_indexed_dataset(prefix, "data.manifest" if d.manifest else key, tokenizer.vocab_size)
                if by_split is not None:
                    _check_split(prefix, lengths, by_split, d.split)
    return config


def _check_split(prefix: str, lengths: np.ndarray, split_matrix: list, split: str) -> None:
    """Each part ``data.split`` gives a prefix must hold tokens: megatron loops forever on an
    empty one (GPTDataset._get_num_epochs). Bounds as megatron computes them."""
    n = len(lengths)
    for name, bounds in zip(("training", "validation"), split_matrix[:2]):
        if bounds is None:
            continue
        beg, end = int(round(bounds[0] * n)), int(round(bounds[1] * n))
        if end <= beg or not lengths[beg:end].any():
            raise ValueError(
                f"data.split: {split!r} leaves the {name} split of {prefix} empty ({end - beg} of its {n} "
                "documents); give data.valid_prefixes, more documents or another data.split"
            )


@dataclass
class Datasets:
    train: Any
    valid: Any
    tokenizer: TokenizerInfo


def check_data(cfg: RunConfig) -> TokenizerInfo:
    """Every check of the run's data that needs no process group or model: the manifest, the
    tokenizer (and that ``data.tokenizer`` is the data's: :func:`check_tokenizer_source`) and each prefix (:func:`check_indexed_dataset`), so that broken data exits 2
    before anything is built. Returns the tokenizer's description."""
    d = cfg.data  # data.tokenizer without a manifest: loaded (parsed, hashed) once for both checks
    given = _given_tokenizer(d.tokenizer) if d.tokenizer and not d.manifest and not d.mock else None
    tokenizer = tokenizer_info(cfg, given)
    check_tokenizer_source(cfg, given)
    if not cfg.data.mock:
        dataset_config(cfg, tokenizer, None)
    return tokenizer


def check_run_data(cfg: RunConfig) -> TokenizerInfo:
    """What the trainer checks of the run's data before a process group or model exists: a data
    source is given (``RunConfig.check_data_source``), :func:`check_data`, and ``model.vocab_size``
    against the data's tokenizer. Each failure is one ``ValueError`` (or ``FileNotFoundError``)
    naming the key and the file. ``launch job`` runs it too, before it starts or submits ranks."""
    cfg.check_data_source()
    tokenizer = check_data(cfg)
    if cfg.model.vocab_size is not None and cfg.model.vocab_size != tokenizer.vocab_size and not cfg.data.mock:
        raise ValueError(
            f"model.vocab_size: {cfg.model.vocab_size} disagrees with the data's tokenizer ({tokenizer.vocab_size}); "
            "set model.vocab_size=null to take the tokenizer's"
        )
    return tokenizer


@contextlib.contextmanager
def index_cache_lock(cache_dir: Optional[str]) -> Iterator[None]:
    """One process at a time builds or reads the index cache in ``cache_dir`` (a ``flock`` on its
    ``build.lock``): megatron writes the cache files in place, and the runs of a sweep share one cache
    (``launch`` sets ``data.cache_dir``), so a run starting beside another could read its half-written
    files. The first builds them; the others wait, then load them. A run's other ranks read after
    its rank 0 (which holds the lock) has written them, and take no lock."""
    if cache_dir is None:
        yield
        return
    Path(cache_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(cache_dir) / "build.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        yield


def build_datasets(
    cfg: RunConfig, cache_dir: Optional[str], checked: Optional[TokenizerInfo] = None, steps: Optional[int] = None
) -> Datasets:
    """Build train and valid datasets (rank 0 first, so the index cache is written once).
    ``checked``: what :func:`check_data` returned, when it already ran (neither the tokenizer
    nor the data is read again); ``steps``: the training samples of that many steps instead of
    ``training.steps``' (another run's order, :func:`same_sample_order`)."""
    tokenizer = checked or tokenizer_info(cfg)
    config = dataset_config(cfg, tokenizer, cache_dir, check=checked is None)
    g = cfg.training.global_batch_size
    sizes = [(steps or cfg.training.steps) * g, cfg.eval.batches * g, 0]
    cls = MockGPTDataset if cfg.data.mock else GPTDataset

    def build(lock: bool = True) -> list:
        with index_cache_lock(cache_dir if lock else None):
            return BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, config).build()

    if dist.is_initialized() and dist.get_world_size() > 1:
        built = build() if dist.get_rank() == 0 else None
        dist.barrier()
        if built is None:  # rank 0 has written the cache; megatron's build meets rank 0 at its own barriers,
            built = build(lock=False)  # so taking the lock here would wait on rank 0 forever
    else:
        built = build()
    train, valid, _ = built
    if valid is None or len(valid) == 0:
        raise ValueError("data: the validation split is empty; give data.valid_prefixes or a split with a valid part")
    return Datasets(train, valid, tokenizer)


def sample_order(dataset: Any, n: int) -> list[np.ndarray]:
    """Which samples positions ``[0, n)`` of a megatron training dataset are, as arrays: for a
    ``GPTDataset`` each position's first and last (document, offset), read through its shuffle,
    sample and document indices; for a ``BlendedDataset`` each position's (dataset, sample) and
    its parts' orders. Two datasets of the same data and seed built for different sample counts
    (``training.steps``) give equal arrays exactly when they read the same samples there: megatron
    shuffles over as many epochs as the count needs, so a count that needs another epoch (or
    moves the final-epoch split) reorders every sample."""
    if hasattr(dataset, "dataset_index"):  # megatron's BlendedDataset
        if dataset.dataset_index is None:
            dataset[0]  # megatron memory-maps a cached index on first access
        which = np.asarray(dataset.dataset_index[:n], dtype=np.int64)
        within = np.asarray(dataset.dataset_sample_index[:n], dtype=np.int64)
        order = [which, within]
        for k, part in enumerate(dataset.datasets):
            used = within[which == k]
            order += sample_order(part, int(used.max()) + 1) if used.size else []
        return order
    if dataset.shuffle_index is None:
        dataset[0]
    j = np.asarray(dataset.shuffle_index[:n], dtype=np.int64)
    starts, docs = np.asarray(dataset.sample_index), np.asarray(dataset.document_index)
    return [docs[starts[j, 0]], starts[j, 1], docs[starts[j + 1, 0]], starts[j + 1, 1]]


def same_sample_order(a: Any, b: Any, n: int) -> bool:
    """Whether positions ``[0, n)`` of two training datasets are the same samples (:func:`sample_order`)."""
    x, y = sample_order(a, n), sample_order(b, n)
    return len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))


@dataclass(frozen=True)
class BatchPlan:
    """Which samples each rank reads: micro-batch j of step s on data-parallel rank r."""

    global_batch_size: int
    micro_batch_size: int
    dp_size: int
    dp_rank: int

    def __post_init__(self) -> None:
        from runconfig.validate import check_batch_split

        check_batch_split(self.global_batch_size, self.micro_batch_size, self.dp_size)

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp_size)

    def indices(self, step: int, micro: int) -> range:
        start = step * self.global_batch_size + (micro * self.dp_size + self.dp_rank) * self.micro_batch_size
        return range(start, start + self.micro_batch_size)


def collate(dataset: Any, indices: range) -> dict[str, torch.Tensor]:
    samples = [dataset[i] for i in indices]
    return {key: torch.stack([s[key] for s in samples]) for key in ("tokens", "labels", "loss_mask", "position_ids")}


def micro_batches(dataset: Any, plan: BatchPlan, step: int) -> list[dict[str, torch.Tensor]]:
    """This rank's micro-batches of training step ``step`` (0-based)."""
    return [collate(dataset, plan.indices(step, j)) for j in range(plan.num_microbatches)]


def eval_micro_batches(dataset: Any, plan: BatchPlan, num_batches: int) -> list[dict[str, torch.Tensor]]:
    """This rank's share of the fixed held-out batches (the same for every run)."""
    return [mb for step in range(num_batches) for mb in micro_batches(dataset, plan, step)]


def data_parallel_plan(cfg: RunConfig) -> BatchPlan:
    return BatchPlan(
        cfg.training.global_batch_size,
        cfg.training.micro_batch_size,
        parallel_state.get_data_parallel_world_size(),
        parallel_state.get_data_parallel_rank(),
    )


def token_checksum(batches: list[dict[str, torch.Tensor]]) -> str:
    """A short digest of the tokens in some batches (logged to prove runs saw the same data)."""
    h = hashlib.sha256()
    for b in batches:
        h.update(np.ascontiguousarray(b["tokens"].numpy()).tobytes())
    return h.hexdigest()[:16]

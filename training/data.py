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

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.distributed as dist
from megatron.core import parallel_state
from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig, MockGPTDataset

from runconfig.schema import RunConfig


@dataclass(frozen=True)
class Manifest:
    """What training needs from a data_prep ``manifest.json``."""

    path: Path
    train_prefixes: list[str]
    valid_prefixes: list[str]
    vocab_size: int
    eod_id: int
    tokenizer_path: Optional[str]
    tokenizer_sha256: Optional[str]


def read_manifest(path: str | Path) -> Manifest:
    """Read a data_prep manifest (the file or its directory); prefixes resolve against its dir."""
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise ValueError(f"data.manifest: {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"data.manifest: {path} is not valid JSON: {exc}") from exc
    base = path.parent
    try:
        tok = data["tokenizer"]
        return Manifest(
            path=path,
            train_prefixes=[str(base / p) for p in data["train"]["prefixes"]],
            valid_prefixes=[str(base / p) for p in data["valid"]["prefixes"]],
            vocab_size=int(tok["vocab_size"]),
            eod_id=int(tok["eod_id"]),
            tokenizer_path=str(base / tok["path"]) if tok.get("path") else None,
            tokenizer_sha256=tok.get("sha256"),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"data.manifest: {path} lacks the key {exc}") from exc


class TokenizerInfo:
    """The three attributes megatron's GPTDataset reads from a tokenizer."""

    def __init__(self, vocab_size: int, eod: int, identity: str) -> None:
        self.vocab_size = vocab_size
        self.eod = eod
        self.pad = -1  # never a real token: megatron masks nothing
        self.unique_identifiers = {"class": "depthmup.TokenizerInfo", "identity": identity, "eod": eod}


def tokenizer_info(cfg: RunConfig) -> TokenizerInfo:
    d = cfg.data
    if d.manifest:
        m = read_manifest(d.manifest)
        return TokenizerInfo(m.vocab_size, m.eod_id, m.tokenizer_sha256 or str(m.path))
    if d.tokenizer:
        from data_prep.tokenizer import load_tokenizer

        tok = load_tokenizer(d.tokenizer)
        digest = hashlib.sha256(Path(d.tokenizer).read_bytes()).hexdigest()
        return TokenizerInfo(tok.vocab_size, tok.eod, digest)
    if d.mock:
        return TokenizerInfo(cfg.model.vocab_size, cfg.model.vocab_size - 1, "mock")
    raise ValueError("data: give data.manifest, data.tokenizer (with data.train_prefixes) or data.mock=true")


def _blend(prefixes: list[str], weights: Optional[list[float]]) -> Optional[tuple[list[str], Optional[list[float]]]]:
    return (list(prefixes), list(weights) if weights else None) if prefixes else None


def _check_prefixes(prefixes: list[str], key: str) -> None:
    for prefix in prefixes:
        for ext in (".bin", ".idx"):
            if not Path(prefix + ext).is_file():
                raise ValueError(f"{key}: {prefix}{ext} does not exist")


def dataset_config(cfg: RunConfig, tokenizer: TokenizerInfo, cache_dir: Optional[str]) -> GPTDatasetConfig:
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
    train, valid = list(d.train_prefixes), list(d.valid_prefixes)
    train_w, valid_w = d.train_weights, d.valid_weights
    if d.manifest:
        m = read_manifest(d.manifest)
        if not m.train_prefixes:
            raise ValueError(f'data.manifest: {m.path} has no training data ("train": {{"prefixes": []}})')
        # A manifest without valid prefixes (data_prep split.valid_fraction=0): data.split of the train blend.
        train, valid, train_w, valid_w = m.train_prefixes, m.valid_prefixes, None, None
    _check_prefixes(train, "data.train_prefixes")
    _check_prefixes(valid, "data.valid_prefixes")
    if valid:
        return GPTDatasetConfig(blend_per_split=[_blend(train, train_w), _blend(valid, valid_w), None], **common)
    return GPTDatasetConfig(blend=_blend(train, train_w), split=d.split, **common)


@dataclass
class Datasets:
    train: Any
    valid: Any
    tokenizer: TokenizerInfo


def build_datasets(cfg: RunConfig, cache_dir: Optional[str]) -> Datasets:
    """Build train and valid datasets (rank 0 first, so the index cache is written once)."""
    tokenizer = tokenizer_info(cfg)
    config = dataset_config(cfg, tokenizer, cache_dir)
    g = cfg.training.global_batch_size
    sizes = [cfg.training.steps * g, cfg.eval.batches * g, 0]
    cls = MockGPTDataset if cfg.data.mock else GPTDataset

    def build() -> list:
        return BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, config).build()

    if dist.is_initialized() and dist.get_world_size() > 1:
        built = build() if dist.get_rank() == 0 else None
        dist.barrier()
        if built is None:
            built = build()
    else:
        built = build()
    train, valid, _ = built
    if valid is None or len(valid) == 0:
        raise ValueError("data: the validation split is empty; give data.valid_prefixes or a split with a valid part")
    return Datasets(train, valid, tokenizer)


@dataclass(frozen=True)
class BatchPlan:
    """Which samples each rank reads: micro-batch j of step s on data-parallel rank r."""

    global_batch_size: int
    micro_batch_size: int
    dp_size: int
    dp_rank: int

    def __post_init__(self) -> None:
        per_step = self.micro_batch_size * self.dp_size
        if self.global_batch_size % per_step:
            raise ValueError(
                f"training.global_batch_size: {self.global_batch_size} is not a multiple of "
                f"training.micro_batch_size x data-parallel size = {per_step}"
            )

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

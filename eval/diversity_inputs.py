"""What ``eval diversity`` measures on: the run config (one model process), the model at
initialization or loaded from a checkpoint, and a fixed batch of tokens.

Errors are :class:`InputError` naming the option or file (the CLI exits 2 on them).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from runconfig import ConfigError, load_config
from runconfig.schema import RunConfig
from rundir.files import CONFIG_FILE

if TYPE_CHECKING:
    import torch

    from training.checkpoint import Checkpoint


class InputError(ValueError):
    """Bad input (a file, an option); the message names it. Exit code 2."""


def find_checkpoint(run_dir: Path, step: int | None = None) -> Checkpoint:
    """The latest checkpoint of ``run_dir`` (or ``step``); InputError naming what is missing."""
    from training.checkpoint import CheckpointError
    from training.checkpoint import find_checkpoint as find

    if not run_dir.is_dir():
        raise InputError(f"--run-dir: {run_dir} does not exist or is not a directory")
    try:
        return find(run_dir, step)
    except CheckpointError as exc:
        raise InputError(f"{'--step' if step is not None else '--run-dir'}: {exc}") from exc


def run_config(path: Path, overrides: list[str] | None = None) -> RunConfig:
    """The run config, with one model process (TP=PP=1) whatever the run used."""
    try:
        cfg = load_config(RunConfig, path, overrides or [])
    except ConfigError as exc:
        raise InputError(str(exc)) from exc
    if cfg.model.transformer_impl != "local":
        raise InputError(
            f"{path}: model.transformer_impl={cfg.model.transformer_impl!r}; only the local spec can be rebuilt "
            "on CPU (Transformer Engine's parameter names differ)"
        )
    from training.checkpoint import one_process_config

    return one_process_config(cfg)


def with_depth(cfg: RunConfig, num_layers: int) -> RunConfig:
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_layers=num_layers))


def token_range(cfg: RunConfig, fallback: int | None = None) -> int:
    """The tokenizer's vocabulary (random tokens are drawn below it), else ``fallback``."""
    from training.data import tokenizer_info

    if cfg.model.vocab_size:
        return cfg.model.vocab_size
    try:
        return tokenizer_info(cfg).vocab_size
    except (ValueError, OSError) as exc:
        if fallback is None:
            raise InputError(f"model.vocab_size: not set and the data's tokenizer is unavailable ({exc})") from exc
        return fallback


def random_tokens(vocab: int, batch_size: int, seq_length: int, seed: int) -> torch.Tensor:
    """The same tokens for every depth and every checkpoint of a given seed."""
    import torch

    gen = torch.Generator().manual_seed(10_000 + seed)
    return torch.randint(0, vocab, (batch_size, seq_length), generator=gen)


def valid_tokens(cfg: RunConfig, run_dir: Path, batch_size: int, seq_length: int) -> torch.Tensor:
    """The first sequences of the run's validation split (the data the run was evaluated on)."""
    from training.data import build_datasets, collate

    try:
        data = build_datasets(cfg, cfg.index_cache_dir(run_dir))
    except (ValueError, OSError) as exc:
        raise InputError(f"--data valid: cannot build the validation data of {run_dir / CONFIG_FILE}: {exc}") from exc
    if len(data.valid) < batch_size:
        raise InputError(f"--batch-size: the validation split has only {len(data.valid)} sequences")
    return collate(data.valid, range(batch_size))["tokens"][:, :seq_length]


def init_model(cfg: RunConfig, seed: int) -> torch.nn.Module:
    """The patched model at initialization (needs megatron parallel state)."""
    import torch

    from training.model import build_model, padded_vocab_size

    torch.manual_seed(seed)
    return build_model(cfg, padded_vocab_size(token_range(cfg), 1, cfg.model.make_vocab_size_divisible_by)).eval()


def checkpoint_model(cfg: RunConfig, ckpt: Checkpoint) -> torch.nn.Module:
    """The run's model with the checkpoint's weights, fp32 on CPU; InputError naming the file."""
    from training.checkpoint import CheckpointError, load_model_weights

    try:
        return load_model_weights(cfg, ckpt)
    except CheckpointError as exc:
        raise InputError(f"--run-dir: {exc}") from exc

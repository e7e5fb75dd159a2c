"""Hugging Face datasets as data_prep inputs, resolved by the ``datasets`` library itself.

Two layouts are recognised in ``input.paths`` directories:

* a ``Dataset.save_to_disk`` folder (``state.json``), or a ``DatasetDict`` one
  (``dataset_dict.json``, of which ``input.hf_split`` is read): ``datasets.load_from_disk``
  gives its Arrow files in row order;
* a hub-cache dataset, ``.../hub/datasets--ORG--NAME`` (the snapshot ``refs/main`` names) or
  one of its ``snapshots/<sha>`` folders: ``datasets.load_dataset_builder`` resolves the files
  of ``input.hf_split`` (and ``input.hf_config``) as ``load_dataset`` would, README configs
  included, without loading or converting anything.

The files become ordinary inputs: parquet files go to the parquet reader, Arrow files to the
Arrow reader (data_prep.readers), with the same sharding, skip accounting and resume as any
other input. The text column is ``input.text_key``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from data_prep.config import InputConfig

# The file formats of a hub dataset data_prep reads, by the packaged builder datasets picks.
_BUILDER_FORMATS = {"parquet": "parquet", "arrow": "arrow", "json": "jsonl"}


class HFDatasetError(ValueError):
    """A Hugging Face dataset folder that cannot be read as asked; names the folder and key."""


def is_hf_dataset(path: str) -> bool:
    """A save_to_disk folder, a hub-cache dataset repository, or one of its snapshots."""
    p = Path(path)
    if (p / "state.json").is_file() or (p / "dataset_dict.json").is_file():
        return True
    if p.name.startswith("datasets--") and (p / "snapshots").is_dir():
        return True
    return p.parent.name == "snapshots" and p.parent.parent.name.startswith("datasets--")


def hf_dataset_files(path: str, cfg: InputConfig) -> list[tuple[str, str]]:
    """(absolute file path, data_prep format) of the dataset at ``path``, in row order."""
    p = Path(path)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never ask the network
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if (p / "state.json").is_file() or (p / "dataset_dict.json").is_file():
        return _saved_files(p, cfg)
    return _hub_files(_snapshot(p), cfg)


def _saved_files(path: Path, cfg: InputConfig) -> list[tuple[str, str]]:
    from datasets import DatasetDict, load_from_disk

    try:
        loaded = load_from_disk(str(path))
    except Exception as exc:  # datasets raises its own errors for broken folders
        raise HFDatasetError(f"input.paths: {path} is not a readable save_to_disk folder: {exc}") from exc
    if isinstance(loaded, DatasetDict):
        if cfg.hf_split not in loaded:
            raise HFDatasetError(f"input.hf_split: {path} has no split {cfg.hf_split!r} (it has {sorted(loaded)})")
        loaded = loaded[cfg.hf_split]
    files = [c["filename"] for c in loaded.cache_files]
    rows = sum(_arrow_rows(f) for f in files)
    if rows != len(loaded):  # an indices mapping would reorder or drop rows of the files
        raise HFDatasetError(f"input.paths: {path}: its files hold {rows} rows but the dataset {len(loaded)}")
    return [(os.path.abspath(f), "arrow") for f in files]


def _arrow_rows(path: str) -> int:
    from datasets import Dataset

    return len(Dataset.from_file(path))


def _snapshot(path: Path) -> Path:
    """The snapshot folder of a hub-cache repository (``refs/main``, else its only snapshot)."""
    if path.parent.name == "snapshots":
        return path
    ref = path / "refs" / "main"
    if ref.is_file():
        snapshot = path / "snapshots" / ref.read_text().strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = sorted(p for p in (path / "snapshots").iterdir() if p.is_dir())
    if len(snapshots) != 1:
        names = [s.name for s in snapshots]
        raise HFDatasetError(
            f"input.paths: {path} has {len(snapshots)} snapshots {names} and no refs/main; give one snapshot folder"
        )
    return snapshots[0]


def _hub_files(snapshot: Path, cfg: InputConfig) -> list[tuple[str, str]]:
    import datasets

    with tempfile.TemporaryDirectory() as cache:  # the builder's lock files go here, not to ~/.cache
        try:
            builder = datasets.load_dataset_builder(str(snapshot), name=cfg.hf_config, cache_dir=cache)
        except Exception as exc:
            key = "input.hf_config" if cfg.hf_config else "input.paths"
            raise HFDatasetError(f"{key}: {snapshot} cannot be resolved as a dataset: {exc}") from exc
    module = _module_name(builder)
    fmt = _BUILDER_FORMATS.get(module)
    if fmt is None:
        raise HFDatasetError(
            f"input.paths: {snapshot} is a dataset of {module} files; data_prep reads parquet, arrow and json(l) ones"
        )
    data_files = builder.config.data_files or {}
    splits = {str(k): v for k, v in data_files.items()}
    if cfg.hf_split not in splits:
        raise HFDatasetError(f"input.hf_split: {snapshot} has no split {cfg.hf_split!r} (it has {sorted(splits)})")
    return [(os.path.abspath(f), fmt) for f in splits[cfg.hf_split]]


def _module_name(builder: object) -> str:
    """The packaged builder's name (parquet, arrow, json, csv, ...) from its module."""
    module = type(builder).__module__  # datasets.packaged_modules.parquet.parquet
    parts = module.split(".")
    return parts[parts.index("packaged_modules") + 1] if "packaged_modules" in parts else module

"""One-call entry points for other tools (the CPU demo, notebooks)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from data_prep.config import DataPrepConfig
from jobscripts.atomic import atomic_write_bytes


def load_data_prep_config(
    path: str | os.PathLike | None = None, overrides: Sequence[str] = (), extra=()
) -> DataPrepConfig:
    """The validated config: defaults <- YAML file <- ``extra`` dicts <- ``key=value`` overrides."""
    from runconfig import load_config

    return load_config(DataPrepConfig, path, overrides, extra)


def run_config(path: str | os.PathLike | None = None, overrides: Sequence[str] = ()) -> dict:
    """``python -m data_prep --config FILE key=value ...`` as a function; returns the manifest."""
    from data_prep.pipeline import run

    return run(load_data_prep_config(path, overrides))


def build_from_texts(
    texts_or_jsonl_path: Iterable[str] | str | os.PathLike,
    outdir: str | os.PathLike,
    vocab_size: int = 2048,
    tokenizer: str | None = None,
    workers: int | None = None,
    valid_fraction: float = 0.01,
    filters: bool = True,
    overrides: Sequence[str] = (),
) -> dict:
    """Run the whole pipeline on English text; returns the manifest (also in ``outdir/manifest.json``).

    ``texts_or_jsonl_path`` is a JSONL file (``{"text": ...}`` per line, .gz/.zst allowed) or an
    iterable of strings, which is first written to ``outdir/input/texts.jsonl`` so that it takes
    the same JSONL path as Common Crawl dumps. ``filters=False`` turns off the language and
    quality filters (exact dedup stays on): short or synthetic demo text would not pass them.
    ``overrides`` are dotted ``key=value`` strings, as on the command line.
    """
    outdir = Path(outdir)
    if isinstance(texts_or_jsonl_path, (str, os.PathLike)):
        source = Path(texts_or_jsonl_path)
    else:
        lines = [json.dumps({"text": text}, ensure_ascii=False) for text in texts_or_jsonl_path]
        data = ("\n".join(lines) + "\n").encode()
        source = outdir / "input" / "texts.jsonl"
        if not source.exists() or hashlib.sha256(source.read_bytes()).digest() != hashlib.sha256(data).digest():
            atomic_write_bytes(source, data)
    extra = {
        "input": {"paths": [str(source)], "format": "jsonl"},
        "output": {"dir": str(outdir)},
        "tokenizer": {"vocab_size": vocab_size, "path": tokenizer},
        "split": {"valid_fraction": valid_fraction},
        "runtime": {"workers": workers, "progress": False},
    }
    if not filters:
        extra["clean"] = {"language": {"enabled": False}, "quality": {"enabled": False}, "c4": {"enabled": False}}
    from data_prep.pipeline import run

    return run(load_data_prep_config(None, overrides, [extra]))

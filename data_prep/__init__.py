"""Common Crawl shards (WET, WARC, JSONL, parquet) -> Megatron indexed datasets.

``python -m data_prep --config FILE [key=value ...]``; see docs/data_prep.md.
Names are imported lazily so worker processes load only what their stage needs.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DataPrepConfig",
    "DataPrepError",
    "Tokenizer",
    "build_from_texts",
    "load_data_prep_config",
    "load_tokenizer",
    "run",
    "run_config",
]

_WHERE = {
    "DataPrepConfig": "data_prep.config",
    "DataPrepError": "data_prep.pipeline",
    "run": "data_prep.pipeline",
    "Tokenizer": "data_prep.tokenizer",
    "load_tokenizer": "data_prep.tokenizer",
    "build_from_texts": "data_prep.api",
    "load_data_prep_config": "data_prep.api",
    "run_config": "data_prep.api",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'data_prep' has no attribute {name!r}")

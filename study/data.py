"""What a study's runs train on: the corpus through ``data_prep``, and the base run config.

``prepare_data`` builds the corpus JSONL (:mod:`study.corpus`) and runs ``data_prep`` on it
(the Common Crawl dump path: cleaning, a SentencePiece BPE tokenizer, megatron ``.bin/.idx``
train/valid prefixes); both steps skip work already done. ``base_config`` is the run config
every run of the study starts from (depth, preset, LR and seed are the planner's).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jobscripts.atomic import atomic_write_text
from study.corpus import CORPORA, DEFAULT_CORPUS, CorpusError, corpus_jsonl
from study.log import log as _log
from study.spec import Study


def base_config(s: Study, manifest_dir: Path) -> dict[str, Any]:
    """The run config every demo run starts from (depth, preset and LR are swept)."""
    return {
        "model": {
            "num_layers": s.depths[0],
            "hidden_size": s.hidden_size,
            "num_attention_heads": s.heads,
            "seq_length": s.seq_length,
        },
        "parametrization": {"preset": "sp", "base_num_layers": s.depths[0], "base_hidden_size": s.hidden_size},
        "optimizer": {"name": "adamw", "lr": 2.0 ** s.base_lrs_log2[0], "min_lr_ratio": 0.1, "weight_decay": 0.0},
        "scheduler": {"decay_style": "cosine", "warmup_steps": s.warmup},
        "training": {"steps": s.steps, "micro_batch_size": s.batch, "global_batch_size": s.batch},
        "eval": {"at": [0.5, 1.0], "batches": s.eval_batches},
        "data": {"manifest": str(manifest_dir)},
        "run": {"dir": "unused", "seed": 0},
        "checkpoint": {"final": False, "interval": max(50, s.steps // 4)},
        "logging": {"interval": 20, "progress_bar": False, "diagnostics_interval": s.diagnostics_interval},
        "parallel": {"device": "cpu"},
    }


def prepare_data(out: Path, s: Study, workers: int, corpus_name: str = DEFAULT_CORPUS) -> Path:
    """Corpus -> data_prep (JSONL path) -> manifest; both steps skip work already done.

    ``out/corpus.name`` records which corpus ``out/data`` was built from: a rerun into the
    same directory with another ``--corpus`` is refused (CorpusError) instead of mixing them.
    """
    from data_prep.api import build_from_texts

    if corpus_name not in CORPORA:
        raise CorpusError(f"--corpus {corpus_name}: unknown corpus; the corpora are {sorted(CORPORA)}")
    marker = out / "corpus.name"
    if marker.is_file() and marker.read_text().strip() != corpus_name:
        raise CorpusError(
            f"{out} holds a study on corpus {marker.read_text().strip()!r} ({marker}); "
            f"--corpus {corpus_name} needs another --out"
        )
    if not marker.is_file() and (out / "data").exists() and corpus_name != DEFAULT_CORPUS:
        raise CorpusError(f"{out / 'data'} was built before corpora were recorded (from {DEFAULT_CORPUS!r}); "
                          f"--corpus {corpus_name} needs another --out")  # fmt: skip
    atomic_write_text(marker, corpus_name + "\n")
    cache = Path(os.environ.get("DEPTHMUP_CACHE", Path.home() / ".cache" / "depthmup"))
    corpus = corpus_jsonl(out / "corpus", cache / "demo_corpus", corpus_name)
    data_dir = out / "data"
    manifest = build_from_texts(corpus, data_dir, vocab_size=s.vocab_size, workers=workers, valid_fraction=0.05)
    _log(
        f"data: {manifest['train']['tokens']:,} train / {manifest['valid']['tokens']:,} valid tokens "
        f"({manifest['train']['documents']} / {manifest['valid']['documents']} documents of {corpus_name}), "
        f"vocab {s.vocab_size}"
    )
    return data_dir

"""What a study's runs train on: the corpus through ``data_prep``, and the base run config.

``prepare_data`` builds the corpus JSONL (:mod:`study.corpus`) and runs ``data_prep`` on it
(the Common Crawl dump path: cleaning, a SentencePiece BPE tokenizer, megatron ``.bin/.idx``
train/valid prefixes); both steps skip work already done. ``base_config`` is the run config
every run of the study starts from (depth, preset, LR and seed are the planner's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from data_prep.manifest import MANIFEST_FILE, Manifest, read_manifest
from data_prep.tokenizer import file_sha256
from jobscripts.atomic import atomic_write_text
from rundir.contract import RUNS_DIR
from study.corpus import DEFAULT_CORPUS, CorpusError, corpus_jsonl, is_registry
from study.log import log as _log
from study.spec import Study


def base_config(s: Study, manifest_dir: Path) -> dict[str, Any]:
    """The run config every demo run starts from (depth, preset and LR are swept)."""
    config = {
        "model": {
            "num_layers": s.depths[0],
            "hidden_size": s.hidden_size,
            "num_attention_heads": s.heads,
            "seq_length": s.seq_length,
        },
        "parametrization": {"preset": "sp", "base_num_layers": s.depths[0], "base_hidden_size": s.hidden_size},
        "optimizer": {"name": "adamw", "lr": 2.0 ** s.base_lrs_log2[0], "min_lr_ratio": 0.1, "weight_decay": 0.0},
        "scheduler": {"decay_style": "cosine", "warmup_steps": s.warmup},
        "training": {"steps": s.steps, "micro_batch_size": s.micro_batch or s.batch, "global_batch_size": s.batch},
        "eval": {"at": list(s.eval_at), "batches": s.eval_batches},
        "data": {"manifest": str(manifest_dir)},
        "run": {"dir": "unused", "seed": 0},
        "checkpoint": {"final": False, "interval": s.checkpoint_interval or max(50, s.steps // 4)},
        "logging": {"interval": 20, "progress_bar": False, "diagnostics_interval": s.diagnostics_interval},
        "parallel": {"device": s.device},
    }
    if s.precision != "auto":  # only where set: the CPU studies' base configs stay as they were
        config["training"]["precision"] = s.precision
    return config


def prepare_data(out: Path, s: Study, workers: int) -> Path:
    """Corpus (the study's ``corpus`` key) -> data_prep (JSONL path) -> manifest; both steps
    skip work already done. A folder data_prep wrote (the user's prepared data) is trained on
    where it is, after its vocabulary is checked.

    ``out/corpus.name`` records which corpus ``out/data`` was built from: a rerun into the
    same directory with another corpus is refused (CorpusError) instead of mixing them. Data
    carried from another machine without the marker is accepted when its manifest names the
    study's corpus and vocabulary (``carried_manifest``).
    """
    built = is_registry(s.corpus) or Path(s.corpus).is_file()
    if built:
        data_dir = out / "data"
        _build(out, s, workers)
    else:
        data_dir = Path(s.corpus)
    try:
        m = read_manifest(data_dir, key="corpus")
    except ValueError as exc:
        raise CorpusError(str(exc)) from None
    if not built and m.vocab_size != s.vocab_size:  # the runs' embedding size is the study's vocab_size
        raise CorpusError(
            f"{m.path}: its tokenizer has {m.vocab_size} tokens, but study {s.name!r} has vocab_size {s.vocab_size}; "
            f"set vocab_size: {m.vocab_size} in the study file (prepared data keeps its tokenizer)"
        )
    if m.train_tokens is None or m.valid_tokens is None:
        raise CorpusError(f"{m.path}: not a complete data_prep manifest (no train/valid token counts)")
    _check_same_data(out, m)
    _log(
        f"data: {m.train_tokens:,} train / {m.valid_tokens:,} valid tokens "
        f"({m.train_documents} / {m.valid_documents} documents of {s.corpus}), vocab {s.vocab_size}"
    )
    tokens = s.steps * s.batch * s.seq_length
    _log(f"each run trains on {tokens:,} tokens: {tokens / m.train_tokens:.2f} passes over the train split")
    return data_dir


IDENTITY_FILE = "data_identity.json"


def _identity(m: Manifest) -> dict[str, Any]:
    """What the study's runs trained on, wherever it lies: the tokenizer, the splits' sizes and
    each input file's sha256 (from data_prep's manifest)."""
    return {
        "tokenizer_sha256": m.tokenizer_sha256,
        "train": [m.train_documents, m.train_tokens],
        "valid": [m.valid_documents, m.valid_tokens],
        "inputs_sha256": list(m.inputs_sha256),
    }


def _recorded_identity(out: Path) -> Optional[dict[str, Any]]:
    """The identity the study's first part recorded in ``out`` (None: none recorded)."""
    path = out / IDENTITY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def _has_runs(out: Path) -> bool:
    runs = out / "sweep" / RUNS_DIR
    return runs.is_dir() and any(runs.iterdir())


def _check_same_data(out: Path, m: Manifest) -> None:
    """The runs a study reuses trained on the data it trains on now: its base config names only
    the data's folder, so a corpus file edited between two parts (rebuilt in place) or a
    prepared folder prepared again would have the old runs reported as the new data's. The
    first part records the data's identity in ``out``; a later part with runs refuses another."""
    now = _identity(m)
    recorded = _recorded_identity(out)
    if recorded is not None and _has_runs(out):
        if recorded != now:
            changed = ", ".join(k for k in now if recorded.get(k) != now[k])
            raise CorpusError(
                f"{m.path}: not the data {out}'s runs trained on ({changed} differ from {out / IDENTITY_FILE}); "
                "give another --out for the new data, or restore the old"
            )
        return
    atomic_write_text(out / IDENTITY_FILE, json.dumps(now, indent=1) + "\n")


def _build(out: Path, s: Study, workers: int) -> None:
    """``out/data`` from a registry corpus or the user's JSONL, through data_prep (skipping what is done)."""
    marker = out / "corpus.name"
    recorded = marker.read_text().strip() if marker.is_file() else None
    if recorded is not None and recorded != s.corpus:
        raise CorpusError(
            f"{out} holds a study on corpus {recorded!r} ({marker}); corpus {s.corpus!r} needs another --out"
        )
    manifest = carried_manifest(out, s)  # data carried here names its corpus itself (checked): no marker needed
    if recorded is None and manifest is None and (out / "data").exists() and s.corpus != DEFAULT_CORPUS:
        raise CorpusError(f"{out / 'data'} was built before corpora were recorded (from {DEFAULT_CORPUS!r}); "
                          f"corpus {s.corpus!r} needs another --out")  # fmt: skip
    atomic_write_text(marker, s.corpus + "\n")
    data_dir = out / "data"
    built = data_dir / MANIFEST_FILE
    if manifest is None and built.is_file():
        # data_prep would rebuild out/data in place at the new vocabulary, under runs that trained
        # on the old one; those runs would then be reported as the new study's
        try:
            vocab = read_manifest(built, key="corpus").vocab_size
        except ValueError:  # not a complete manifest (a build cut short): data_prep redoes it
            vocab = None
        if vocab is not None and vocab != s.vocab_size:
            raise CorpusError(
                f"{built}: {out} holds a study trained at vocab_size {vocab}, but study {s.name!r} asks for "
                f"{s.vocab_size}; give another --out for the new vocabulary, or restore vocab_size"
            )
    if manifest is None and built.is_file() and not is_registry(s.corpus):
        # the user's JSONL edited since: data_prep would rebuild out/data in place under the old runs
        identity = _recorded_identity(out)
        if identity is not None and _has_runs(out) and identity.get("inputs_sha256") != [file_sha256(s.corpus)]:
            raise CorpusError(
                f"{s.corpus}: changed since {data_dir} was built from it (sha256 differs from {out / IDENTITY_FILE}); "
                f"{out} holds runs trained on the old text: give another --out, or restore the file"
            )
    if manifest is None:
        from data_prep.api import build_from_texts

        if is_registry(s.corpus):
            cache = Path(os.environ.get("DEPTHMUP_CACHE", Path.home() / ".cache" / "depthmup"))
            corpus = corpus_jsonl(out / "corpus", cache / "demo_corpus", s.corpus)
        else:
            corpus = Path(s.corpus)  # the user's JSONL, read where it is
        # the checks above decide whether out/data may be rebuilt (corpus, vocabulary, text); a
        # build of another config there (e.g. the user's JSONL read from a new path) is replaced
        build_from_texts(
            corpus, data_dir, vocab_size=s.vocab_size, workers=workers, valid_fraction=0.05,
            overrides=["output.overwrite=true"],
        )  # fmt: skip


def carried_manifest(out: Path, s: Study) -> Optional[Manifest]:
    """The manifest of ``out/data`` when it was built on another machine and carried here
    without its corpus (a GPU node that cannot download it: docs/gpu_runs.md), else None.

    Only when ``out/corpus/<corpus>.jsonl`` is absent; the manifest must then be complete and
    of the study's vocabulary and corpus (checked), or the study stops naming what differs.
    """
    if not is_registry(s.corpus) or (out / "corpus" / f"{s.corpus}.jsonl").is_file():
        return None  # the user's JSONL is read where it is: nothing is carried without it
    path = out / "data" / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = read_manifest(path, key="corpus")
    except ValueError as exc:
        raise CorpusError(str(exc)) from None
    inputs = [Path(p).name for p in manifest.input_paths]
    vocab = manifest.vocab_size
    if inputs != [f"{s.corpus}.jsonl"] or vocab != s.vocab_size:
        raise CorpusError(
            f"{path}: built from {inputs} at vocab {vocab}, but study {s.name!r} trains on {s.corpus!r} at vocab "
            f"{s.vocab_size}; rebuild it where the corpus can be fetched"
        )
    return manifest

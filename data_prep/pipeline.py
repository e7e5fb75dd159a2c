"""The whole run: clean (parallel) -> dedup + split (main) -> tokenizer -> tokenize (parallel) -> merge.

Resumable at shard granularity: every per-shard output has a marker JSON written last,
holding the fingerprint of what produced it; a rerun reuses outputs whose fingerprint
still matches and redoes the rest. Every decision that spans shards is recomputed from
the stored hashes in shard order, so a resumed run writes the same bytes as an
uninterrupted one, whatever the number of workers.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime as dt
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data_prep.clean import CleanTask, clean_shard, input_identity, shard_paths
from data_prep.config import DataPrepConfig, fingerprint
from data_prep.dedup import assign, sample_rows
from data_prep.filters import FILTER_NAMES, offline_env
from data_prep.readers import InputError, InputFile, expand_inputs
from data_prep.tokenizer import file_sha256, load_tokenizer, token_dtype, tokenizer_type, train_sentencepiece
from data_prep.writer import DROP, SPLITS, DatasetMerger, TokenizeTask, assignment_digest, part_paths, tokenize_shard
from runconfig.atomic import atomic_write_bytes, atomic_write_json, read_json

FORMAT_VERSION = 1
logger = logging.getLogger("data_prep")


class DataPrepError(RuntimeError):
    """The run cannot produce a dataset (error budget exceeded, nothing readable); work so far is kept."""


@dataclass
class Shard:
    index: int
    source: InputFile
    shard_id: str  # stable name of this input's files under .work/


@dataclass
class RunState:
    """What a run learned, stage by stage, for the manifest."""

    clean: list[dict] = field(default_factory=list)
    tokenize: list[dict] = field(default_factory=list)
    reused: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


def _shard_id(path: str) -> str:
    return hashlib.sha1(path.encode()).hexdigest()[:16]


def _worker_init() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    offline_env()


class _InlineExecutor(cf.Executor):
    """runtime.workers=0: run tasks in this process (debugging, tiny inputs)."""

    def submit(self, fn, /, *args, **kwargs):
        future: cf.Future = cf.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # KeyboardInterrupt and the like stop the run here and now
            future.set_exception(exc)
        return future


def _executor(workers: int) -> cf.Executor:
    """Worker processes from a fork server that has imported the stage modules once (Linux),
    so each worker starts in milliseconds without inheriting this process's threads; spawn elsewhere."""
    if workers == 0:
        _worker_init()
        return _InlineExecutor()
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["data_prep.clean", "data_prep.writer", "data_prep.preload"])
    else:
        context = multiprocessing.get_context("spawn")
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_worker_init)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="shard", disable=not enabled or total == 0, dynamic_ncols=True)


def run(cfg: DataPrepConfig) -> dict:
    """Run (or resume) the pipeline; returns the manifest written to ``<output.dir>/manifest.json``."""
    offline_env()
    started = time.time()
    sources = expand_inputs(cfg.input)  # bad inputs or tokenizer fail before anything is written
    if any(s.format == "warc" for s in sources) and cfg.input.html_extractor == "trafilatura":
        from data_prep.extract import _trafilatura_text

        try:
            _trafilatura_text("<html></html>")  # fail now, with the fix in the message, not once per record
        except ImportError as exc:
            raise InputError(str(exc)) from exc
    if cfg.tokenizer.path is not None:
        load_tokenizer(cfg.tokenizer.path, cfg.tokenizer.eod_token)
    out = Path(cfg.output.dir).resolve()
    work = out / ".work"
    work.mkdir(parents=True, exist_ok=True)
    with _exclusive(work / ".lock"):
        return _run_locked(cfg, sources, out, work, started)


@contextlib.contextmanager
def _exclusive(lock_path: Path):
    """One run per output directory: a second one would delete the first one's temporary files."""
    with open(lock_path, "a+") as fh:
        try:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no lock
            pass
        except OSError as exc:
            raise DataPrepError(f"another data_prep run is using {lock_path.parent.parent}") from exc
        yield


def _run_locked(cfg: DataPrepConfig, sources: list[InputFile], out: Path, work: Path, started: float) -> dict:
    _remove_stale_tmp_files(out)
    shards = [Shard(i, src, _shard_id(src.path)) for i, src in enumerate(sources)]
    workers = (os.cpu_count() or 1) if cfg.runtime.workers is None else cfg.runtime.workers
    workers = min(workers, len(shards)) if workers else 0
    state = RunState()
    with _executor(workers) as pool:
        t0 = time.perf_counter()
        state.clean = _stage_clean(pool, shards, cfg, work, state)
        state.seconds["clean"] = time.perf_counter() - t0
        _check_error_budget(state.clean, cfg, out)
        t0 = time.perf_counter()
        assignments, hashes = _plan(state.clean, shards, cfg, work)
        state.seconds["plan"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        tokenizer_file, tokenizer_info = _prepare_tokenizer(cfg, out, work, shards, hashes, assignments, state)
        state.seconds["tokenizer"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        merge = _stage_tokenize_and_merge(pool, shards, assignments, tokenizer_file, cfg, out, work, state)
        state.seconds["tokenize_and_merge"] = time.perf_counter() - t0
    manifest = _manifest(cfg, shards, state, assignments, tokenizer_info, merge)
    manifest["run"] = {
        "started_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds"),
        "elapsed_s": round(time.time() - started, 3),
        "workers": workers,
        "reused": state.reused,
        "stage_seconds": {k: round(v, 3) for k, v in state.seconds.items()},
    }
    _write_skipped_log(state.clean, out)
    atomic_write_json(out / "manifest.json", manifest)
    return manifest


def _remove_stale_tmp_files(out: Path) -> None:
    """Half-written files a killed run left behind (never read: only published names are)."""
    for folder in (out, out / ".work" / "clean", out / ".work" / "tokens"):
        for stale in folder.glob(".*.tmp"):
            stale.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- stage 1: clean


def _stage_clean(
    pool: cf.Executor, shards: list[Shard], cfg: DataPrepConfig, work: Path, state: RunState
) -> list[dict]:
    out_dir = str(work / "clean")
    reading = {k: v for k, v in asdict(cfg.input).items() if k != "paths"}  # shards are keyed by path
    fp = fingerprint(reading, cfg.clean)
    results: dict[int, dict] = {}
    todo = []
    for shard in shards:
        marker = read_json(shard_paths(out_dir, shard.shard_id)["marker"])
        if _clean_marker_valid(marker, shard, fp, out_dir):
            results[shard.index] = marker
        else:
            todo.append(CleanTask(shard.shard_id, shard.source, out_dir, fp, cfg.input, cfg.clean))
    state.reused["clean"] = len(results)
    logger.info("clean: %d input(s), %d finished earlier, %d to do", len(shards), len(results), len(todo))
    index_of = {s.shard_id: s.index for s in shards}
    todo.sort(key=lambda t: -(input_identity(t.source.path)["size"] or 0))  # biggest first: balanced tail
    for result in _run_tasks(pool, clean_shard, todo, "clean", cfg.runtime.progress):
        results[index_of[result["shard_id"]]] = result
    return [results[s.index] for s in shards]


def _clean_marker_valid(marker: dict | None, shard: Shard, fp: str, out_dir: str) -> bool:
    if not marker or marker.get("fingerprint") != fp or marker.get("path") != shard.source.path:
        return False
    identity = input_identity(shard.source.path)
    if (marker.get("size"), marker.get("mtime_ns")) != (identity["size"], identity["mtime_ns"]):
        return False
    if marker.get("failed"):
        return False  # an input that failed is retried: it may have been a transient I/O error
    paths = shard_paths(out_dir, shard.shard_id)
    return os.path.exists(paths["texts"]) and os.path.exists(paths["hashes"])


def _run_tasks(pool: cf.Executor, fn: Callable, tasks: Sequence, desc: str, progress: bool) -> Iterable[dict]:
    with _progress(len(tasks), desc, progress) as bar:
        futures = [pool.submit(fn, task) for task in tasks]
        for future in cf.as_completed(futures):
            bar.update(1)
            yield future.result()


def _check_error_budget(results: list[dict], cfg: DataPrepConfig, out: Path) -> None:
    records = sum(r["records"] for r in results)
    skipped = sum(len(r["skipped"]) for r in results)
    failed = [r["path"] for r in results if r["failed"]]
    problems = []
    if records == 0:
        problems.append(f"nothing could be read from {len(results)} input(s)")
    seen = records + skipped
    if seen and skipped / seen > cfg.errors.max_skipped_fraction:
        problems.append(
            f"{skipped} of {seen} records skipped ({skipped / seen:.2%}) > errors.max_skipped_fraction="
            f"{cfg.errors.max_skipped_fraction}"
        )
    if failed and len(failed) / len(results) > cfg.errors.max_failed_inputs_fraction:
        problems.append(
            f"{len(failed)} of {len(results)} inputs unreadable ({', '.join(failed[:5])}"
            f"{', ...' if len(failed) > 5 else ''}) > errors.max_failed_inputs_fraction="
            f"{cfg.errors.max_failed_inputs_fraction}"
        )
    if problems:
        _write_skipped_log(results, out)
        raise DataPrepError(
            "; ".join(problems) + f". Skipped records are listed in {out / 'skipped.jsonl'}; "
            "cleaned shards are kept, so a rerun resumes."
        )


def _write_skipped_log(results: list[dict], out: Path) -> None:
    lines = [json.dumps(entry, ensure_ascii=False) for r in results for entry in r["skipped"]]
    atomic_write_bytes(out / "skipped.jsonl", ("\n".join(lines) + "\n" if lines else "").encode())


# ----------------------------------------------------------------------------- stage 2: plan


def _plan(results: list[dict], shards: list[Shard], cfg: DataPrepConfig, work: Path):
    """Dedup and split decisions for every kept document, from the hashes, in shard order."""
    per_shard = [np.load(shard_paths(str(work / "clean"), s.shard_id)["hashes"]) for s in shards]
    for shard, hashes, result in zip(shards, per_shard, results):
        if len(hashes) != result["kept"]:
            raise DataPrepError(
                f"{shard.source.path}: clean shard holds {len(hashes)} hashes, marker says {result['kept']}"
            )
    all_hashes = np.concatenate(per_shard) if per_shard else np.zeros((0, 16), dtype=np.uint8)
    assignment = assign(all_hashes, cfg.clean.dedup, cfg.split)
    if not (assignment != DROP).any():
        filters = _sum_filters(results, assignment)
        raise DataPrepError(f"no document passed the filters: {json.dumps({k: v for k, v in filters.items() if v})}")
    bounds = np.cumsum([0] + [len(h) for h in per_shard])
    assignments = [assignment[bounds[i] : bounds[i + 1]] for i in range(len(shards))]
    return assignments, all_hashes


def _sum_filters(results: list[dict], assignment: np.ndarray | None) -> dict[str, int]:
    totals = dict.fromkeys(FILTER_NAMES, 0)
    for r in results:
        for name, count in r["filters"].items():
            totals[name] = totals.get(name, 0) + count
    if assignment is not None:
        totals["exact_dedup"] = int((assignment == DROP).sum())
    return totals


# ----------------------------------------------------------------------------- tokenizer


def _prepare_tokenizer(cfg, out: Path, work: Path, shards, hashes, assignments, state: RunState):
    """Copy the given tokenizer next to the data, or train one once (reused on rerun)."""
    tcfg = cfg.tokenizer
    if tcfg.path is not None:
        source = Path(tcfg.path).expanduser()
        if source.is_dir():
            source = source / "tokenizer.json"
        if not source.is_file():
            raise DataPrepError(f"tokenizer.path: file not found: {source}")
        kind = tokenizer_type(source)
        target = out / ("tokenizer.json" if kind == "huggingface" else "tokenizer.model")
        if not target.exists() or file_sha256(target) != file_sha256(source):
            atomic_write_bytes(target, source.read_bytes())
        tokenizer = load_tokenizer(target, tcfg.eod_token)
        state.reused["tokenizer"] = 1
        return str(target), _tokenizer_info(tokenizer, target, out, trained=False, source=str(source))
    target = out / "tokenizer.model"
    kept = np.concatenate(assignments) != DROP
    lengths = _text_lengths(work, shards)
    rows = sample_rows(hashes, kept, lengths, tcfg.sample_chars)
    sample_digest = hashlib.sha256(hashes[rows].tobytes()).hexdigest()[:16]
    train_fp = fingerprint(_training_fields(tcfg)) + "-" + sample_digest
    sidecar = work / "tokenizer.json"
    marker = read_json(sidecar)
    if (
        target.exists()
        and marker
        and marker.get("fingerprint") == train_fp
        and marker.get("sha256") == file_sha256(target)
    ):
        state.reused["tokenizer"] = 1
    else:
        state.reused["tokenizer"] = 0
        logger.info(
            "training SentencePiece (%s, vocab %d) on %d documents", tcfg.model_type, tcfg.vocab_size, len(rows)
        )
        vocab = train_sentencepiece(_sample_texts(work, shards, rows), target, tcfg)
        if vocab < tcfg.vocab_size:
            logger.warning("tokenizer sample too small: vocabulary is %d, not %d", vocab, tcfg.vocab_size)
        atomic_write_json(
            sidecar, {"fingerprint": train_fp, "sha256": file_sha256(target), "documents": int(len(rows))}
        )
    tokenizer = load_tokenizer(target, tcfg.eod_token)
    info = _tokenizer_info(tokenizer, target, out, trained=True, source=None)
    info["training_documents"] = int(len(rows))
    return str(target), info


def _training_fields(tcfg) -> dict:
    """The tokenizer settings that change a trained model."""
    fields = asdict(tcfg)
    for key in ("path", "encode_batch_docs", "eod_token"):
        fields.pop(key)
    return fields


def _tokenizer_info(tokenizer, target: Path, out: Path, trained: bool, source: str | None) -> dict:
    return {
        "type": tokenizer.type,
        "path": os.path.relpath(target, out),
        "sha256": tokenizer.sha256,
        "vocab_size": tokenizer.vocab_size,
        "eod_id": tokenizer.eod,
        "pad_id": tokenizer.pad,
        "trained": trained,
        "source": source,
    }


def _text_lengths(work: Path, shards: list[Shard]) -> np.ndarray:
    """Byte length of every kept text, from the Arrow offsets (no text is decoded)."""
    parts = []
    for shard in shards:
        with pa.memory_map(shard_paths(str(work / "clean"), shard.shard_id)["texts"]) as source:
            table = pa.ipc.open_file(source).read_all()
            if table.num_rows:
                parts.append(pc.binary_length(table.column(0)).to_numpy(zero_copy_only=False))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _sample_texts(work: Path, shards: list[Shard], rows: np.ndarray):
    first = 0
    for shard in shards:
        with pa.memory_map(shard_paths(str(work / "clean"), shard.shard_id)["texts"]) as source:
            column = pa.ipc.open_file(source).read_all().column(0)
            local = rows[(rows >= first) & (rows < first + len(column))] - first
            first += len(column)
            if len(local):
                yield from column.take(pa.array(local)).to_pylist()


# ----------------------------------------------------------------------------- stage 3: tokenize + merge


def _stage_tokenize_and_merge(pool, shards, assignments, tokenizer_file, cfg, out: Path, work: Path, state):
    out_dir = str(work / "tokens")
    tokenizer = load_tokenizer(tokenizer_file, cfg.tokenizer.eod_token)
    dtype = token_dtype(tokenizer.vocab_size)
    results: dict[int, dict] = {}
    todo = []
    for shard, assignment in zip(shards, assignments):
        fp = f"{tokenizer.sha256[:16]}-{np.dtype(dtype).name}-{tokenizer.eod}-{assignment_digest(assignment)}"
        paths = part_paths(out_dir, shard.shard_id)
        marker = read_json(paths["marker"])
        if marker and marker.get("fingerprint") == fp and all(os.path.exists(p) for p in paths.values()):
            results[shard.index] = marker
            continue
        todo.append(
            TokenizeTask(
                shard.shard_id,
                shard_paths(str(work / "clean"), shard.shard_id)["texts"],
                out_dir,
                assignment,
                tokenizer_file,
                cfg.tokenizer.eod_token,
                cfg.tokenizer.encode_batch_docs,
                fp,
            )
        )
    state.reused["tokenize"] = len(results)
    logger.info("tokenize: %d shard(s), %d finished earlier, %d to do", len(shards), len(results), len(todo))
    manifest_path = out / "manifest.json"
    if manifest_path.exists():
        manifest_path.unlink()  # the outputs are about to change; no manifest may describe half of them
    index_of = {s.shard_id: s.index for s in shards}
    prefixes = {"train": str(out / cfg.output.train_prefix), "valid": str(out / cfg.output.valid_prefix)}
    merger: DatasetMerger | None = None
    next_shard = 0
    with _progress(len(todo), "tokenize", cfg.runtime.progress) as bar:
        futures = [pool.submit(tokenize_shard, task) for task in todo]  # in shard order: merge can follow
        merger = DatasetMerger(prefixes, dtype)  # imports Megatron (torch) while the workers run
        try:
            for future in cf.as_completed(futures):
                result = future.result()
                bar.update(1)
                results[index_of[result["shard_id"]]] = result
                while next_shard < len(shards) and next_shard in results:
                    merger.add_shard(part_paths(out_dir, shards[next_shard].shard_id))
                    next_shard += 1
            while next_shard < len(shards):
                merger.add_shard(part_paths(out_dir, shards[next_shard].shard_id))
                next_shard += 1
            merger.finalize()
        except BaseException:
            merger.abort()
            raise
    state.tokenize = [results[s.index] for s in shards]
    return {
        "dtype": np.dtype(dtype).name,
        "documents": merger.documents,
        "tokens": merger.tokens,
        "prefixes": {split: [os.path.relpath(p, out) for p in merger.prefixes(split)] for split in SPLITS},
    }


# ----------------------------------------------------------------------------- manifest


def _manifest(cfg: DataPrepConfig, shards, state: RunState, assignments, tokenizer_info, merge) -> dict:
    assignment = np.concatenate(assignments)
    filters = _sum_filters(state.clean, assignment)
    skipped = [entry for r in state.clean for entry in r["skipped"]]
    inputs = []
    for shard, result in zip(shards, state.clean):
        status = "failed" if result["failed"] else ("partial" if result["stopped_early"] else "ok")
        inputs.append(
            {
                "path": shard.source.path,
                "format": shard.source.format,
                "sha256": result["sha256"],
                "bytes": result["size"],
                "status": status,
                "records": result["records"],
                "kept": int((assignments[shard.index] != DROP).sum()),
                "skipped": len(result["skipped"]),
            }
        )
    config = {
        "input": asdict(cfg.input),
        "clean": asdict(cfg.clean),
        "tokenizer": asdict(cfg.tokenizer),
        "split": asdict(cfg.split),
        "output": {"train_prefix": cfg.output.train_prefix, "valid_prefix": cfg.output.valid_prefix},
    }
    return {
        "format_version": FORMAT_VERSION,
        "train": {
            "prefixes": merge["prefixes"]["train"],  # [] when the split has no document
            "documents": merge["documents"]["train"],
            "tokens": merge["tokens"]["train"],
        },
        "valid": {
            "prefixes": merge["prefixes"]["valid"],  # [] when the split has no document
            "documents": merge["documents"]["valid"],
            "tokens": merge["tokens"]["valid"],
        },
        "tokenizer": tokenizer_info,
        "dtype": merge["dtype"],
        "documents": {
            "read": sum(r["records"] for r in state.clean),
            "after_filters": sum(r["kept"] for r in state.clean),
            "kept": int((assignment != DROP).sum()),
        },
        "filters": filters,
        "skipped_total": len(skipped),
        "skipped": skipped[: cfg.errors.max_listed],
        "skipped_log": "skipped.jsonl",
        "inputs": inputs,
        "config": config,
    }


def manifest_without_run(manifest: dict) -> dict:
    """The manifest minus its ``run`` section (timings, reuse counts): what reruns must reproduce."""
    return {k: v for k, v in manifest.items() if k != "run"}


def clean_work(out: str | os.PathLike) -> None:
    """Delete ``.work/`` (intermediate shards); the next run starts from scratch."""
    shutil.rmtree(Path(out) / ".work", ignore_errors=True)

"""The pipeline's stages: units of work that read and write only files, so any process may run any unit.

=========== ======================== ==============================================================
stage       units                    writes (each unit: outputs renamed into place, marker last)
=========== ======================== ==============================================================
clean       shards                   .work/clean/<id>.arrow, .hash.npy, .json
signatures  shards (near_dedup on)   .work/near_dedup/<id>.sig.npy, .sig.json
buckets     LSH bands (near_dedup)   .work/near_dedup/band-<b>.npy, .json
plan        one                      .work/plan/assignment.npy, plan.json (+ skipped.jsonl when over budget)
tokenizer   one                      tokenizer.model|json, .work/tokenizer.json
tokenize    shards                   .work/tokens/<id>.{train,valid}.bin, .lengths.npy, .json
merge       one                      <prefix>.bin/.idx, skipped.jsonl, manifest.json (last)
=========== ======================== ==============================================================

A unit is finished when its marker exists and holds the fingerprint of what it was made from
(the settings and the markers of the units it read); a rerun redoes only the others. Sharded
stages are split among tasks by rank (task i of N takes units i, i+N, ...: data_prep/pipeline.py
runs them on local cores, data_prep/slurm.py as job arrays); the one-unit stages make every
decision that spans shards, from stored hashes and in shard order, so nothing depends on how
the units were split or in which order they finished.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data_prep import near_dedup
from data_prep.clean import CleanTask, clean_shard, input_identity, shard_paths
from data_prep.config import DataPrepConfig, fingerprint
from data_prep.dedup import assign, first_occurrences, sample_rows
from data_prep.filters import FILTER_NAMES
from data_prep.manifest import MANIFEST_FILE
from data_prep.readers import rebase_lines
from data_prep.shards import Shard
from data_prep.tokenizer import file_sha256, load_tokenizer, token_dtype, tokenizer_type, train_sentencepiece
from data_prep.writer import DROP, SPLITS, DatasetMerger, TokenizeTask, assignment_digest, part_paths, tokenize_shard
from jobscripts.atomic import atomic_write_bytes, atomic_write_json, publish, read_json, tmp_path

FORMAT_VERSION = 1
logger = logging.getLogger("data_prep")


class DataPrepError(RuntimeError):
    """The run cannot produce a dataset (error budget exceeded, nothing readable, a stage not
    finished); work so far is kept."""


@dataclass(frozen=True)
class Stage:
    name: str
    sharded: bool  # units are split among tasks; else one task does the one unit
    near_dedup: bool  # runs only with clean.near_dedup.enabled
    about: str
    short: str  # SLURM job name after "dp-" (squeue shows 8 characters)


STAGES = (
    Stage("clean", True, False, "read, normalize, filter and hash each shard", "clean"),
    Stage("signatures", True, True, "MinHash signatures of each clean shard", "sigs"),
    Stage("buckets", True, True, "near-duplicate pairs of each LSH band", "bkts"),
    Stage("plan", False, False, "error budget, exact and near dedup, train/valid split", "plan"),
    Stage("tokenizer", False, False, "train the tokenizer once, or copy the given one", "vocab"),
    Stage("tokenize", True, False, "token streams of each shard", "tok"),
    Stage("merge", False, False, "Megatron .bin/.idx and manifest.json", "merge"),
)
STAGE_NAMES = tuple(s.name for s in STAGES)


def active_stages(cfg: DataPrepConfig) -> list[Stage]:
    return [s for s in STAGES if cfg.clean.near_dedup.enabled or not s.near_dedup]


@dataclass
class Job:
    """One output directory's run: config, shard list, and what this process learned."""

    cfg: DataPrepConfig
    out: Path
    shards: list[Shard]
    reused: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    # Every shard's clean marker once all are finished: the signatures, plan, tokenizer and
    # merge stages each need them, and a snapshot has hundreds of thousands. Filled only by a
    # complete read, emptied whenever this process runs the clean stage.
    clean_markers: list[dict] | None = field(default=None, repr=False)

    @property
    def work(self) -> Path:
        return self.out / ".work"

    def dir(self, name: str) -> str:
        return str(self.work / name)


def units(job: Job, stage: Stage) -> list:
    """What a stage's tasks share out: shards, band numbers, or the one unit (None)."""
    if stage.name == "buckets":
        return list(range(job.cfg.clean.near_dedup.bands))
    return list(job.shards) if stage.sharded else [None]


def _unfinished(stage: str, what: Sequence[str]) -> DataPrepError:
    listed = ", ".join(what[:5]) + (", ..." if len(what) > 5 else "")
    return DataPrepError(f"the {stage} stage has not finished {len(what)} unit(s): {listed}; run it first")


def _finished(stage: str, units: Iterable, output: Callable, describe: Callable[..., str]) -> list:
    """``output(unit)`` of every unit, in order; None means the unit is not (validly) finished,
    and then the stage is reported unfinished, naming every such unit."""
    outputs, missing = [], []
    for unit in units:
        value = output(unit)
        if value is None:
            missing.append(describe(unit))
        else:
            outputs.append(value)
    if missing:
        raise _unfinished(stage, missing)
    return outputs


def _run_tasks(pool: cf.Executor, fn: Callable, tasks: Sequence, desc: str, progress: bool) -> Iterable[dict]:
    from tqdm import tqdm

    with tqdm(total=len(tasks), desc=desc, unit="shard", disable=not progress or not tasks, dynamic_ncols=True) as bar:
        futures = [pool.submit(fn, task) for task in tasks]
        for future in cf.as_completed(futures):
            bar.update(1)
            yield future.result()


# ----------------------------------------------------------------------------- clean


def clean_fingerprint(cfg: DataPrepConfig) -> str:
    """Reading and cleaning settings; not the paths or the Hugging Face split and config (they
    choose files, and shards are keyed by path and span), the shard size, or near-dedup (a
    later stage)."""
    skip = ("paths", "shard_bytes", "hf_split", "hf_config")
    reading = {k: v for k, v in asdict(cfg.input).items() if k not in skip}
    cleaning = {k: v for k, v in asdict(cfg.clean).items() if k != "near_dedup"}
    return fingerprint(reading, cleaning)


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


def clean(job: Job, pool: cf.Executor, shards: Sequence[Shard]) -> None:
    job.clean_markers = None
    out_dir = job.dir("clean")
    fp = clean_fingerprint(job.cfg)
    todo = []
    for shard in shards:
        marker = read_json(shard_paths(out_dir, shard.shard_id)["marker"])
        if not _clean_marker_valid(marker, shard, fp, out_dir):
            todo.append(CleanTask(shard.shard_id, shard.source, out_dir, fp, job.cfg.input, job.cfg.clean))
    job.reused["clean"] = len(shards) - len(todo)
    logger.info("clean: %d shard(s), %d finished earlier, %d to do", len(shards), len(shards) - len(todo), len(todo))
    todo.sort(key=lambda t: -_span_bytes(t.source))  # biggest first: a balanced tail
    for _ in _run_tasks(pool, clean_shard, todo, "clean", job.cfg.runtime.progress):
        pass


def _span_bytes(source) -> int:
    if source.span is not None and source.format not in ("parquet", "arrow"):  # spans of rows, not bytes
        return source.span[1] - source.span[0]
    return input_identity(source.path)["size"] or 0


def clean_results(job: Job) -> list[dict]:
    """Every shard's clean marker, in shard order; a shard not (validly) cleaned is an error.

    Failed inputs have a marker that does not count as finished (a rerun retries them), but
    their result is final for this run.
    """
    if job.clean_markers is None:
        out_dir, fp = job.dir("clean"), clean_fingerprint(job.cfg)
        job.clean_markers = _finished(
            "clean", job.shards, lambda shard: _clean_result(shard, fp, out_dir), Shard.describe
        )
    return list(job.clean_markers)


def _clean_result(shard: Shard, fp: str, out_dir: str) -> dict | None:
    """A shard's clean marker when the shard is done for this run (cleaned, or failed under
    these settings), else None."""
    marker = read_json(shard_paths(out_dir, shard.shard_id)["marker"])
    failed_here = bool(marker and marker.get("failed") and marker.get("fingerprint") == fp)
    return marker if _clean_marker_valid(marker, shard, fp, out_dir) or failed_here else None


def inputs_view(job: Job, results: list[dict]) -> list[dict]:
    """One entry per input file from its shards' markers: counts summed, skip entries with file
    line numbers, the sha256 of its first shard, failed only when every shard failed."""
    files: dict[str, dict] = {}
    for shard, result in zip(job.shards, results):
        entry = files.setdefault(
            shard.source.path,
            {
                "path": shard.source.path,
                "format": shard.source.format,
                "sha256": None,
                "bytes": result["size"],
                "records": 0,
                "skipped": [],
                "failed": True,
                "stopped_early": False,
                "shards": [],
                "lines": 0,
            },
        )
        if shard.part == 0:
            entry["sha256"] = result["sha256"]
        entry["records"] += result["records"]
        entry["skipped"] += rebase_lines(result["skipped"], entry["lines"])
        entry["lines"] += result.get("lines", 0)
        entry["failed"] = entry["failed"] and result["failed"]
        entry["stopped_early"] = entry["stopped_early"] or result["stopped_early"]
        entry["shards"].append(shard.index)
    return list(files.values())


def check_error_budget(job: Job, results: list[dict]) -> None:
    inputs = inputs_view(job, results)
    cfg = job.cfg
    records = sum(i["records"] for i in inputs)
    skipped = sum(len(i["skipped"]) for i in inputs)
    failed = [i["path"] for i in inputs if i["failed"]]
    problems = []
    if records == 0:
        names = [i["path"] for i in inputs]
        problems.append(
            f"nothing could be read from {len(inputs)} input(s) "
            f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
        )
    seen = records + skipped
    if seen and skipped / seen > cfg.errors.max_skipped_fraction:
        problems.append(
            f"{skipped} of {seen} records skipped ({skipped / seen:.2%}) > errors.max_skipped_fraction="
            f"{cfg.errors.max_skipped_fraction}"
        )
    if failed and len(failed) / len(inputs) > cfg.errors.max_failed_inputs_fraction:
        problems.append(
            f"{len(failed)} of {len(inputs)} inputs unreadable ({', '.join(failed[:5])}"
            f"{', ...' if len(failed) > 5 else ''}) > errors.max_failed_inputs_fraction="
            f"{cfg.errors.max_failed_inputs_fraction}"
        )
    if problems:
        write_skipped_log(job, inputs)
        reasons = Counter(entry["reason"] for i in inputs for entry in i["skipped"]).most_common(3)
        frequent = "; ".join(f"{count} x {reason.rstrip('.')}" for reason, count in reasons)
        raise DataPrepError(
            "; ".join(problems)
            + (f". Most frequent reasons: {frequent}" if frequent else "")
            + f". Skipped records are listed in {job.out / 'skipped.jsonl'}; "
            "cleaned shards are kept, so a rerun resumes."
        )


def write_skipped_log(job: Job, inputs: list[dict]) -> None:
    lines = [json.dumps(entry, ensure_ascii=False) for i in inputs for entry in i["skipped"]]
    atomic_write_bytes(job.out / "skipped.jsonl", ("\n".join(lines) + "\n" if lines else "").encode())


def _clean_identity(result: dict) -> str:
    """What a clean shard's texts depend on, for the fingerprints of the stages that read them."""
    keys = ("path", "span", "fingerprint", "size", "mtime_ns", "kept", "text_bytes")
    return fingerprint({k: result.get(k) for k in keys})


# ----------------------------------------------------------------------------- near dedup


def _signature_fingerprint(job: Job, result: dict) -> str:
    return fingerprint(near_dedup.settings(job.cfg.clean.near_dedup)) + "-" + _clean_identity(result)


def signatures(job: Job, pool: cf.Executor, shards: Sequence[Shard]) -> None:
    results = {r["shard_id"]: r for r in clean_results(job)}
    out_dir = job.dir("near_dedup")
    todo = []
    for shard in shards:
        fp = _signature_fingerprint(job, results[shard.shard_id])
        paths = near_dedup.signature_paths(out_dir, shard.shard_id)
        marker = read_json(paths["marker"])
        if not (marker and marker.get("fingerprint") == fp and os.path.exists(paths["signatures"])):
            texts = shard_paths(job.dir("clean"), shard.shard_id)["texts"]
            todo.append(near_dedup.SignatureTask(shard.shard_id, texts, out_dir, job.cfg.clean.near_dedup, fp))
    job.reused["signatures"] = len(shards) - len(todo)
    logger.info("signatures: %d shard(s), %d to do", len(shards), len(todo))
    for _ in _run_tasks(pool, near_dedup.signature_shard, todo, "signatures", job.cfg.runtime.progress):
        pass


def signature_markers(job: Job) -> list[dict]:
    out_dir = job.dir("near_dedup")

    def marker(unit: tuple[Shard, dict]) -> dict | None:
        shard, result = unit
        found = read_json(near_dedup.signature_paths(out_dir, shard.shard_id)["marker"])
        return found if found and found.get("fingerprint") == _signature_fingerprint(job, result) else None

    return _finished("signatures", zip(job.shards, clean_results(job)), marker, lambda unit: unit[0].describe())


def _band_fingerprint(job: Job, markers: list[dict]) -> str:
    settings = {k: v for k, v in asdict(job.cfg.clean.near_dedup).items() if k != "enabled"}
    return fingerprint(settings, [m["sha256"] for m in markers])


def buckets(job: Job, pool: cf.Executor, bands: Sequence[int]) -> None:
    fp = _band_fingerprint(job, signature_markers(job))
    out_dir = job.dir("near_dedup")
    files = [near_dedup.signature_paths(out_dir, s.shard_id)["signatures"] for s in job.shards]
    todo = []
    for band in bands:
        paths = near_dedup.band_paths(out_dir, band)
        marker = read_json(paths["marker"])
        if not (marker and marker.get("fingerprint") == fp and os.path.exists(paths["pairs"])):
            todo.append(near_dedup.BandTask(band, files, out_dir, job.cfg.clean.near_dedup, fp))
    job.reused["buckets"] = len(bands) - len(todo)
    logger.info("buckets: %d band(s), %d to do", len(bands), len(todo))
    for _ in _run_tasks(pool, near_dedup.band_pairs, todo, "buckets", job.cfg.runtime.progress):
        pass


def near_pairs(job: Job) -> tuple[np.ndarray, str]:
    """All bands' verified pairs, and the fingerprint of the bands they came from."""
    fp = _band_fingerprint(job, signature_markers(job))
    out_dir = job.dir("near_dedup")

    def pairs(band: int) -> np.ndarray | None:
        paths = near_dedup.band_paths(out_dir, band)
        marker = read_json(paths["marker"])
        return np.load(paths["pairs"]) if marker and marker.get("fingerprint") == fp else None

    parts = _finished("buckets", range(job.cfg.clean.near_dedup.bands), pairs, lambda band: f"band {band}")
    return (np.concatenate(parts) if parts else np.zeros((0, 2), dtype=np.int64)), fp


# ----------------------------------------------------------------------------- plan


@dataclass
class Plan:
    """Per-document decisions over all clean shards: DROP, TRAIN or VALID, in shard order."""

    assignment: np.ndarray
    bounds: np.ndarray  # shard i's documents are assignment[bounds[i]:bounds[i+1]]
    dropped: dict[str, int]  # exact_dedup, near_dedup
    results: list[dict]  # the clean markers it was made from

    def of(self, shard: Shard) -> np.ndarray:
        return self.assignment[self.bounds[shard.index] : self.bounds[shard.index + 1]]


def _plan_paths(job: Job) -> dict[str, Path]:
    return {"assignment": job.work / "plan" / "assignment.npy", "marker": job.work / "plan" / "plan.json"}


def _plan_fingerprint(job: Job, results: list[dict], bands_fp: str | None) -> str:
    cfg = job.cfg
    return fingerprint([_clean_identity(r) for r in results], cfg.split, {"dedup": cfg.clean.dedup, "near": bands_fp})


def plan(job: Job) -> Plan:
    """Exact dedup keeps each text's first occurrence; near dedup keeps each component's first
    document; the split and the counts follow. Recomputed on every run (it is cheap)."""
    results = clean_results(job)
    check_error_budget(job, results)
    hashes = load_hashes(job, results)
    exact_keep = first_occurrences(hashes) if job.cfg.clean.dedup else np.ones(len(hashes), dtype=bool)
    near_keep, bands_fp = np.ones(len(hashes), dtype=bool), None
    if job.cfg.clean.near_dedup.enabled:
        pairs, bands_fp = near_pairs(job)
        near_keep = near_dedup.first_of_components(len(hashes), pairs)
    assignment = assign(hashes, False, job.cfg.split, exact_keep & near_keep)  # exact dedup is in exact_keep
    dropped = {"exact_dedup": int((~exact_keep).sum()), "near_dedup": int((exact_keep & ~near_keep).sum())}
    bounds = np.cumsum([0] + [r["kept"] for r in results])
    result = Plan(assignment, bounds, dropped, results)
    if not (assignment != DROP).any():
        filters = sum_filters(result)
        raise DataPrepError(f"no document passed the filters: {json.dumps({k: v for k, v in filters.items() if v})}")
    paths = _plan_paths(job)
    marker = {
        "fingerprint": _plan_fingerprint(job, results, bands_fp),
        "documents": int(len(assignment)),
        "assignment": assignment_digest(assignment),
        **dropped,
    }
    if read_json(paths["marker"]) != marker or not paths["assignment"].exists():
        paths["assignment"].parent.mkdir(parents=True, exist_ok=True)
        tmp = tmp_path(paths["assignment"])
        with open(tmp, "wb") as fh:
            np.save(fh, assignment)
        publish(tmp, paths["assignment"])
        atomic_write_json(paths["marker"], marker)
    return result


def load_plan(job: Job) -> Plan:
    """The plan stage's output, checked against the markers it was made from."""
    results = clean_results(job)
    bands_fp = near_pairs(job)[1] if job.cfg.clean.near_dedup.enabled else None
    paths = _plan_paths(job)
    marker = read_json(paths["marker"])
    if not marker or marker.get("fingerprint") != _plan_fingerprint(job, results, bands_fp):
        raise _unfinished("plan", ["the whole input"])
    assignment = np.load(paths["assignment"])
    if assignment_digest(assignment) != marker["assignment"]:
        raise DataPrepError(f"{paths['assignment']}: does not match {paths['marker']}; rerun the plan stage")
    dropped = {k: marker[k] for k in ("exact_dedup", "near_dedup")}
    return Plan(assignment, np.cumsum([0] + [r["kept"] for r in results]), dropped, results)


def load_hashes(job: Job, results: list[dict]) -> np.ndarray:
    per_shard = []
    for shard, result in zip(job.shards, results):
        hashes = np.load(shard_paths(job.dir("clean"), shard.shard_id)["hashes"])
        if len(hashes) != result["kept"]:
            raise DataPrepError(
                f"{shard.describe()}: clean shard holds {len(hashes)} hashes, marker says {result['kept']}"
            )
        per_shard.append(hashes)
    return np.concatenate(per_shard) if per_shard else np.zeros((0, 16), dtype=np.uint8)


def sum_filters(plan_: Plan) -> dict[str, int]:
    totals = dict.fromkeys(FILTER_NAMES, 0)
    for r in plan_.results:
        for name, count in r["filters"].items():
            totals[name] = totals.get(name, 0) + count
    totals.update(plan_.dropped)
    return totals


# ----------------------------------------------------------------------------- tokenizer


def tokenizer(job: Job, plan_: Plan) -> tuple[str, dict]:
    """Copy the given tokenizer next to the data, or train one once (reused on rerun); the
    manifest's tokenizer section goes to .work/tokenizer.json for the merge stage."""
    tcfg, out = job.cfg.tokenizer, job.out
    sidecar = job.work / "tokenizer.json"
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
        job.reused["tokenizer"] = 1
        info = _tokenizer_info(load_tokenizer(target, tcfg.eod_token), target, out, trained=False, source=str(source))
        atomic_write_json(sidecar, {"fingerprint": None, "sha256": file_sha256(target), "info": info})
        return str(target), info
    target = out / "tokenizer.model"
    train_fp, rows = _training_fingerprint(job, plan_)
    marker = read_json(sidecar)
    if (
        target.exists()
        and marker
        and marker.get("fingerprint") == train_fp
        and marker.get("sha256") == file_sha256(target)
    ):
        job.reused["tokenizer"] = 1
    else:
        job.reused["tokenizer"] = 0
        logger.info(
            "training SentencePiece (%s, vocab %d) on %d documents", tcfg.model_type, tcfg.vocab_size, len(rows)
        )
        vocab = train_sentencepiece(_sample_texts(job, rows), target, tcfg)
        if vocab < tcfg.vocab_size:
            logger.warning("tokenizer sample too small: vocabulary is %d, not %d", vocab, tcfg.vocab_size)
    info = _tokenizer_info(load_tokenizer(target, tcfg.eod_token), target, out, trained=True, source=None)
    info["training_documents"] = int(len(rows))
    sidecar_data = {"fingerprint": train_fp, "sha256": file_sha256(target), "documents": int(len(rows)), "info": info}
    if marker != sidecar_data:
        atomic_write_json(sidecar, sidecar_data)
    return str(target), info


def _training_fingerprint(job: Job, plan_: Plan) -> tuple[str, np.ndarray]:
    """The training settings and sample a trained tokenizer comes from, and the sample's rows."""
    hashes = load_hashes(job, plan_.results)
    rows = sample_rows(hashes, plan_.assignment != DROP, _text_lengths(job), job.cfg.tokenizer.sample_chars)
    sample_digest = hashlib.sha256(hashes[rows].tobytes()).hexdigest()[:16]
    return fingerprint(_training_fields(job.cfg.tokenizer)) + "-" + sample_digest, rows


def _tokenizer_current(job: Job, plan_: Plan) -> bool:
    target, info = load_tokenizer_stage(job)
    if job.cfg.tokenizer.path is not None:
        return info["source"] is not None and file_sha256(info["source"]) == file_sha256(target)
    return read_json(job.work / "tokenizer.json")["fingerprint"] == _training_fingerprint(job, plan_)[0]


def load_tokenizer_stage(job: Job) -> tuple[str, dict]:
    """The tokenizer stage's output (for tasks in other processes)."""
    marker = read_json(job.work / "tokenizer.json")
    info = marker.get("info") if marker else None
    target = job.out / info["path"] if info else None
    if not info or not target.exists() or file_sha256(target) != marker.get("sha256"):
        raise _unfinished("tokenizer", [str(job.out / "tokenizer.model")])
    return str(target), info


def _training_fields(tcfg) -> dict:
    """The tokenizer settings that change a trained model."""
    fields = asdict(tcfg)
    for key in ("path", "encode_batch_docs", "eod_token"):
        fields.pop(key)
    return fields


def _tokenizer_info(tok, target: Path, out: Path, trained: bool, source: str | None) -> dict:
    return {
        "type": tok.type,
        "path": os.path.relpath(target, out),
        "sha256": tok.sha256,
        "vocab_size": tok.vocab_size,
        "eod_id": tok.eod,
        "pad_id": tok.pad,
        "trained": trained,
        "source": source,
    }


def _text_lengths(job: Job) -> np.ndarray:
    """Byte length of every kept text, from the Arrow offsets (no text is decoded)."""
    parts = []
    for shard in job.shards:
        with pa.memory_map(shard_paths(job.dir("clean"), shard.shard_id)["texts"]) as source:
            table = pa.ipc.open_file(source).read_all()
            if table.num_rows:
                parts.append(pc.binary_length(table.column(0)).to_numpy(zero_copy_only=False))
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def _sample_texts(job: Job, rows: np.ndarray):
    first = 0
    for shard in job.shards:
        with pa.memory_map(shard_paths(job.dir("clean"), shard.shard_id)["texts"]) as source:
            column = pa.ipc.open_file(source).read_all().column(0)
            local = rows[(rows >= first) & (rows < first + len(column))] - first
            first += len(column)
            if len(local):
                yield from column.take(pa.array(local)).to_pylist()


# ----------------------------------------------------------------------------- tokenize + merge


def _tokenize_todo(job: Job, shards: Sequence[Shard], plan_: Plan, tokenizer_file: str) -> list[TokenizeTask]:
    tok = load_tokenizer(tokenizer_file, job.cfg.tokenizer.eod_token)
    dtype = np.dtype(token_dtype(tok.vocab_size)).name
    out_dir = job.dir("tokens")
    todo = []
    for shard in shards:
        assignment = plan_.of(shard)
        # The clean shard's identity too: an edited input with the same document count and
        # split (valid_fraction 0, a given tokenizer) would otherwise keep its old tokens.
        text = _clean_identity(plan_.results[shard.index])
        fp = f"{tok.sha256[:16]}-{dtype}-{tok.eod}-{assignment_digest(assignment)}-{text}"
        paths = part_paths(out_dir, shard.shard_id)
        marker = read_json(paths["marker"])
        if marker and marker.get("fingerprint") == fp and all(os.path.exists(p) for p in paths.values()):
            continue
        texts = shard_paths(job.dir("clean"), shard.shard_id)["texts"]
        cfg = job.cfg.tokenizer
        todo.append(
            TokenizeTask(
                shard.shard_id, texts, out_dir, assignment, tokenizer_file, cfg.eod_token, cfg.encode_batch_docs, fp
            )
        )
    return todo


def tokenize(job: Job, pool: cf.Executor, shards: Sequence[Shard], plan_: Plan, tokenizer_file: str) -> None:
    todo = _tokenize_todo(job, shards, plan_, tokenizer_file)
    if todo:  # the merge must run again: no manifest may describe the old token streams meanwhile
        (job.out / MANIFEST_FILE).unlink(missing_ok=True)
    job.reused["tokenize"] = len(shards) - len(todo)
    logger.info("tokenize: %d shard(s), %d finished earlier, %d to do", len(shards), len(shards) - len(todo), len(todo))
    for _ in _run_tasks(pool, tokenize_shard, todo, "tokenize", job.cfg.runtime.progress):
        pass


def tokenize_and_merge(
    job: Job, pool: cf.Executor | None, plan_: Plan, tokenizer_file: str, tokenize_fn: Callable = tokenize_shard
) -> dict:
    """Tokenize what is left (``pool`` None: nothing may be left) and merge every shard's parts,
    in shard order, into the Megatron datasets while later shards are still being tokenized."""
    todo = _tokenize_todo(job, job.shards, plan_, tokenizer_file)
    if todo and pool is None:
        raise _unfinished("tokenize", [s.describe() for s in job.shards if s.shard_id in {t.shard_id for t in todo}])
    job.reused["tokenize"] = len(job.shards) - len(todo)
    logger.info(
        "tokenize: %d shard(s), %d finished earlier, %d to do", len(job.shards), job.reused["tokenize"], len(todo)
    )
    earlier = None if todo else _current_merge(job, plan_, file_sha256(tokenizer_file))
    job.reused["merge"] = int(earlier is not None)
    if earlier is not None:
        logger.info("merge: the .bin/.idx files manifest.json describes are current, kept")
        return earlier
    manifest_path = job.out / MANIFEST_FILE
    if manifest_path.exists():
        manifest_path.unlink()  # the outputs are about to change; no manifest may describe half of them
    dtype = token_dtype(load_tokenizer(tokenizer_file, job.cfg.tokenizer.eod_token).vocab_size)
    out_dir = job.dir("tokens")
    prefixes = {
        "train": str(job.out / job.cfg.output.train_prefix),
        "valid": str(job.out / job.cfg.output.valid_prefix),
    }
    pending = {t.shard_id for t in todo}
    from tqdm import tqdm

    with tqdm(total=len(todo), desc="tokenize", unit="shard", disable=not job.cfg.runtime.progress or not todo) as bar:
        futures = [pool.submit(tokenize_fn, task) for task in todo] if todo else []  # in shard order
        merger = DatasetMerger(prefixes, dtype)  # imports Megatron (torch) while the workers run
        next_shard = 0
        try:
            for future in cf.as_completed(futures):
                pending.discard(future.result()["shard_id"])
                bar.update(1)
                while next_shard < len(job.shards) and job.shards[next_shard].shard_id not in pending:
                    merger.add_shard(part_paths(out_dir, job.shards[next_shard].shard_id))
                    next_shard += 1
            for shard in job.shards[next_shard:]:
                merger.add_shard(part_paths(out_dir, shard.shard_id))
            merger.finalize()
        except BaseException:
            merger.abort()
            raise
    return {
        "dtype": np.dtype(dtype).name,
        "documents": merger.documents,
        "tokens": merger.tokens,
        "prefixes": {split: [os.path.relpath(p, job.out) for p in merger.prefixes(split)] for split in SPLITS},
        "cpu_seconds": round(merger.cpu_seconds, 3),
    }


def _current_merge(job: Job, plan_: Plan, tokenizer_sha256: str) -> dict | None:
    """The merge an earlier run finished, while its manifest still describes these outputs, else
    None. Sound because the manifest is deleted before any token stream or merged file changes
    and written only after the merge: tokenizer, kept documents and output settings are the
    rest of what the merged files depend on."""
    manifest = read_json(job.out / MANIFEST_FILE)
    if not (
        manifest
        and manifest.get("tokenizer", {}).get("sha256") == tokenizer_sha256
        and manifest.get("documents", {}).get("kept") == int((plan_.assignment != DROP).sum())
        and manifest.get("config") == config_section(job.cfg)
    ):
        return None
    try:
        files = [
            job.out / (p + ext) for split in SPLITS for p in manifest[split]["prefixes"] for ext in (".bin", ".idx")
        ]
        if not all(f.is_file() for f in files):
            return None
        return {
            "dtype": manifest["dtype"],
            "documents": {split: manifest[split]["documents"] for split in SPLITS},
            "tokens": {split: manifest[split]["tokens"] for split in SPLITS},
            "prefixes": {split: manifest[split]["prefixes"] for split in SPLITS},
            "cpu_seconds": manifest.get("run", {}).get("cost", {}).get("merge", {}).get("cpu_seconds", 0.0),
        }
    except (KeyError, TypeError):  # a manifest written by hand or by another version
        return None


# ----------------------------------------------------------------------------- manifest


def config_section(cfg: DataPrepConfig) -> dict:
    """The settings that shape the output (not runtime or error budget), as the manifest records them."""
    return json.loads(
        json.dumps(
            {
                "input": asdict(cfg.input),
                "clean": asdict(cfg.clean),
                "tokenizer": asdict(cfg.tokenizer),
                "split": asdict(cfg.split),
                "output": {"train_prefix": cfg.output.train_prefix, "valid_prefix": cfg.output.valid_prefix},
            }
        )
    )


def write_manifest(job: Job, plan_: Plan, tokenizer_info: dict, merge: dict, run_info: dict) -> dict:
    """manifest.json (and skipped.jsonl), written last, atomically."""
    inputs = inputs_view(job, plan_.results)
    skipped = [entry for i in inputs for entry in i["skipped"]]
    cfg = job.cfg
    listed = []
    for entry in inputs:
        status = "failed" if entry["failed"] else ("partial" if entry["stopped_early"] else "ok")
        kept = sum(int((plan_.of(job.shards[i]) != DROP).sum()) for i in entry["shards"])
        listed.append(
            {
                "path": entry["path"],
                "format": entry["format"],
                "sha256": entry["sha256"],
                "bytes": entry["bytes"],
                "status": status,
                "records": entry["records"],
                "kept": kept,
                "skipped": len(entry["skipped"]),
            }
        )
    manifest = {
        "format_version": FORMAT_VERSION,
        **{
            split: {
                "prefixes": merge["prefixes"][split],  # [] when the split has no document
                "documents": merge["documents"][split],
                "tokens": merge["tokens"][split],
            }
            for split in SPLITS
        },
        "tokenizer": tokenizer_info,
        "dtype": merge["dtype"],
        "documents": {
            "read": sum(r["records"] for r in plan_.results),
            "after_filters": sum(r["kept"] for r in plan_.results),
            "kept": int((plan_.assignment != DROP).sum()),
        },
        "filters": sum_filters(plan_),
        "skipped_total": len(skipped),
        "skipped": skipped[: cfg.errors.max_listed],
        "skipped_log": "skipped.jsonl",
        "inputs": listed,
        "config": config_section(cfg),
        "run": {**run_info, "cost": stage_costs(job, merge)},
    }
    write_skipped_log(job, inputs)
    atomic_write_json(job.out / MANIFEST_FILE, manifest)
    return manifest


def stage_costs(job: Job, merge: dict) -> dict[str, dict]:
    """Units and CPU seconds of each sharded stage, summed over the markers of every unit (reused
    ones included: what the outputs cost), and the merge's CPU in its one process: with the
    manifest's input sizes and document counts, what ``data_prep.costs`` scales."""

    def total(markers: list[dict]) -> dict:
        return {"units": len(markers), "cpu_seconds": round(sum(m.get("cpu_seconds", 0.0) for m in markers), 3)}

    tokens_dir = job.dir("tokens")
    costs = {
        "clean": total(clean_results(job)),
        "tokenize": total([read_json(part_paths(tokens_dir, s.shard_id)["marker"]) or {} for s in job.shards]),
        "merge": {"units": 1, "cpu_seconds": merge["cpu_seconds"]},
    }
    if job.cfg.clean.near_dedup.enabled:
        out_dir = job.dir("near_dedup")
        costs["signatures"] = total(signature_markers(job))
        costs["buckets"] = total(
            [
                read_json(near_dedup.band_paths(out_dir, b)["marker"]) or {}
                for b in range(job.cfg.clean.near_dedup.bands)
            ]
        )
    return costs


# ----------------------------------------------------------------------------- what is left


def unfinished_units(job: Job, stage: Stage) -> list:
    """The units of ``stage`` a run still has to do (all of them while its inputs are not ready)."""
    try:
        if stage.name == "clean":
            fp, out_dir = clean_fingerprint(job.cfg), job.dir("clean")
            return [shard for shard in job.shards if _clean_result(shard, fp, out_dir) is None]
        if stage.name == "signatures":
            results = clean_results(job)
            out_dir = job.dir("near_dedup")
            return [
                s
                for s, r in zip(job.shards, results)
                if (read_json(near_dedup.signature_paths(out_dir, s.shard_id)["marker"]) or {}).get("fingerprint")
                != _signature_fingerprint(job, r)
            ]
        if stage.name == "buckets":
            fp = _band_fingerprint(job, signature_markers(job))
            return [
                band
                for band in range(job.cfg.clean.near_dedup.bands)
                if (read_json(near_dedup.band_paths(job.dir("near_dedup"), band)["marker"]) or {}).get("fingerprint")
                != fp
            ]
        plan_ = load_plan(job)
        if stage.name == "plan":
            return []
        if stage.name == "tokenizer":
            return [] if _tokenizer_current(job, plan_) else [None]
        tokenizer_file, info = load_tokenizer_stage(job)
        if stage.name == "tokenize":
            left = {t.shard_id for t in _tokenize_todo(job, job.shards, plan_, tokenizer_file)}
            return [s for s in job.shards if s.shard_id in left]
        current = not _tokenize_todo(job, job.shards, plan_, tokenizer_file) and _current_merge(
            job, plan_, info["sha256"]
        )
        return [] if current else [None]
    except DataPrepError:
        return units(job, stage)

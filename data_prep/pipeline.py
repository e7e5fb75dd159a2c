"""Runs the stages (data_prep/stages.py): all of them here on local cores, or one task of one stage.

``run(cfg)`` is the local executor: every stage in order, sharded stages on a process pool of
``runtime.workers`` (tokenize overlapped with the merge). ``run_task`` is one array task of a
SLURM submission (data_prep/slurm.py): the units ``rank, rank + tasks, ...`` of one stage,
also on a local pool. Both write the same files through the same stage code, so outputs are
byte-identical whatever the executor, the number of workers or of array tasks.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import datetime as dt
import logging
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

from data_prep import stages
from data_prep.config import DataPrepConfig
from data_prep.filters import offline_env
from data_prep.manifest import MANIFEST_FILE
from data_prep.readers import InputError, expand_inputs
from data_prep.shards import Shard, plan_shards
from data_prep.stages import DataPrepError, Job, Stage
from data_prep.tokenizer import load_tokenizer
from data_prep.writer import tokenize_shard
from jobscripts.allocation import allocated_cpus
from jobscripts.atomic import read_json

__all__ = ["DataPrepError", "clean_work", "manifest_without_run", "run", "run_task"]
logger = logging.getLogger("data_prep")


class Preempted(BaseException):
    """SIGTERM reached data_prep (SLURM preempts it, its time limit is near, or a user stops it)."""


def raise_preempted(signum, frame) -> None:
    raise Preempted()


def _worker_init() -> None:
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one process per core already
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
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


@contextlib.contextmanager
def _pool(workers: int) -> Iterator[cf.Executor]:
    """:func:`_executor`, shut down on leaving. On an exception (a failure, SIGTERM, Ctrl-C) its
    workers are stopped at once and queued work is dropped: finished units are on disk (each
    written atomically), so no worker may outlive the run or hold its end up for a shard."""
    pool = _executor(workers)
    try:
        yield pool
    except BaseException:
        if isinstance(pool, cf.ProcessPoolExecutor):
            procs = list((pool._processes or {}).values())  # no public way before Python 3.14
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.join(10)
        raise
    else:
        pool.shutdown(wait=True)


def usable_cores() -> int:
    """The cores this process may use (a SLURM allocation or a taskset: jobscripts.allocation), not the machine's."""
    return allocated_cpus()


def _workers(cfg: DataPrepConfig, units: int) -> int:
    workers = usable_cores() if cfg.runtime.workers is None else cfg.runtime.workers
    return min(workers, units) if workers else 0


class OutputExistsError(ValueError):
    """``output.dir`` holds a completed build of another config (exit 2, nothing done)."""


def check_output(cfg: DataPrepConfig, out: Path) -> None:
    """Refuse to replace a completed build of another config in ``out``: its manifest.json's
    ``config`` (what shapes the output: :func:`stages.config_section`) must be this config's,
    unless ``output.overwrite``. The same config resumes, or with nothing left keeps every file;
    a manifest without a ``config`` (written by hand or by a version before it) is not compared."""
    if cfg.output.overwrite:
        return
    recorded = read_json(out / MANIFEST_FILE)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("config"), dict):
        return
    from runconfig import changed_keys, describe_changes

    differs = describe_changes(changed_keys(recorded["config"], stages.config_section(cfg)))
    if differs:
        raise OutputExistsError(
            f"output.dir {out} holds a completed build of another config ({out / MANIFEST_FILE}): "
            f"{'; '.join(differs)}. Give another output.dir, or --overwrite (output.overwrite=true) to replace it"
        )


def check_inputs(cfg: DataPrepConfig) -> list[Shard]:
    """The shard list; a completed build of another config in the output directory, bad inputs, a
    missing extractor or an unusable tokenizer fail here, before anything is written."""
    out = Path(cfg.output.dir).resolve()
    check_output(cfg, out)
    sources = [s for s in expand_inputs(cfg.input) if not _written_here(Path(s.path).resolve(), out)]
    if not sources:
        raise InputError(f"input.paths: every file they match is one data_prep wrote into output.dir {out}")
    if any(s.format == "warc" for s in sources) and cfg.input.html_extractor == "trafilatura":
        from data_prep.extract import _trafilatura_text

        try:
            _trafilatura_text("<html></html>")  # fail now, with the fix in the message, not once per record
        except ImportError as exc:
            raise InputError(str(exc)) from exc
    if cfg.tokenizer.path is not None:
        load_tokenizer(cfg.tokenizer.path, cfg.tokenizer.eod_token)
    return plan_shards(sources, cfg.input)


def _written_here(path: Path, out: Path) -> bool:
    """A file data_prep writes into ``out`` with a suffix its readers take: with the output folder
    inside a walked input folder, a rerun read its manifest.json, skipped.jsonl and a copied
    tokenizer.json as JSONL input (files of the user's there, such as build_from_texts' input/, stay inputs)."""
    return (
        path.parent == out
        and path.name in (MANIFEST_FILE, "skipped.jsonl", "tokenizer.json")
        or (path.is_relative_to(out / ".work"))
    )


def run(cfg: DataPrepConfig) -> dict:
    """Run (or resume) the pipeline here; returns the manifest written to ``<output.dir>/manifest.json``."""
    offline_env()
    started = time.time()
    shards = check_inputs(cfg)
    job = Job(cfg, Path(cfg.output.dir).resolve(), shards)
    job.work.mkdir(parents=True, exist_ok=True)
    with _locked(job.work / ".lock", exclusive=True):
        _remove_stale_tmp_files(job.out)
        workers = _workers(cfg, len(shards))
        with _pool(workers) as pool:
            with _timed(job, "clean"):
                stages.clean(job, pool, shards)
            if cfg.clean.near_dedup.enabled:
                stages.check_error_budget(job, stages.clean_results(job))  # before spending time on them
                with _timed(job, "signatures"):
                    stages.signatures(job, pool, shards)
                with _timed(job, "buckets"):
                    stages.buckets(job, pool, range(cfg.clean.near_dedup.bands))
            with _timed(job, "plan"):
                plan = stages.plan(job)
            with _timed(job, "tokenizer"):
                tokenizer_file, tokenizer_info = stages.tokenizer(job, plan)
            with _timed(job, "tokenize_and_merge"):
                merge = stages.tokenize_and_merge(job, pool, plan, tokenizer_file, tokenize_shard)
        run_info = {
            "started_at": _iso(started),
            "elapsed_s": round(time.time() - started, 3),
            "executor": "local",
            "workers": workers,
            "reused": job.reused,
            "stage_seconds": {k: round(v, 3) for k, v in job.seconds.items()},
        }
        return stages.write_manifest(job, plan, tokenizer_info, merge, run_info)


def run_task(cfg: DataPrepConfig, shards: list[Shard], stage: Stage, rank: int, tasks: int) -> dict | None:
    """Task ``rank`` of ``tasks`` of one stage, on a frozen shard list; the merge task returns the manifest.

    Array tasks of one stage run at the same time on the same output directory, so they take
    the directory's lock shared (a local run takes it exclusively) and leave other tasks'
    temporary files alone; the merge, which runs after every other task, takes it exclusively
    and removes the temporary files of tasks that were killed.
    """
    offline_env()
    started = time.time()
    job = Job(cfg, Path(cfg.output.dir).resolve(), shards)
    job.work.mkdir(parents=True, exist_ok=True)
    mine = stages.units(job, stage)[rank::tasks]
    # The merge runs once every other task has ended (afterok): alone on the directory, it
    # removes the temporary files that killed tasks left, as a local run does first.
    with _locked(job.work / ".lock", exclusive=stage.name == "merge"):
        if stage.name == "merge":
            _remove_stale_tmp_files(job.out)
        if stage.name == "plan":
            stages.plan(job)
        elif stage.name == "tokenizer":
            stages.tokenizer(job, stages.load_plan(job))
        elif stage.name == "merge":
            plan = stages.load_plan(job)
            tokenizer_file, tokenizer_info = stages.load_tokenizer_stage(job)
            merge = stages.tokenize_and_merge(job, None, plan, tokenizer_file)
            run_info = {"started_at": _iso(started), "elapsed_s": round(time.time() - started, 3), "executor": "slurm"}
            return stages.write_manifest(job, plan, tokenizer_info, merge, run_info)
        else:
            with _pool(_workers(cfg, len(mine))) as pool:
                if stage.name == "tokenize":
                    stages.tokenize(job, pool, mine, stages.load_plan(job), stages.load_tokenizer_stage(job)[0])
                else:
                    {"clean": stages.clean, "signatures": stages.signatures, "buckets": stages.buckets}[stage.name](
                        job, pool, mine
                    )
    return None


@contextlib.contextmanager
def _timed(job: Job, name: str):
    started = time.perf_counter()
    yield
    job.seconds[name] = time.perf_counter() - started


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat(timespec="seconds")


@contextlib.contextmanager
def _locked(lock_path: Path, exclusive: bool):
    """A local run excludes every other run and task on the directory (it deletes their temporary
    files); array tasks only exclude a local run."""
    with open(lock_path, "a+") as fh:
        try:
            import fcntl

            fcntl.flock(fh.fileno(), (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no lock
            pass
        except OSError as exc:
            raise DataPrepError(f"another data_prep run is using {lock_path.parent.parent}") from exc
        yield


def _remove_stale_tmp_files(out: Path) -> None:
    """Half-written files a killed run left behind (never read: only published names are)."""
    work = out / ".work"
    for folder in (out, work / "clean", work / "tokens", work / "near_dedup", work / "plan"):
        for stale in folder.glob(".*.tmp"):
            stale.unlink(missing_ok=True)


def manifest_without_run(manifest: dict) -> dict:
    """The manifest minus its ``run`` section (timings, reuse counts): what reruns must reproduce."""
    return {k: v for k, v in manifest.items() if k != "run"}


def clean_work(out: str | os.PathLike) -> None:
    """Delete ``.work/`` (intermediate shards); the next run starts from scratch."""
    shutil.rmtree(Path(out) / ".work", ignore_errors=True)

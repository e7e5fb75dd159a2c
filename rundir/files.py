"""The run directory of docs/contracts.md, owned here: file names, record types, readers, writers.

The trainer (rank 0) writes it; launch (run states, ``results.csv``, the study planner),
eval (divergence reasons, checkpoints) and the tests' stand-in trainer read it, all through
this module. One convention for numbers JSON cannot hold, in every JSON file the toolkit
writes: non-finite floats are the strings ``"nan"``, ``"inf"``, ``"-inf"`` (:func:`json_safe`),
read back as floats (:func:`number`); ``null`` means "no value".
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from jobscripts.atomic import atomic_write_text
from jobscripts.requeue import first_written_exit
from rundir.contract import (
    ATTEMPT_EXIT_ENV,
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    DIAGNOSTICS_FILE,
    EXIT_FILE,
    EXIT_FILES,
    FINAL_STATUSES,
    HF_EXPORT_DIR,
    LM_EVAL_FILE,
    LM_EVAL_SAMPLES_FILE,
    LOCK_FILE,
    METRICS_FILE,
    PARAMETRIZATION_FILE,
    RESULTS_FILE,
    RUNS_DIR,
    STATUS_OF_EXIT,
    SUMMARY_FILE,
    ExitCode,
    Status,
)

__all__ = [
    "CHECKPOINTS_DIR",
    "COMMON_FILE",
    "CONFIG_FILE",
    "DIAGNOSTICS_FILE",
    "HF_EXPORT_DIR",
    "INHERITED_FROM",
    "LM_EVAL_FILE",
    "LM_EVAL_SAMPLES_FILE",
    "LOCK_FILE",
    "METRICS_FILE",
    "PARAMETRIZATION_FILE",
    "SUMMARY_FILE",
    "EXIT_FILE",
    "EvalRecord",
    "ExitRecord",
    "RunDirError",
    "RunsAt",
    "RunSummary",
    "checkpoint_dir",
    "json_safe",
    "latest_checkpoint",
    "metrics_line",
    "number",
    "attempt_exit",
    "read_diagnostics",
    "read_metrics",
    "read_metrics_with_source",
    "read_diagnostics_with_source",
    "read_summary",
    "run_dirs",
    "is_run_dir",
    "locate_runs",
    "step_dir_name",
    "truncate_diagnostics",
    "truncate_metrics",
    "write_attempt_exit",
    "write_exit_record",
    "write_summary",
]

LATEST = "latest"  # checkpoints/latest: the name of the newest complete checkpoint folder
COMMON_FILE = "common.json"  # in each checkpoint folder: step, evals, layout, table, config, data identity
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class RunDirError(ValueError):
    """A run-directory file exists but does not hold what the contract says; names the file."""


def json_safe(value: Any) -> Any:
    """``value`` for strict JSON (recursively): non-finite floats as their strings, numpy
    scalars as Python numbers, mapping keys as strings."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # numpy / torch scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def number(value: Any, where: str = "value") -> Optional[float]:
    """A JSON number as written by :func:`json_safe` -> float (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise RunDirError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.lower() in _NON_FINITE:
        return _NON_FINITE[value.lower()]
    raise RunDirError(f"{where}: expected a number, got {value!r}")


def run_dirs(path: Path) -> list[Path]:
    """The run directories ``path`` names, as eval's commands and ``launch status`` take a path: a
    sweep directory's ``runs/*`` folders, sorted by name (dot-folders, such as the trainers' shared
    ``.index_cache``, are not runs); else ``path`` itself, a run directory."""
    runs = Path(path) / RUNS_DIR
    if not runs.is_dir():
        return [Path(path)]
    return _subfolders(runs)


def _subfolders(folder: Path) -> list[Path]:
    """The folders in ``folder``, sorted, dot-folders (``.index_cache``) left out."""
    return sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


RUN_MARKERS = (CONFIG_FILE, SUMMARY_FILE, METRICS_FILE)  # a folder holding one of these is a run directory


def is_run_dir(path: Path) -> bool:
    """``path`` holds a run's files (its config, summary or metrics)."""
    return any((Path(path) / name).is_file() for name in RUN_MARKERS)


@dataclass(frozen=True)
class RunsAt:
    """What a path given to an eval command holds (:func:`locate_runs`).

    ``kind``: ``sweep`` (a sweep directory: ``runs/`` or ``results.csv`` inside), ``runs`` (a folder of run
    directories: a sweep's ``runs/`` itself, or any folder whose subfolders are runs), ``run`` (one
    run directory) or ``none`` (none of those). ``sweep_dir``: the sweep directory whose
    ``results.csv`` describes the runs (a sweep directory, or the folder above a ``runs/``
    folder); None for a run directory or a folder of runs with another name. ``runs``: the run
    directories, sorted."""

    path: Path
    kind: str
    sweep_dir: Optional[Path]
    runs: tuple[Path, ...]

    @property
    def table(self) -> Optional[Path]:
        """The sweep's ``results.csv`` where it exists."""
        if self.sweep_dir is None or not (self.sweep_dir / RESULTS_FILE).is_file():
            return None
        return self.sweep_dir / RESULTS_FILE

    def describe(self) -> str:
        """What was found, as messages say it: ``sweeps/a/runs: the runs/ folder of sweep
        sweeps/a (8 run directories; results.csv there)``."""
        n = len(self.runs)
        count = f"{n} run director{'y' if n == 1 else 'ies'}"
        table = f"{RESULTS_FILE} there" if self.table else f"no {RESULTS_FILE}"
        if self.kind == "sweep":
            return f"{self.path}: a sweep directory ({count} in {RUNS_DIR}/; {table})"
        if self.kind == "runs" and self.sweep_dir is not None:
            return f"{self.path}: the {RUNS_DIR}/ folder of sweep {self.sweep_dir} ({count}; {table})"
        if self.kind == "runs":
            return f"{self.path}: a folder of {count}"
        if self.kind == "run":
            return f"{self.path}: a run directory"
        if not self.path.exists():
            return f"{self.path}: not found"
        if not self.path.is_dir():
            return f"{self.path}: not a directory"
        return (
            f"{self.path}: neither a sweep directory (no {RUNS_DIR}/), a folder of run directories, nor a run "
            f"directory (no {', '.join(RUN_MARKERS)})"
        )


def locate_runs(path: str | Path) -> RunsAt:
    """The run directories ``path`` names, and the sweep they belong to: the one reading of a path
    that every eval command takes. A sweep directory (``runs/`` or ``results.csv`` inside:
    :func:`run_dirs`); a
    sweep's ``runs/`` folder itself (its sweep is the folder above) or any folder of run
    directories; a run directory. Anything else is ``kind`` ``none`` (:meth:`RunsAt.describe`
    says why)."""
    path = Path(path)
    if not path.is_dir():
        return RunsAt(path, "none", None, ())
    if (path / RUNS_DIR).is_dir() or (path / RESULTS_FILE).is_file():  # a table alone: a sweep whose runs are elsewhere
        return RunsAt(path, "sweep", path, tuple(run_dirs(path)) if (path / RUNS_DIR).is_dir() else ())
    if is_run_dir(path):
        return RunsAt(path, "run", None, (path,))
    inside = _subfolders(path)
    if path.name == RUNS_DIR:
        return RunsAt(path, "runs", path.parent, tuple(inside))
    runs = tuple(p for p in inside if is_run_dir(p))
    return RunsAt(path, "runs", None, runs) if runs else RunsAt(path, "none", None, ())


# ----------------------------------------------------------------------------- summary.json
@dataclass(frozen=True)
class EvalRecord:
    """One held-out evaluation: at ``step``, the ``fraction`` of training it stands for."""

    step: int
    fraction: float
    val_loss: float


@dataclass(frozen=True)
class RunSummary:
    """``summary.json``: how a run ended (or stopped) and what it reached.

    ``status``: completed | diverged (final: a rerun leaves them alone) | failed (a crash) |
    preempted (a checkpoint was saved; a rerun resumes). Summaries written before ``preempted``
    existed say ``failed`` with ``exit_code`` 75 and are read as ``preempted``. The run's
    identity (preset, depth, ...) is repeated so a summary can be read without its config.
    """

    status: Status
    reason: Optional[str] = None
    exit_code: Optional[int] = None
    steps: int = 0
    target_steps: Optional[int] = None
    tokens: int = 0
    evals: tuple[EvalRecord, ...] = ()
    final_val_loss: Optional[float] = None
    final_train_loss: Optional[float] = None
    wall_time_s: Optional[float] = None
    preset: Optional[str] = None
    num_layers: Optional[int] = None
    hidden_size: Optional[int] = None
    lr: Optional[float] = None
    block_multiplier: Optional[float] = None
    seed: Optional[int] = None
    base_num_layers: Optional[int] = None
    optimizer: Optional[str] = None
    width: Optional[str] = None  # the width rule (sp | mup | yaida)
    emergent_scale: Optional[dict[str, float]] = None  # width yaida: {s, gamma = L/n^(1-s), L_over_n}
    # checkpoint.init_mode=continue: the run this one continued ({run_dir, checkpoint, step,
    # config_sha256, and same_sample_order where training.steps changed}); None: trained from step 0
    branch_of: Optional[dict[str, Any]] = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)  # keys a newer writer added

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def preempted(self) -> bool:
        return self.status == Status.PREEMPTED

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("evals", "extra")}
        data["status"] = Status(self.status).value
        data["evals"] = [asdict(e) for e in self.evals]
        data.update(self.extra)
        return json_safe(data)

    @classmethod
    def from_json(cls, data: Any, where: str = SUMMARY_FILE) -> RunSummary:
        if not isinstance(data, dict) or not isinstance(data.get("status"), str):
            raise RunDirError(f"{where}: expected an object with a 'status' string")
        known = {f.name for f in fields(cls)} - {"extra"}
        values: dict[str, Any] = {k: v for k, v in data.items() if k in known}
        try:
            values["status"] = Status(data["status"])
        except ValueError:
            raise RunDirError(f"{where}: status {data['status']!r} is none of {[s.value for s in Status]}") from None
        if values["status"] == Status.FAILED and data.get("exit_code") == ExitCode.RESUMABLE:
            values["status"] = Status.PREEMPTED  # written before the status existed
        for key in ("final_val_loss", "final_train_loss", "wall_time_s", "lr", "block_multiplier"):
            values[key] = number(data.get(key), f"{where}: {key}")
        evals = data.get("evals") or []
        if not isinstance(evals, list):
            raise RunDirError(f"{where}: evals: expected a list")
        values["evals"] = tuple(
            EvalRecord(
                int(e["step"]),
                number(e.get("fraction"), f"{where}: evals[{i}].fraction"),
                number(e.get("val_loss"), f"{where}: evals[{i}].val_loss"),
            )
            for i, e in enumerate(evals)
            if isinstance(e, dict) and "step" in e
        )
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})


def read_summary(run_dir: Path) -> Optional[RunSummary]:
    """The run's summary; None when there is none yet or it cannot be read (a run in progress,
    or a file cut short: the run is then treated as not finished and rerun)."""
    path = Path(run_dir) / SUMMARY_FILE
    try:
        return RunSummary.from_json(json.loads(path.read_text()), str(path))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def write_summary(run_dir: Path, summary: RunSummary) -> None:
    atomic_write_text(Path(run_dir) / SUMMARY_FILE, json.dumps(summary.to_json(), indent=1) + "\n")


# ----------------------------------------------------------------------------- exit.json
@dataclass(frozen=True)
class ExitRecord:
    """How a trainer process ended when no ``summary.json`` says it: ``exit.json`` (a refusal,
    exit 2, written by every rank that refuses once it knows its run directory) or the attempt's
    own file (:func:`write_attempt_exit`: a rank locked out of its run directory, exit 4); or the
    code a launcher's caller reads for an attempt (:func:`attempt_exit`)."""

    exit_code: int
    reason: Optional[str] = None
    rank: Optional[int] = None

    @property
    def status(self) -> Status:
        return STATUS_OF_EXIT.get(self.exit_code, Status.FAILED)


def _exit_text(record: ExitRecord) -> str:
    data = {"exit_code": int(record.exit_code), "status": record.status.value, "reason": record.reason}
    data |= {"rank": record.rank, "host": socket.gethostname(), "pid": os.getpid()}
    return json.dumps(data, indent=1) + "\n"


def write_exit_record(run_dir: Path, record: ExitRecord) -> None:
    """Written only by a process that may write the run directory (not one locked out of it:
    :func:`write_attempt_exit`)."""
    atomic_write_text(Path(run_dir) / EXIT_FILE, _exit_text(record))


def write_attempt_exit(record: ExitRecord) -> bool:
    """``record`` in the file this attempt's launcher named in ``$DEPTHMUP_ATTEMPT_EXIT``
    (``rundir.contract.ATTEMPT_EXIT_ENV``): how a rank ended that may not write its run
    directory (locked out: another live process owns it). False where no launcher named one
    (the exit code itself is then all there is) or it cannot be written."""
    path = os.environ.get(ATTEMPT_EXIT_ENV)
    if not path:
        return False
    try:
        atomic_write_text(Path(path), _exit_text(record))
    except OSError:
        return False
    return True


def _exit_record(data: Any) -> Optional[ExitRecord]:
    if not isinstance(data, dict) or type(data.get("exit_code")) is not int:
        return None
    reason, rank = data.get("reason"), data.get("rank")
    return ExitRecord(data["exit_code"], reason if isinstance(reason, str) else None, rank)


def attempt_exit(run_dir: Path, since: float, own: Optional[Path] = None) -> Optional[ExitRecord]:
    """The exit code (and reason) the trainer wrote during an attempt that began at ``since``
    (epoch seconds): ``own``, the file the launcher named for this attempt alone
    (``ATTEMPT_EXIT_ENV``: a rank locked out of the run directory), else ``exit.json``, else
    ``summary.json`` (the contract's ``EXIT_FILES``, the same rule ``jobscripts.requeue
    --exit-file`` applies); None when it wrote none. This, not torchrun's or srun's code, is
    the trainer's."""
    paths = ([str(own)] if own is not None else []) + [str(Path(run_dir) / name) for name in EXIT_FILES]
    written = first_written_exit(paths, since)
    record = _exit_record(written[1]) if written is not None else None
    return ExitRecord(record.exit_code, record.reason) if record is not None else None


# ----------------------------------------------------------------------------- metrics.jsonl
def metrics_line(row: dict[str, Any]) -> str:
    """One ``metrics.jsonl`` line (``kind`` train | eval, ``step``, then the values)."""
    return json.dumps(json_safe(row)) + "\n"


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON-object line; stops at the first that is not (a line cut by a hard
    kill, after which nothing is reliable)."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if not isinstance(row, dict):
            break
        rows.append(row)
    return rows


def _with_numbers(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """``keys`` written as "nan"/"inf"/"-inf" read back as floats (other strings left alone)."""
    for row in rows:
        for key in keys:
            if isinstance(row.get(key), str):
                try:
                    row[key] = number(row[key])
                except RunDirError:
                    pass
    return rows


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every complete row, non-finite strings of ``loss``/``val_loss``/``val_ppl``/``grad_norm`` back as floats."""
    return _with_numbers(_read_rows(Path(run_dir) / METRICS_FILE), ("loss", "val_loss", "val_ppl", "grad_norm"))


INHERITED_FROM = "inherited_from"  # the key marking a row a branch inherited from its source


def read_metrics_with_source(run_dir: Path) -> list[dict[str, Any]]:
    """The whole loss curve of a run: where it continued another run (``checkpoint.init_mode=
    continue``; :func:`branch_source`: ``summary.json``'s ``branch_of``, else its own latest
    checkpoint's), that run's rows up to the branch step, each marked ``inherited_from: <its run
    directory>``, then this run's own rows (which start after the branch step); a source that is
    itself a branch gives its own source's prefix the same way. The one place that joins a
    branch to its source: plots and analyses of whole curves read this, never the two files.
    An inherited eval row's ``fraction`` is of the source's ``training.steps``. RunDirError where
    the source's ``metrics.jsonl`` is gone (a moved or deleted source sweep)."""
    return _with_source(Path(run_dir), set(), read_metrics)


def read_diagnostics_with_source(run_dir: Path, *, summary: Optional[RunSummary] = None) -> list[dict[str, Any]]:
    """A run's ``diagnostics.jsonl`` rows joined to its source's as :func:`read_metrics_with_source`
    joins metrics: a branch's own rows start after its branch step, so the source's rows up to it
    (each marked ``inherited_from``) come first. A source trained without diagnostics gives none
    (the branch's rows then start after the branch step); a source gone is a RunDirError.
    ``summary``: the run's, where the caller has read it (:func:`branch_source`)."""
    return _with_source(Path(run_dir), set(), read_diagnostics, summary)


def _with_source(
    run_dir: Path,
    seen: set[Path],
    read: Callable[[Path], list[dict[str, Any]]],
    summary: Optional[RunSummary] = None,
) -> list[dict[str, Any]]:
    own = read(run_dir)
    source = branch_source(run_dir, None, summary=summary)
    if source is None or not source.get("run_dir") or source.get("step") is None:
        return own
    src, step = Path(source["run_dir"]), int(source["step"])
    if src.resolve() in seen | {run_dir.resolve()}:
        raise RunDirError(f"{run_dir}: its branch_of names {src}, which is already in its lineage")
    if not (src / METRICS_FILE).is_file():
        raise RunDirError(
            f"{run_dir}: continues {src} (step {step}; summary.json branch_of), which has no {METRICS_FILE}: "
            "the source sweep moved or is gone, so the curve before the branch step cannot be joined"
        )
    inherited = [r for r in _with_source(src, seen | {run_dir.resolve()}, read) if r.get("step", 0) <= step]
    for row in inherited:
        row.setdefault(INHERITED_FROM, str(src))
    return inherited + own


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Keep rows up to ``last_step`` (the restored checkpoint): no duplicates after a resume."""
    rows = [r for r in read_metrics(run_dir) if r.get("step", 0) <= last_step]
    atomic_write_text(Path(run_dir) / METRICS_FILE, "".join(metrics_line(r) for r in rows))


# ----------------------------------------------------------------------------- diagnostics.jsonl
def read_diagnostics(run_dir: Path) -> list[dict[str, Any]]:
    """``diagnostics.jsonl`` rows (docs/contracts.md), numbers as floats (``"nan"`` -> nan)."""
    return _with_numbers(
        _read_rows(Path(run_dir) / DIAGNOSTICS_FILE), ("weight_rms", "update_rms", "update_ratio", "rms")
    )


def truncate_diagnostics(run_dir: Path, last_step: int) -> None:
    """Keep rows up to ``last_step``, like :func:`truncate_metrics` (no file: nothing to do)."""
    path = Path(run_dir) / DIAGNOSTICS_FILE
    if path.is_file():
        rows = [r for r in _read_rows(path) if r.get("step", 0) <= last_step]
        atomic_write_text(path, "".join(metrics_line(r) for r in rows))


# ----------------------------------------------------------------------------- checkpoints
def step_dir_name(step: int) -> str:
    return f"step_{step:08d}"


def checkpoint_step(name: str) -> Optional[int]:
    """The step of a checkpoint folder named ``name`` (:func:`step_dir_name`), else None."""
    digits = name.removeprefix("step_")
    return int(digits) if name.startswith("step_") and digits.isdecimal() else None


def branch_source(
    run_dir: Path, init_from: Optional[str], *, summary: Optional[RunSummary] = None
) -> Optional[dict[str, Any]]:
    """``{"run_dir", "step"}`` of the run a continued run branches from: ``summary.json``'s
    ``branch_of``, else its own latest checkpoint's (a run in progress), else what its
    ``checkpoint.init_from`` names now (a checkpoint folder, or a run directory's latest
    checkpoint); None where none of them says. ``summary``: the run's, where the caller has read
    it already (None: read here)."""
    if summary is None:
        summary = read_summary(run_dir)
    record = summary.branch_of if summary is not None else None
    if record is None:
        try:
            own = latest_checkpoint(run_dir)
            record = json.loads((own / COMMON_FILE).read_text()).get("branch_of") if own is not None else None
        except (RunDirError, OSError, ValueError):
            record = None
    if record is not None:
        return {"run_dir": source_run_dir(run_dir, record), "step": record.get("step")}
    if not init_from:
        return None
    path = Path(init_from)
    step = checkpoint_step(path.name)
    if step is not None and path.parent.name == CHECKPOINTS_DIR:
        return {"run_dir": str(path.parent.parent), "step": step}
    try:
        latest = latest_checkpoint(path)
    except (RunDirError, OSError):
        latest = None
    return {"run_dir": str(path), "step": checkpoint_step(latest.name) if latest is not None else None}


RELATIVE_RUN_DIR = "relative_run_dir"  # branch_of: the source's run directory relative to the branch's own


def with_relative_source(record: Optional[dict[str, Any]], own_dir: Path) -> Optional[dict[str, Any]]:
    """A ``branch_of`` record with :data:`RELATIVE_RUN_DIR` (its ``run_dir`` relative to
    ``own_dir``, the run directory the record was written in) where it has none, so that a branch
    finds its source after both moved together (another disk, a GPU node, a laptop)."""
    if not record or record.get(RELATIVE_RUN_DIR) or not record.get("run_dir"):
        return record
    return {**record, RELATIVE_RUN_DIR: os.path.relpath(record["run_dir"], Path(own_dir).resolve())}


def source_run_dir(run_dir: Path, record: dict[str, Any]) -> Optional[str]:
    """Where the source a ``branch_of`` record names is now: its :data:`RELATIVE_RUN_DIR` from
    where ``run_dir`` is now, if that is a directory; else the absolute ``run_dir`` recorded, if
    that is one (the branch moved, its source did not); else, for a record written without the
    relative path (before it existed), the absolute one moved as the branch's ``config.yaml``
    ``run.dir`` moved; else the relative (or recorded) path, which is not there."""
    recorded = record.get("run_dir")
    relative = record.get(RELATIVE_RUN_DIR)
    here = Path(run_dir).resolve()
    moved = os.path.normpath(here / relative) if relative else None
    if moved is not None and Path(moved).is_dir():
        return moved
    if recorded and Path(recorded).is_dir():
        return str(recorded)
    if moved is None and recorded:
        written_in = _written_run_dir(here)
        if written_in is not None:
            guess = os.path.normpath(here / os.path.relpath(recorded, written_in))
            if Path(guess).is_dir():
                return guess
    return moved or recorded


def _written_run_dir(run_dir: Path) -> Optional[str]:
    """``run.dir`` as the run's ``config.yaml`` gives it (absolute), else None."""
    import yaml  # only for a branch written before RELATIVE_RUN_DIR whose source moved

    try:
        config = yaml.safe_load((run_dir / CONFIG_FILE).read_text())
        written = config["run"]["dir"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return str(written) if isinstance(written, str) and Path(written).is_absolute() else None


def checkpoint_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR / step_dir_name(step)


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The steps of ``run_dir``'s complete checkpoints (a :func:`step_dir_name` folder with its common file)."""
    steps = []
    for path in (Path(run_dir) / CHECKPOINTS_DIR).glob("step_*"):
        step = checkpoint_step(path.name)
        if step is not None and (path / COMMON_FILE).is_file():
            steps.append(step)
    return sorted(steps)


def latest_checkpoint(run_dir: Path) -> Optional[Path]:
    """The checkpoint folder ``checkpoints/latest`` names; without that file, the newest complete
    step folder (a kill between a save's rename and its ``latest`` write, or a pointer removed by
    hand, leaves whole folders and no pointer); None when there is no checkpoint. Training,
    export and lm-eval all read "the latest" through this one rule."""
    pointer = Path(run_dir) / CHECKPOINTS_DIR / LATEST
    if not pointer.is_file():
        steps = checkpoint_steps(run_dir)
        return checkpoint_dir(run_dir, steps[-1]) if steps else None
    path = pointer.parent / pointer.read_text().strip()
    if not (path / COMMON_FILE).is_file():
        raise RunDirError(f"{pointer} names {path}, which is not a complete checkpoint")
    return path

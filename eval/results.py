"""Read and validate a sweep's ``results.csv`` (docs/contracts.md, "Sweep directory").

Every analysis reads the sweep through :func:`read_results`, so bad input is rejected once,
with a message that names the file, the line and the column, instead of surfacing later
as a ``KeyError`` or a silently wrong plot.
"""

from __future__ import annotations

import csv
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from rundir.contract import (
    CANONICAL_KEYS,
    PARAMETRIZATION_KEYS,
    RECORD_COLUMNS,
    RESULT_STATUSES,
    RESULTS_FILE,
    RUNS_DIR,
    TAIL_COLUMNS,
)
from rundir.files import locate_runs, read_summary

# Contract column -> the short name the analysis uses.
SHORT_NAMES: dict[str, str] = {
    "parametrization.preset": "preset",
    "model.num_layers": "depth",
    "optimizer.lr": "lr",
    "run.seed": "seed",
    "parametrization.block_multiplier": "block_multiplier",
    "parametrization.base_num_layers": "base_depth",
    "model.hidden_size": "hidden_size",
}
CANONICAL_COLUMNS: dict[str, str] = {key: SHORT_NAMES[key] for key in CANONICAL_KEYS}
STATUSES: tuple[str, ...] = RESULT_STATUSES
FRACTION_ATOL = 1e-6  # fractions are floats written with repr; match them with this tolerance


class ResultsError(ValueError):
    """``results.csv`` is missing, empty or malformed; the message names file, line and column."""


@dataclass
class SweepResults:
    """The validated rows of one ``results.csv``, or of several read as one table.

    ``rows`` has one row per CSV data row with typed columns: ``run_id``, the short canonical
    names (``preset``, ``depth``, ``lr``, ``seed``, ``block_multiplier``, ``base_depth``,
    ``hidden_size``), every extra swept key under its dotted name (kept as text), ``status``,
    ``step`` (float, NaN when empty), ``fraction``, ``val_loss`` (float, NaN when empty or
    non-finite text such as ``nan``), ``val_loss_recorded`` (the cell was not empty) and
    ``line`` (the 1-based line number in the file, header = line 1). Read from several files
    (``paths``), each row also has ``file``: the table it is a line of.
    """

    path: Path
    rows: pd.DataFrame
    extra_keys: list[str]
    warnings: list[str] = field(default_factory=list)
    paths: tuple[Path, ...] = ()  # the tables read, where there were several (path is the first)
    # rows made from run directories, not read from a results.csv: where their values come from, as
    # messages name it ("their summary.json files"); None: the table's columns
    read_from: str | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        """Every table read, in the order given."""
        return self.paths or (self.path,)

    @property
    def name(self) -> str:
        """The table, or the tables, as messages name them."""
        return ", ".join(str(p) for p in self.files)

    @property
    def sweep_dir(self) -> Path:
        """The folder of the (first) table: a sweep directory's ``runs/`` are there."""
        return self.path.parent

    @functools.cached_property
    def _run_files(self) -> dict[str, str]:
        """Each run ID's table (``file``), where several were read: one pass over the rows, not one
        per run asked for (:meth:`run_dir` is asked for every run of a report)."""
        if "file" not in self.rows:
            return {}
        firsts = self.rows.drop_duplicates("run_id")
        return dict(zip(firsts["run_id"], firsts["file"]))

    def run_dir(self, run_id: str) -> Path:
        """The run directory of ``run_id``: ``runs/<ID>`` beside the table its rows are in."""
        file = self._run_files.get(run_id)
        return (Path(file).parent if file is not None else self.sweep_dir) / RUNS_DIR / run_id

    def runs_per_file(self) -> list[tuple[str, int]]:
        """(table, runs analysed from it), in the order given; a shared base-depth copy is not a run."""
        rows = self.rows[~self.rows["shared_copy"].eq(True)] if "shared_copy" in self.rows else self.rows
        if "file" not in rows:
            return [(str(self.path), int(rows["run_id"].nunique()))]
        counts = rows.groupby("file", sort=False)["run_id"].nunique()
        return [(str(p), int(counts.get(str(p), 0))) for p in self.files]

    def recorded_fractions(self) -> list[float]:
        """Distinct eval fractions in the file, ascending (near-equal floats merged)."""
        out: list[float] = []
        for value in sorted(self.rows["fraction"].unique()):
            if not out or abs(value - out[-1]) > FRACTION_ATOL:
                out.append(float(value))
        return out


def check_presets(sweep: SweepResults, presets: Sequence[str] | None) -> None:
    """``--presets`` (eval transfer, eval dynamics): each one a preset of the table's rows, else a
    ``ResultsError`` naming those there are."""
    known = sorted({str(p) for p in sweep.rows["preset"]})
    if unknown := [p for p in presets or [] if p not in known]:
        raise ResultsError(
            f"{sweep.name}: preset(s) {unknown} {_not_in(sweep, 'parametrization.preset', 'presets')}; found {known}"
        )


def _not_in(sweep: SweepResults, column: str, what: str) -> str:
    """``not in column 'model.num_layers'`` for a table; for rows made from run directories
    (:attr:`SweepResults.read_from`) ``not among the depths their summary.json files name``."""
    return f"not in column {column!r}" if sweep.read_from is None else f"not among the {what} {sweep.read_from} name"


def sources_list(sources: list[tuple[str, int]], quote: str = "") -> str:
    """``A (8 runs), B (64 runs)``: the tables an analysis read together, each with its runs
    (:meth:`SweepResults.runs_per_file`); each name between ``quote``s (the report's Markdown)."""
    return ", ".join(f"{quote}{file}{quote} ({runs} runs)" for file, runs in sources)


def sources_text(sources: list[tuple[str, int]]) -> str:
    """``read as one table: A (8 runs), B (64 runs)``, as ``eval transfer`` and ``eval dynamics`` say it."""
    return "read as one table: " + sources_list(sources)


def _parse_float(text: str, where: str, *, allow_empty: bool) -> float:
    if text == "":
        if allow_empty:
            return math.nan
        raise ResultsError(f"{where}: empty, a number is required")
    try:
        return float(text)
    except ValueError:
        raise ResultsError(f"{where}: {text!r} is not a number") from None


def _parse_int(text: str, where: str, *, allow_empty: bool = False, minimum: int | None = None) -> float:
    value = _parse_float(text, where, allow_empty=allow_empty)
    if math.isnan(value) and allow_empty and text == "":
        return value
    if not math.isfinite(value) or value != int(value):
        raise ResultsError(f"{where}: {text!r} is not an integer")
    if minimum is not None and value < minimum:
        raise ResultsError(f"{where}: {text!r} must be >= {minimum}")
    return int(value)


def read_results(
    path: str | Path | Sequence[str | Path], ignore_columns: list[str] | tuple[str, ...] = ()
) -> SweepResults:
    """Parse and validate ``path`` (a ``results.csv`` or the sweep directory holding one), or
    several such tables read as one.

    Any file name is read as the table (a file another tool wrote, e.g. ``sweep.tsv``); the
    delimiter is a comma, or a tab when the header holds tabs and no comma (one reading, no
    guess). A UTF-8 byte-order mark (Excel's "CSV UTF-8") is not part of the first column's
    name. ``ignore_columns`` are left out before anything else is read (``eval transfer
    --ignore-columns``: per-run records another tool writes, which are no swept keys).

    Several tables (cooldowns from several branch steps, a stable sweep and its cooldowns, one
    sweep run on two clusters): each is read and checked alone, as one is, then they are joined
    (:func:`join_tables`) and the checks across rows run again on the whole.
    """
    if isinstance(path, (str, Path)):
        return _read_table(Path(path), ignore_columns)[0]
    paths = [Path(p) for p in path]
    if not paths:
        raise ResultsError("no results.csv given")
    if len(paths) == 1:
        return _read_table(paths[0], ignore_columns)[0]
    read = [_read_table(p, ignore_columns, partial=True) for p in paths]
    if absent := [c for c in ignore_columns if not any(c in left_out for _, left_out in read)]:
        raise ResultsError(f"--ignore-columns {absent}: in none of the headers of {', '.join(map(str, paths))}")
    return join_tables([table for table, _ in read])


def read_paths(paths: Sequence[str | Path], ignore_columns: list[str] | tuple[str, ...] = ()) -> SweepResults:
    """``eval transfer``'s paths read as one table (:func:`read_results`), each path read as every
    eval command reads one (:func:`rundir.files.locate_runs`): a ``results.csv`` (any file name),
    a sweep directory, a sweep's ``runs/`` folder (its sweep's table), or run directories of a
    sweep (its table's rows of those runs only). What a folder was found to be is said in the
    table's warnings; a run directory outside a sweep with ``results.csv``, or one without a row
    there, is an error naming it."""
    tables: list[Path] = []
    derived: set[Path] = set()  # tables reached through a runs/ folder or run directories: read once
    only: dict[Path, list[str]] = {}  # a table reached through run directories alone -> their run IDs
    said: list[str] = []
    for given in map(Path, paths):
        at = locate_runs(given) if given.is_dir() else None
        if at is None or at.kind == "sweep":
            tables.append(given)  # read_results says what is wrong with it, if anything
            continue
        sweep = at.sweep_dir
        if at.kind == "run" and given.parent.name == RUNS_DIR:
            sweep = given.parent.parent
        table = sweep / RESULTS_FILE if sweep is not None else None
        if table is None or not table.is_file():
            where = f"; no {table} (run `python -m launch status {sweep}` to write it)" if table else ""
            raise ResultsError(
                f"{at.describe()}{where}: eval transfer reads a sweep's {RESULTS_FILE} (give the sweep directory, "
                f"its {RUNS_DIR}/ folder or its run directories)"
            )
        key = table.resolve()
        if key not in derived:
            derived.add(key)
            tables.append(table)
        if at.kind == "run":
            only.setdefault(key, []).append(given.name)
        else:
            only[key] = []  # the whole table
            said.append(f"read {at.describe()}")
    sweep = read_results(tables, ignore_columns=ignore_columns)
    restricted = {k: ids for k, ids in only.items() if ids}
    if not restricted:
        return replace(sweep, warnings=[*said, *sweep.warnings]) if said else sweep
    files = sweep.rows["file"].map(lambda f: Path(f).resolve()) if "file" in sweep.rows else None
    keep = np.ones(len(sweep.rows), dtype=bool)
    for key, ids in restricted.items():
        in_table = files.eq(key).to_numpy() if files is not None else np.ones(len(sweep.rows), dtype=bool)
        if absent := sorted(set(ids) - set(sweep.rows["run_id"][in_table])):
            raise ResultsError(
                f"{key.parent / RUNS_DIR / absent[0]}: no row in {key} (run `python -m launch status "
                f"{key.parent}` to write it again)"
            )
        keep &= ~in_table | sweep.rows["run_id"].isin(ids).to_numpy()
        total = sweep.rows["run_id"][in_table].nunique()
        said.append(f"only the {len(set(ids))} run directories given of the {total} runs of {key} analysed")
    rows = sweep.rows[keep].reset_index(drop=True)
    return replace(sweep, rows=rows, warnings=[*said, *sweep.warnings])


def _read_table(
    path: Path, ignore_columns: list[str] | tuple[str, ...], *, partial: bool = False
) -> tuple[SweepResults, list[str]]:
    """One table, validated; and the ``ignore_columns`` it had (``partial``: the others are
    another table's, not an error here)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    elif not path.exists() and not path.suffix:
        raise ResultsError(f"{path / RESULTS_FILE}: file not found (no sweep directory {path})")
    if not path.is_file():
        inner = path.parent / "sweep" / RESULTS_FILE  # a study's --out holds its sweep there
        if path.name == RESULTS_FILE and inner.is_file():
            raise ResultsError(f"{path}: file not found; {inner} is there: give {inner.parent} (a study's sweep)")
        if path.name != RESULTS_FILE:
            raise ResultsError(f"{path}: file not found")
        raise ResultsError(f"{path}: file not found (run `python -m launch status SWEEP_DIR` to write it)")
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a leading byte-order mark is dropped
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from exc
    if not text.strip():
        raise ResultsError(f"{path}: file is empty (expected a header line and one row per run and eval point)")
    lines = text.splitlines()
    delimiter = _delimiter(path, lines[0])
    try:
        records = list(csv.reader(lines, delimiter=delimiter))
    except csv.Error as exc:
        raise ResultsError(f"{path}: not valid CSV: {exc}") from exc
    header = [h.strip() for h in records[0]]
    warnings: list[str] = []
    left_out = [c for c in ignore_columns if c in header] if partial else list(ignore_columns)
    if left_out:
        records = _drop_columns(path, header, records, left_out, warnings)
        header = [h.strip() for h in records[0]]
    _check_header(path, header, warnings)
    body = [(i + 2, rec) for i, rec in enumerate(records[1:]) if any(cell.strip() for cell in rec)]
    if not body:
        raise ResultsError(f"{path}: has a header but no rows (no runs recorded yet?)")
    # every other column is a swept setting, but the records of a branch's source (docs/contracts.md)
    extra_keys = [
        h for h in header if h != "run_id" and h not in CANONICAL_COLUMNS and h not in TAIL_COLUMNS + RECORD_COLUMNS
    ]
    parsed = [_parse_row(path, header, line, rec, extra_keys) for line, rec in body]
    rows = pd.DataFrame(parsed)
    _check_run_consistency(path, rows, extra_keys)
    check_duplicates(path, rows, extra_keys)
    check_lr_grid(path, rows, extra_keys)
    check_extra_keys_split_curves(path, rows, extra_keys)
    return SweepResults(path=path, rows=rows, extra_keys=extra_keys, warnings=warnings), left_out


def _delimiter(path: Path, header_line: str) -> str:
    """``,``; a tab when the header has tabs and no comma. A header that is one field holding
    ``;`` (a spreadsheet's locale CSV, whose numbers may carry decimal commas) is refused."""
    if "," in header_line:
        return ","
    if "\t" in header_line:
        return "\t"
    if ";" in header_line:
        raise ResultsError(
            f"{path}: line 1 (header): fields are separated by ';'; write the table with ',' (or tabs) "
            "between fields and '.' as the decimal point"
        )
    return ","


def _drop_columns(
    path: Path, header: list[str], records: list[list[str]], ignore: list[str] | tuple[str, ...], warnings: list[str]
) -> list[list[str]]:
    required = {"run_id", *CANONICAL_COLUMNS, *TAIL_COLUMNS}
    if bad := [c for c in ignore if c in required]:
        raise ResultsError(f"--ignore-columns {bad}: the analysis needs these columns of {path}")
    if unknown := [c for c in ignore if c not in header]:
        raise ResultsError(f"{path}: line 1 (header): --ignore-columns {unknown} not in the header {header}")
    keep = [i for i, h in enumerate(header) if h not in ignore]
    for line, rec in enumerate(records[1:], start=2):
        if len(rec) != len(header) and any(cell.strip() for cell in rec):
            raise ResultsError(f"{path}: line {line}: has {len(rec)} fields, the header has {len(header)}")
    warnings.append(f"{path}: column(s) {list(ignore)} left out (--ignore-columns)")
    return [[rec[i] for i in keep] if len(rec) == len(header) else rec for rec in records]


def results_from_records(path: str | Path, records: list[dict], extra_keys: list[str] | None = None) -> SweepResults:
    """Rows given as dicts keyed by results.csv's columns, parsed and checked as
    :func:`read_results` parses the file (``path`` only names them in messages). The study
    planner analyses its finished runs this way, without writing a file."""
    path = Path(path)
    extra_keys = sorted(extra_keys or [])
    header = ["run_id", *CANONICAL_COLUMNS, *extra_keys, *TAIL_COLUMNS]
    if not records:
        raise ResultsError(f"{path}: no rows")

    def text(value: object) -> str:
        return repr(value) if isinstance(value, float) else ("" if value is None else str(value))

    parsed = [
        _parse_row(path, header, i + 2, [text(rec.get(h)) for h in header], extra_keys) for i, rec in enumerate(records)
    ]
    rows = pd.DataFrame(parsed)
    _check_run_consistency(path, rows, extra_keys)
    check_duplicates(path, rows, extra_keys)
    return SweepResults(path=path, rows=rows, extra_keys=extra_keys)


def join_tables(tables: list[SweepResults]) -> SweepResults:
    """Several validated tables as one: their rows, each with its ``file``, the union of their
    swept columns, and the checks across rows (:func:`check_duplicates`, :func:`check_lr_grid`,
    :func:`check_extra_keys_split_curves`) run on the whole, naming the file of each line.

    A run ID is one run: one in two tables with the same rows (the same table under two names,
    a sweep copied to another cluster) is counted once and said so; with other rows it is refused,
    naming both files and lines. A swept column one table lacks (a stable sweep has no
    ``branch_of.step``; a sweep that fixed ``training.steps`` has no such column) is empty in its
    rows, which form families of their own, and said so. One file given twice is refused."""
    seen: dict[Path, Path] = {}
    for table in tables:
        other = seen.setdefault(table.path.resolve(), table.path)
        if other is not table.path:
            also = f" (also as {other})" if str(other) != str(table.path) else ""
            raise ResultsError(f"{table.path}: given twice{also}: each table is read once")
    extra = list(dict.fromkeys(k for t in tables for k in t.extra_keys))
    frames: list[pd.DataFrame] = []
    warnings: list[str] = []
    for table in tables:
        rows = table.rows.copy()
        warnings += table.warnings
        if missing := [k for k in extra if k not in table.extra_keys]:
            for key in missing:
                rows[key] = ""
            warnings.append(
                f"{table.path}: no column(s) {missing} (another table's swept keys): its "
                f"{rows['run_id'].nunique()} run(s) read them as empty, so they are families of their own"
            )
        rows["file"] = str(table.path)
        frames.append(rows)
    rows = _drop_repeated_runs(pd.concat(frames, ignore_index=True), warnings)
    label = ", ".join(str(t.path) for t in tables)
    check_duplicates(label, rows, extra)
    check_lr_grid(label, rows, extra)
    check_extra_keys_split_curves(label, rows, extra)
    return SweepResults(tables[0].path, rows, extra, warnings, tuple(t.path for t in tables))


def _drop_repeated_runs(rows: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """Rows of a run ID that is in several tables: kept once where every table has the same rows
    for it, else a ``ResultsError`` naming both files, their first lines and the difference."""
    files = rows.groupby("run_id", sort=False)["file"].unique()
    repeated = files[files.map(len) > 1]
    if repeated.empty:
        return rows
    same = [c for c in rows.columns if c not in ("line", "file")]
    dropped: dict[tuple[str, str], list[str]] = {}
    drop = pd.Series(False, index=rows.index)
    for run_id, names in repeated.items():
        mine = rows[rows["run_id"] == run_id]
        first = mine[mine["file"] == names[0]]
        a = first[same].sort_values("fraction").reset_index(drop=True)
        for name in names[1:]:
            theirs = mine[mine["file"] == name]
            b = theirs[same].sort_values("fraction").reset_index(drop=True)
            if not a.equals(b):
                where = f"{names[0]} line {int(first['line'].min())} and {name} line {int(theirs['line'].min())}"
                raise ResultsError(f"{where}: run {run_id!r} is in both tables with {_difference(a, b)}; a run ID "
                                   "names one run: give each table once, or leave one of them out")  # fmt: skip
            dropped.setdefault((str(names[0]), str(name)), []).append(str(run_id))
            drop |= (rows["run_id"] == run_id) & (rows["file"] == name)
    for (kept, left), ids in dropped.items():
        shown = ", ".join(ids[:3]) + (f" and {len(ids) - 3} more" if len(ids) > 3 else "")
        warnings.append(f"{left}: {len(ids)} run(s) also in {kept} with the same rows, counted once ({shown})")
    return rows[~drop].reset_index(drop=True)


def _difference(a: pd.DataFrame, b: pd.DataFrame) -> str:
    """How one run's rows in two tables differ (same columns, sorted by fraction)."""
    if len(a) != len(b):
        return f"{len(a)} and {len(b)} rows (eval points)"
    for column in a.columns:
        if not a[column].equals(b[column]):
            i = next(i for i in range(len(a)) if not a[[column]].iloc[[i]].equals(b[[column]].iloc[[i]]))
            mine, theirs = (_plain(frame[column].iloc[i]) for frame in (a, b))
            return f"other values of column '{_contract_name(column)}': {mine!r} and {theirs!r}"
    return "other rows"  # pragma: no cover - equals() said they differ


def _plain(value: object) -> object:
    """A numpy scalar as the Python number it holds (for messages)."""
    return value.item() if isinstance(value, np.generic) else value


def _at(path: str | Path, *rows: pd.Series) -> str:
    """Where ``rows`` are: ``PATH: lines a and b``, or ``A line a and B line b`` where they are
    lines of two tables read as one (their ``file``)."""
    files = [str(r.get("file", path)) for r in rows]
    if len(set(files)) == 1:
        return f"{files[0]}: line{'s' if len(rows) > 1 else ''} {' and '.join(str(int(r['line'])) for r in rows)}"
    return " and ".join(f"{f} line {int(r['line'])}" for f, r in zip(files, rows))


def _check_header(path: Path, header: list[str], warnings: list[str]) -> None:
    required = ["run_id", *CANONICAL_COLUMNS, *TAIL_COLUMNS]
    missing = [c for c in required if c not in header]
    if missing:
        raise ResultsError(f"{path}: line 1 (header): missing column(s) {missing}; found {header}")
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise ResultsError(f"{path}: line 1 (header): duplicated column(s) {dupes}")
    empty = [i + 1 for i, h in enumerate(header) if not h]
    if empty:
        raise ResultsError(f"{path}: line 1 (header): column(s) {empty} have no name")
    n_lead = 1 + len(CANONICAL_COLUMNS)
    if header[0] != "run_id" or header[1:n_lead] != list(CANONICAL_COLUMNS) or header[-4:] != list(TAIL_COLUMNS):
        warnings.append(
            f"{path}: columns are not in the contract's order (read by name, so the analysis is unaffected)"
        )


def _parse_row(path: Path, header: list[str], line: int, rec: list[str], extra_keys: list[str]) -> dict:
    if len(rec) != len(header):
        raise ResultsError(f"{path}: line {line}: has {len(rec)} fields, the header has {len(header)}")
    cells = {h: v.strip() for h, v in zip(header, rec)}

    def where(col: str) -> str:
        return f"{path}: line {line}, column '{col}'"

    run_id = cells["run_id"]
    if not run_id:
        raise ResultsError(f"{where('run_id')}: empty")
    status = cells["status"]
    if status not in STATUSES:
        raise ResultsError(f"{where('status')}: {status!r} is not one of {list(STATUSES)}")
    preset = cells["parametrization.preset"]
    if not preset:
        raise ResultsError(f"{where('parametrization.preset')}: empty")
    lr = _parse_float(cells["optimizer.lr"], where("optimizer.lr"), allow_empty=False)
    if not (math.isfinite(lr) and lr > 0):
        hint = " (the LR itself, not its logarithm: write 2**x for a log2 LR x)" if lr < 0 else ""
        raise ResultsError(f"{where('optimizer.lr')}: {cells['optimizer.lr']!r} must be a positive finite number{hint}")
    block_multiplier = _parse_float(
        cells["parametrization.block_multiplier"], where("parametrization.block_multiplier"), allow_empty=False
    )
    if not math.isfinite(block_multiplier):
        raise ResultsError(f"{where('parametrization.block_multiplier')}: must be finite")
    fraction = _parse_float(cells["fraction"], where("fraction"), allow_empty=False)
    if not 0.0 < fraction <= 1.0 + FRACTION_ATOL:
        raise ResultsError(f"{where('fraction')}: {cells['fraction']!r} must be in (0, 1]")
    val_text = cells["val_loss"]
    val_loss = _parse_float(val_text, where("val_loss"), allow_empty=True)
    row = {
        "run_id": run_id,
        "preset": preset,
        "depth": _parse_int(cells["model.num_layers"], where("model.num_layers"), minimum=1),
        "lr": lr,
        "seed": _parse_int(cells["run.seed"], where("run.seed")),
        "block_multiplier": block_multiplier,
        "base_depth": _parse_int(
            cells["parametrization.base_num_layers"], where("parametrization.base_num_layers"), minimum=1
        ),
        "hidden_size": _parse_int(cells["model.hidden_size"], where("model.hidden_size"), minimum=1),
    }
    row.update({key: cells[key] for key in extra_keys})
    row.update(
        {
            "status": status,
            "step": float(_parse_int(cells["step"], where("step"), allow_empty=True, minimum=0)),
            "fraction": fraction,
            "val_loss": val_loss if math.isfinite(val_loss) else math.nan,
            "val_loss_recorded": val_text != "",
            "line": line,
        }
    )
    return row


def _check_run_consistency(path: Path, rows: pd.DataFrame, extra_keys: list[str]) -> None:
    """A run's key columns must hold the same values on all its rows (one run = one config)."""
    keys = ["preset", "depth", "lr", "seed", "block_multiplier", "base_depth", "hidden_size", *extra_keys, "status"]
    # one groupby for all runs (a loop over runs and keys took 4.6 s for 10000 runs); the first run
    # and key that differ are the ones named, as before
    distinct = rows.groupby("run_id", sort=False)[keys].nunique(dropna=False)
    for run_id in distinct.index[(distinct > 1).any(axis=1)][:1]:
        group = rows[rows["run_id"] == run_id]
        for key in keys:
            if distinct.at[run_id, key] > 1:
                lines = group["line"].tolist()
                values = group[key].tolist()
                hint = (
                    f" (a column besides the contract's is read as a swept setting, one value per run; leave a "
                    f"per-eval record such as this out with --ignore-columns {key})"
                    if key in extra_keys
                    else ""
                )
                raise ResultsError(
                    f"{path}: run '{run_id}' has different values of column "
                    f"'{_contract_name(key)}' on lines {lines}: {values}{hint}"
                )


CONFIG_KEYS: tuple[str, ...] = ("preset", "depth", "lr", "seed", "block_multiplier", "base_depth", "hidden_size")
# the canonical columns that, with every other swept key, make a family (runs compared across depth; eval.curves)
FAMILY_KEYS: tuple[str, ...] = ("preset", "hidden_size", "block_multiplier")
# two distinct LRs of one curve closer than this (octaves; 3.5%) are one LR written with different precision
LR_MIN_STEP_OCTAVES = 0.05


def check_lr_grid(path: Path, rows: pd.DataFrame, extra_keys: list[str]) -> None:
    """Two LRs of one curve (same family and depth) less than :data:`LR_MIN_STEP_OCTAVES` apart
    are refused: another tool that writes some runs' LR rounded (``0.00195`` beside
    ``0.001953125``) would otherwise make two grid points 0.003 octave apart, and the
    quadratic through them extrapolates wildly (a regret of 77 nats on the KJV study's rows)."""
    runs = rows.drop_duplicates("run_id")
    for _, group in runs.groupby([*FAMILY_KEYS, *extra_keys, "depth"], sort=False, dropna=False):
        lrs = np.unique(group["lr"].to_numpy(dtype=float))
        steps = np.diff(np.log2(lrs))
        if not steps.size or steps.min() >= LR_MIN_STEP_OCTAVES:
            continue
        i = int(np.argmin(steps))
        # the first row of each of the two LRs (in table order, then line order), the earlier one first
        firsts = [group.loc[group["lr"] == v].iloc[0] for v in (float(lrs[i]), float(lrs[i + 1]))]
        ra, rb = sorted(firsts, key=lambda r: group.index.get_loc(r.name))
        a, b = float(ra["lr"]), float(rb["lr"])
        raise ResultsError(
            f"{_at(path, ra, rb)}, column 'optimizer.lr': {a!r} and {b!r} are {steps[i]:.3g} octave "
            f"apart at the same preset, depth and family (parametrization.preset={group['preset'].iloc[0]}, "
            f"model.num_layers={group['depth'].iloc[0]}): one LR written with different precision? Write every LR "
            f"with the same digits (the analysis would fit two grid points {steps[i]:.3g} octave apart)"
        )


def check_extra_keys_split_curves(path: Path, rows: pd.DataFrame, extra_keys: list[str]) -> None:
    """Refuse an extra column that leaves every loss-vs-LR curve with one LR.

    Every column besides the contract's is a swept setting that splits the runs into families.
    A per-run record another tool writes (a wall time, a token count, a minimum LR derived from
    the LR) takes a different value for every LR, so each family would hold one LR per depth:
    no optimum anywhere, and an analysis of nothing that exits 0 (on the KJV study's rows with
    ``optimizer.min_lr = lr / 10`` every family read "consistent with transfer", CI [0, 0]).
    Refused when the runs do have two LRs at a depth without the extra columns."""
    varying = [k for k in extra_keys if rows[k].nunique(dropna=False) > 1]
    if not varying:
        return
    runs = rows.drop_duplicates("run_id")
    by_curve = [*FAMILY_KEYS, "depth"]

    def most_lrs(columns: list[str]) -> int:
        return int(runs.groupby(columns, sort=False, dropna=False)["lr"].nunique().max())

    if most_lrs([*by_curve, *extra_keys]) > 1 or most_lrs(by_curve) < 2:
        return
    culprits = [k for k in varying if most_lrs([*by_curve, k]) <= 1] or varying
    named = ", ".join(f"'{k}'" for k in culprits)
    n = len(culprits)
    raise ResultsError(
        f"{path}: column{'s' if n > 1 else ''} {named} split{'' if n > 1 else 's'} every loss-vs-LR curve into single "
        f"LRs: no two runs with the same preset, depth, width, block multiplier and {named} have different LRs "
        f"({runs[culprits[0]].nunique()} distinct values of '{culprits[0]}' over {len(runs)} runs). A column besides "
        "the contract's is read as a swept setting that defines a family; a per-run record (a time, a count, a value "
        f"derived from the LR) is none: leave it out with --ignore-columns {' '.join(culprits)}"
    )


def check_duplicates(path: Path, rows: pd.DataFrame, extra_keys: list[str]) -> None:
    """Each run has one row per eval point, and each configuration is one run.

    Two rows of one run at the same fraction (within ``FRACTION_ATOL``) would leave the
    analysis to pick one of two losses silently; one configuration (preset, depth, LR, seed,
    block multiplier, base depth, width and every other swept key) under two run IDs would be
    counted as two seeds of its cell. Either is a ``ResultsError`` naming the file, the lines
    and the key; the first duplicate is named and the others counted.
    """
    found: list[str] = []
    ordered = rows.sort_values(["run_id", "fraction", "line"], kind="stable")
    same_run = ordered["run_id"].eq(ordered["run_id"].shift())
    close = (ordered["fraction"] - ordered["fraction"].shift()).abs() <= FRACTION_ATOL
    for i in ordered.index[same_run & close]:
        prev = ordered.index[ordered.index.get_loc(i) - 1]
        a, b = sorted((rows.loc[prev], rows.loc[i]), key=lambda r: int(r["line"]))
        found.append(
            f"{_at(path, a, b)}: run {rows.at[i, 'run_id']!r} has two rows at fraction {rows.at[i, 'fraction']:g} "
            "(column 'fraction'; a run has one row per eval point)"
        )
    keys = [*CONFIG_KEYS, *extra_keys]
    runs = rows.drop_duplicates("run_id")
    runs = runs[runs.duplicated(keys, keep=False)]  # (not a Python loop over every run's group)
    for _, group in runs.groupby(keys, sort=False, dropna=False):
        first, second = group.iloc[0], group.iloc[1]
        config = ", ".join(f"{_contract_name(k)}={first[k]}" for k in keys)
        found.append(
            f"{_at(path, first, second)}: runs {first['run_id']!r} and {second['run_id']!r} "
            f"have the same configuration ({config}); one configuration under two run IDs would count as two seeds"
        )
    if found:
        more = f" (and {len(found) - 1} more duplicate(s))" if len(found) > 1 else ""
        raise ResultsError(f"{found[0]}{more}")


def _contract_name(short: str) -> str:
    for contract, name in CANONICAL_COLUMNS.items():
        if name == short:
            return contract
    return short


def read_divergence_reasons(sweep: SweepResults, run_ids: list[str]) -> dict[str, str]:
    """``summary.json`` ``reason`` of the given runs, where the run directory (beside the table
    the run's rows are in: :meth:`SweepResults.run_dir`) has one.

    Run directories are optional extras (the analysis works from ``results.csv`` alone), so a
    missing or unreadable summary is simply skipped.
    """
    reasons: dict[str, str] = {}
    for run_id in run_ids:
        summary = read_summary(sweep.run_dir(run_id))
        if summary is not None and isinstance(summary.reason, str) and summary.reason:
            reasons[run_id] = summary.reason
    return reasons


def select_runs(
    sweep: SweepResults,
    *,
    where: Sequence[tuple[str, str]] | None = None,
    depths: Sequence[int] | None = None,
    shared_base: str | None = None,
) -> SweepResults:
    """The runs an analysis compares: ``--where`` (:func:`keep_where`), then ``--depths``
    (:func:`keep_depths`), then ``--shared-base`` (:func:`share_base_depth`), each said in the
    table's warnings. The one place ``eval transfer`` and ``eval dynamics`` choose their runs, so
    the same options keep the same runs in both."""
    if where:
        sweep = keep_where(sweep, list(where))
    if depths:
        sweep = keep_depths(sweep, list(depths))
    if shared_base:
        sweep = share_base_depth(sweep, shared_base)
    return sweep


def keep_depths(sweep: SweepResults, depths: list[int]) -> SweepResults:
    """Only the rows at ``depths`` (``eval transfer --depths``); a depth that was not swept is an error."""
    swept = sorted(int(d) for d in sweep.rows["depth"].unique())
    missing = sorted(set(depths) - set(swept))
    if missing:
        raise ResultsError(
            f"{sweep.name}: --depths {missing} {_not_in(sweep, 'model.num_layers', 'depths')} (swept: {swept})"
        )
    if set(swept) <= set(depths):
        return sweep  # nothing left out (a study passes its own depths): nothing to note
    rows = sweep.rows[sweep.rows["depth"].isin(depths)].reset_index(drop=True)
    note = f"only depths {sorted(depths)} of {swept} analysed (--depths)"
    return replace(sweep, rows=rows, warnings=[*sweep.warnings, note])


def keep_where(sweep: SweepResults, conditions: list[tuple[str, str]]) -> SweepResults:
    """Only the rows whose column KEY holds VALUE, for each ``(KEY, VALUE)`` (``eval transfer
    --where``): one variant of a study that swept several, e.g. ``model.block=linear1``. Values
    match as text, or as numbers where both parse (``0.5`` is ``0.50``); a key that is not a
    column, or a value no row holds, is an error naming the values there are."""
    rows = sweep.rows
    for key, value in conditions:
        column = CANONICAL_COLUMNS.get(key, key)
        if column not in CONFIG_KEYS and column not in sweep.extra_keys:
            columns = [*CANONICAL_COLUMNS, *sweep.extra_keys]
            raise ResultsError(f"{sweep.name}: --where {key}={value}: no column {key!r} (columns: {columns})")
        cells = rows[column]
        hit = cells.map(lambda cell, value=value: _same_value(cell, value))
        if not hit.any():
            held = sorted({str(cell) for cell in cells})
            raise ResultsError(f"{sweep.name}: --where {key}={value}: no row has it (column {key!r} holds {held})")
        rows = rows[hit]
    text = " ".join(f"{key}={value}" for key, value in conditions)
    note = f"only rows with {text} analysed (--where)"
    return replace(sweep, rows=rows.reset_index(drop=True), warnings=[*sweep.warnings, note])


def _same_value(cell: object, value: str) -> bool:
    text = str(cell).strip()
    if text == value.strip():
        return True
    try:
        return math.isclose(float(text), float(value), rel_tol=1e-9)
    except ValueError:
        return False


def share_base_depth(sweep: SweepResults, source: str) -> SweepResults:
    """Use ``source``'s runs at the base depth for every other preset, and say so.

    At ``L = L0`` every preset is the same model (``patches`` reduces to unpatched megatron
    there, tested bit-identical), so a sweep may train the base depth once. Sharing happens
    within each combination of the other swept keys (e.g. ``model.block``): a preset's runs
    get the ``source`` base runs with the same values. The keys of
    :data:`rundir.contract.PARAMETRIZATION_KEYS` (preset custom's alpha and gamma) are part of
    what a preset is, not such a combination: a family of preset custom gets the base runs with
    its own alpha and gamma, and so does one of ``source`` itself (another custom arm) that has
    no base-depth runs. The shared rows get run IDs ``<id>@<preset>`` (``@<preset>[alpha=..,
    gamma=..]`` where those keys are swept); families that have their own base-depth rows keep them.
    """
    rows = sweep.rows
    extra = list(sweep.extra_keys)
    arm_keys = [k for k in extra if k in PARAMETRIZATION_KEYS]
    combo_keys = [k for k in extra if k not in PARAMETRIZATION_KEYS]

    def groups(frame: pd.DataFrame, keys: list[str]) -> dict[tuple, pd.DataFrame]:
        if not keys:
            return {(): frame}
        return {(k if isinstance(k, tuple) else (k,)): g for k, g in frame.groupby(keys, sort=True, dropna=False)}

    source_base = rows[(rows["preset"] == source) & (rows["depth"] == rows["base_depth"])]
    if source_base.empty:
        raise ResultsError(f"{sweep.name}: --shared-base {source}: no rows of preset {source!r} at its base depth")
    at_base = groups(source_base, combo_keys)
    copies, shared = [], []
    for family, mine in groups(rows, ["preset", *arm_keys, *combo_keys]).items():
        preset, arm, values = family[0], family[1 : 1 + len(arm_keys)], family[1 + len(arm_keys) :]
        if (mine["depth"] == mine["base_depth"]).any():
            continue
        base = at_base.get(values)
        if preset == source and (not arm_keys or base is None):
            continue  # the source's own runs (as ever: a combination it lacks at L0 is not looked for)
        where = f" with {dict(zip(combo_keys, values))}" if combo_keys else ""
        if base is None:
            raise ResultsError(f"{sweep.name}: --shared-base {source}: no base-depth rows of {source!r}{where}")
        lenders = groups(base, arm_keys)
        if len(lenders) > 1:
            raise ResultsError(
                f"{sweep.name}: --shared-base {source}: base-depth rows of {source!r}{where} with several values of "
                f"{arm_keys} ({sorted(lenders)}): which of them stands for {preset!r} {dict(zip(arm_keys, arm))} "
                "is ambiguous; give each such family its own base-depth runs, or keep one set"
            )
        bases = set(mine["base_depth"])
        if bases != set(base["base_depth"]):
            raise ResultsError(
                f"{sweep.name}: --shared-base {source}: preset {preset!r}{where} has base depth(s) {sorted(bases)}, "
                f"{source!r} {sorted(set(base['base_depth']))}; only the same base shape can be shared"
            )
        tag = ",".join(f"{k.split('.')[-1]}={v}" for k, v in zip(arm_keys, arm))
        name = preset + (f"[{tag}]" if arm_keys else "")
        copy = base.copy()
        copy["preset"] = preset
        for k, v in zip(arm_keys, arm):
            copy[k] = v
        copy["run_id"] = copy["run_id"] + "@" + name
        copy["shared_copy"] = True  # counted once, as the run it copies (eval.curves.CurveSet.n_shared)
        copies.append(copy)
        shared.append(name + (f" ({', '.join(map(str, values))})" if combo_keys else ""))
    if not copies:
        return sweep
    note = (
        f"base depth shared: the runs of {source!r} at L = L0 also stand for {', '.join(map(repr, shared))} "
        "(at the base shape every preset is the same model)"
    )
    merged = pd.concat([rows, *copies], ignore_index=True)
    return replace(sweep, rows=merged, warnings=[*sweep.warnings, note])

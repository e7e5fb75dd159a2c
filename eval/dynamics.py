"""Training dynamics across depth from ``diagnostics.jsonl``: measured exponents against the
ones the resolved parametrization predicts.

Quantities, per run and logged step (means over a block's parameters of the role, or over
the block for activations):

* ``update_ratio``: RMS(update) / RMS(weight) of the hidden matrices (roles ``hidden_in``,
  ``hidden_out``). TP-VI: ~ L^-gamma (Depth-muP: L^-1/2; SP: L^0).
* ``update_rms``: RMS(update) of the hidden matrices.
* ``branch_rms``: RMS of each block's attention and MLP branch outputs after the multiplier
  on the probe batch (~ L^-1/2 at init under both Megatron's SP init and Depth-muP).
* ``residual_rms``: RMS of the residual stream after each block (flat in depth when the
  parametrization is right).

Runs are compared within a *family*, as ``eval transfer`` compares them (:mod:`eval.curves`
owns what a family is, its label and its place in the report): the runs that differ only in
depth, LR and seed. A sweep's ``results.csv`` gives each run's swept keys (a WSD cooldown
sweep's ``branch_of.step``, ``scheduler.wsd_decay_steps``, ``optimizer.min_lr_ratio``; a custom
arm's ``parametrization.alpha`` / ``gamma``); a run directory given without one is read from its
``summary.json`` and ``parametrization.json`` (preset, width, block multiplier, a custom arm's
alpha and gamma, a branch's step).

The runs analysed per family and depth are those at ``eval transfer``'s best grid LR at the
end of training (:func:`eval.transfer.best_grid_lrs`, from the same rows), not a choice of its own.

Exponent of a quantity against depth: least squares of the per-depth mean of log q (over
the runs' blocks and seeds) against log L; its 95% CI from a bootstrap that resamples the
runs of each depth (seeds) and the blocks of each run (layers). Expected exponents come from
each run's ``parametrization.json`` at initialization / the first steps: Adam's update per
entry is its LR, so ``update_ratio`` ~ lr_factor / init_std of ``hidden_in``; SGD's update
is LR x gradient, which carries the branch multiplier once more; a branch output is the
multiplier x a ``hidden_out`` matrix at its init std; the stream is O(1) by construction.
Later in training the measured exponents may leave these, which is what the check shows.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from eval.curves import Family, build_families, family_columns
from eval.outputs import number
from eval.results import (
    CONFIG_KEYS,
    FAMILY_KEYS,
    FRACTION_ATOL,
    ResultsError,
    SweepResults,
    check_presets,
    read_results,
    select_runs,
    sources_text,
)
from eval.transfer import best_grid_lrs
from rundir.contract import BRANCH_STEP_COLUMN, PARAMETRIZATION_KEYS, RESULT_STATUSES, Status
from rundir.files import (
    DIAGNOSTICS_FILE,
    INHERITED_FROM,
    PARAMETRIZATION_FILE,
    RunDirError,
    RunSummary,
    branch_source,
    locate_runs,
    read_diagnostics_with_source,
    read_summary,
)

QUANTITIES = ("update_ratio", "update_rms", "branch_rms", "residual_rms")
HIDDEN_ROLES = ("hidden_in", "hidden_out")


class DynamicsError(ValueError):
    """No usable diagnostics (the message names the directory or run)."""


@dataclass
class RunDynamics:
    run_dir: Path
    preset: str
    num_layers: int
    lr: float
    seed: int
    final_val_loss: Optional[float]
    table: dict[str, Any]
    steps: list[int]
    per_layer: dict[str, dict[int, dict[int, float]]]  # quantity -> step -> layer -> value
    branch_step: Optional[int] = None  # a cooldown branch's step: its own rows start after it
    inherited_steps: frozenset[int] = field(default_factory=frozenset)  # steps whose rows are its source's
    summary_keys: dict[str, Any] = field(default_factory=dict)  # its family columns, where no results.csv has it
    status: str = "completed"  # summary.json's, where no results.csv has it
    family: Optional[Family] = None  # set by find_runs (eval.curves: the family eval transfer puts it in)
    shared: bool = False  # another preset's base-depth run standing for this one (--shared-base)
    best_lr: Optional[float] = None  # set by find_runs: eval transfer's best grid LR at its family and depth

    @property
    def label(self) -> str:
        return self.family.label if self.family else self.preset


def _per_layer(rows: list[dict[str, Any]]) -> dict[str, dict[int, dict[int, float]]]:
    acc: dict[str, dict[int, dict[int, list[float]]]] = {q: {} for q in QUANTITIES}

    def add(q: str, step: int, layer: int, value: Any) -> None:
        if isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            acc[q].setdefault(step, {}).setdefault(layer, []).append(float(value))

    for r in rows:
        layer = r.get("layer")
        if layer is None:
            continue
        if r.get("role") in HIDDEN_ROLES:
            add("update_ratio", r["step"], layer, r.get("update_ratio"))
            add("update_rms", r["step"], layer, r.get("update_rms"))
        elif r.get("kind") in ("attention_branch", "mlp_branch"):
            add("branch_rms", r["step"], layer, r.get("rms"))
        elif r.get("kind") == "residual":
            add("residual_rms", r["step"], layer, r.get("rms"))
    return {
        q: {s: {layer: float(np.mean(v)) for layer, v in by_layer.items()} for s, by_layer in steps.items()}
        for q, steps in acc.items()
    }


def load_run(run_dir: Path, in_table: bool = False) -> Optional[RunDynamics]:
    """A run's diagnostics and identity; None when it has no diagnostics rows. ``in_table``: its
    sweep's results.csv has its row (its LR, seed and loss come from there: ``summary.json`` may be absent)."""
    summary = read_summary(run_dir)  # read once: the join and the branch step below take it
    try:  # a branch's rows start after its branch step: its source's come first (rundir.files owns the join)
        rows = read_diagnostics_with_source(run_dir, summary=summary)
    except RunDirError as exc:
        raise DynamicsError(str(exc)) from None
    if not any(INHERITED_FROM not in r for r in rows):
        return None
    table_path = run_dir / PARAMETRIZATION_FILE
    if (summary is None and not in_table) or not table_path.is_file():
        raise DynamicsError(f"{run_dir}: diagnostics without summary.json or {PARAMETRIZATION_FILE}")
    source = branch_source(run_dir, None, summary=summary) if summary is not None else None
    table = json.loads(table_path.read_text())
    if summary is None:  # its row of results.csv says the rest (assign_families)
        summary = RunSummary(status=Status.COMPLETED)
    preset = summary.preset or table["preset"]
    branch_step = int(source["step"]) if source and source.get("step") is not None else None
    keys: dict[str, Any] = {"hidden_size": summary.hidden_size, "block_multiplier": summary.block_multiplier}
    if preset == "custom":  # its alpha and gamma are which parametrization it is (results.csv's columns)
        keys.update({k: table.get(k.split(".")[-1]) for k in PARAMETRIZATION_KEYS})
    if branch_step is not None:
        keys[BRANCH_STEP_COLUMN] = branch_step
    return RunDynamics(
        run_dir=run_dir,
        preset=preset,
        num_layers=summary.num_layers or table["num_layers"],
        lr=summary.lr or 0.0,
        seed=summary.seed or 0,
        final_val_loss=summary.final_val_loss,
        table=table,
        steps=sorted({r["step"] for r in rows}),
        per_layer=_per_layer(rows),
        branch_step=branch_step,
        inherited_steps=frozenset(r["step"] for r in rows if INHERITED_FROM in r),
        summary_keys={**keys, "base_depth": summary.base_num_layers or table.get("base_num_layers")},
        status=str(Status(summary.status).value),
    )


def find_runs(
    paths: list[Path],
    where: Optional[list[tuple[str, str]]] = None,
    ignore_columns: tuple[str, ...] = (),
    *,
    depths: Optional[list[int]] = None,
    shared_base: Optional[str] = None,
    presets: Optional[list[str]] = None,
    notes: Optional[list[str]] = None,
) -> list[RunDynamics]:
    """Runs with diagnostics under each path (a run directory, or a sweep's ``runs/``), each
    with its family (:func:`assign_families`); ``where``, ``depths`` and ``shared_base`` choose the
    runs as ``eval transfer``'s ``--where``, ``--depths`` and ``--shared-base`` do
    (``eval.results.select_runs``). What was left out, and why, is appended to ``notes``."""
    runs: list[RunDynamics] = []
    tables: dict[Path, Path] = {}  # a run directory -> the results.csv of its sweep
    found_at = [locate_runs(path) for path in paths]  # the one reading of a path (rundir.files)
    for at in found_at:
        if at.kind == "none":
            raise DynamicsError(at.describe())
        table = at.table if at.kind != "run" else None  # a run directory given alone: its summary.json
        found = [r for r in (load_run(d, table is not None) for d in at.runs) if r is not None]
        if table is not None:
            tables.update({r.run_dir.resolve(): table for r in found})
        if (
            at.kind == "runs" and notes is not None
        ):  # a folder of runs: say which sweep's table, if any, it was read with
            notes.append(f"read {at.describe()}")
        runs += found
    if not runs:
        summaries = [read_summary(d) for at in found_at for d in at.runs]
        statuses = [str(Status(s.status).value) if s is not None else "" for s in summaries]
        raise DynamicsError(
            "; ".join(at.describe() for at in found_at)
            + f": no run has {DIAGNOSTICS_FILE} rows"
            + (f" ({_quiet_text(statuses)})" if statuses else "")
        )
    return assign_families(runs, tables, where or [], ignore_columns, depths=depths, shared_base=shared_base,
                           presets=presets, notes=notes)  # fmt: skip


def _quiet_text(statuses: list[str]) -> str:
    """What runs without diagnostics rows are, by their status: ``3 diverged before their first
    diagnostics row; 1 pending``. A diverged run is named as one, apart from a run that trained without
    ``logging.diagnostics_interval`` (or ended, not diverged, before its first diagnostics step)."""

    def their(n: int) -> str:
        return "its" if n == 1 else "their"

    diverged = statuses.count(Status.DIVERGED.value)
    pending = statuses.count("pending")
    rest = len(statuses) - diverged - pending
    parts = [
        f"{diverged} diverged before {their(diverged)} first diagnostics row" if diverged else "",
        f"{pending} pending" if pending else "",
        f"{rest} trained without logging.diagnostics_interval, or ended before {their(rest)} first diagnostics step"
        if rest
        else "",
    ]
    return "; ".join(p for p in parts if p)


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) and value.is_integer() else str(value)


def assign_families(
    runs: list[RunDynamics],
    tables: dict[Path, Path],
    where: list[tuple[str, str]],
    ignore_columns: tuple[str, ...],
    *,
    depths: Optional[list[int]] = None,
    shared_base: Optional[str] = None,
    presets: Optional[list[str]] = None,
    notes: Optional[list[str]] = None,
) -> list[RunDynamics]:
    """Each run's family, made by ``eval.curves.build_families`` from the rows ``eval transfer``
    reads: a sweep's whole ``results.csv`` (its runs without diagnostics too, so that the labels
    are transfer's), a run directory given alone from its summary. The runs ``select_runs`` leaves
    out are dropped; a base-depth run that ``shared_base`` lends to another preset comes back once
    more, as that preset's. ``notes`` gets what was left out and why."""
    notes = notes if notes is not None else []
    index_of = {r.run_dir.resolve(): i for i, r in enumerate(runs)}
    frames: list[pd.DataFrame] = []
    extra: list[str] = []
    name, warnings, files = "the run directories given", [], ()
    if tables:
        try:
            sweep = read_results(list(dict.fromkeys(tables.values())), ignore_columns=ignore_columns)
        except ResultsError as exc:
            raise DynamicsError(str(exc)) from None
        name, extra, warnings, files = sweep.name, list(sweep.extra_keys), sweep.warnings, sweep.paths
        table = sweep.rows.reset_index(drop=True)  # every fraction's row: the best LR is chosen at the end
        dirs = [sweep.run_dir(rid).resolve() for rid in table["run_id"]]
        table["index"] = [index_of.get(d, -1) for d in dirs]
        missing = sorted(set(tables) - set(dirs))
        if missing:
            raise DynamicsError(
                f"{missing[0]}: has diagnostics but no row in {tables[missing[0]]} (run `python -m launch "
                "status SWEEP_DIR` to write it again)"
            )
        frames.append(table)
    elif ignore_columns:
        raise DynamicsError(f"--ignore-columns {list(ignore_columns)}: no results.csv among the paths given")
    alone = [r for r in runs if r.run_dir.resolve() not in tables]
    if alone:  # run directories given alone: their summaries' keys
        own = [{"run_id": str(r.run_dir), "preset": r.preset, "depth": r.num_layers, "lr": r.lr, "seed": r.seed,
                **r.summary_keys} for r in alone]  # fmt: skip
        # the row eval transfer would read at the end of training: summary.json's final loss and status
        final = [{"status": _result_status(r.status), "step": math.nan, "fraction": 1.0,
                  "val_loss": _finite(r.final_val_loss), "val_loss_recorded": r.final_val_loss is not None}
                 for r in alone]  # fmt: skip
        extra += [k for k in dict.fromkeys(k for rec in own for k in rec) if k not in (*CONFIG_KEYS, "run_id", *extra)]
        frame = pd.DataFrame(own)
        for k in extra:
            frame[k] = [_text(v) for v in frame[k]] if k in frame else ""
        frame = pd.concat([frame, pd.DataFrame(final)], axis=1)
        frame["index"] = [index_of[r.run_dir.resolve()] for r in alone]
        frames.append(frame)
    rows = pd.concat(frames, ignore_index=True)
    for k in [*FAMILY_KEYS, *extra]:  # as text (a column a lone run's summary lacks: empty), keys as labels write them
        rows[k] = [_text(v) for v in rows[k]]
    try:
        if alone:  # rows of run directories given alone: messages name where their values come from
            name = (
                f"{name} and {len(alone)} run director{'y' if len(alone) == 1 else 'ies'} given alone"
                if tables
                else name
            )
            read_from = "their summary.json files" if not tables else "results.csv and the runs' summary.json"
        whole = SweepResults(path=Path(name), rows=rows, extra_keys=extra, warnings=warnings, paths=files,
                             read_from=read_from if alone else None)  # fmt: skip
        chosen = select_runs(whole, where=where, depths=depths, shared_base=shared_base)
        check_presets(chosen, presets)
    except ResultsError as exc:
        raise DynamicsError(str(exc)) from None
    if tables and len(chosen.files) > 1:
        notes.append(sources_text(chosen.runs_per_file()))  # as eval transfer says it
    notes += chosen.warnings
    kept = chosen.rows.drop_duplicates("run_id")
    quiet = kept[kept["index"] < 0]
    if len(quiet):
        notes.append(
            f"{len(quiet)} of {len(kept)} runs have no diagnostics rows and were left out "
            f"({_quiet_text(quiet['status'].tolist())})"
        )
    columns = family_columns(chosen)
    families = build_families(kept, columns)
    final = max(chosen.recorded_fractions())  # the end of training (1.0 wherever the table records it)
    if final < 1.0 - FRACTION_ATOL:
        notes.append(f"no row at fraction 1 in {name}: the best LR is chosen at fraction {final:g}, the last recorded")
    best = best_grid_lrs(chosen, final)  # eval transfer's choice: one owner
    out = []
    for values, members in kept.groupby(columns, sort=True, dropna=False):  # as build_families keys them
        family = families[values if isinstance(values, tuple) else (values,)]
        for _, row in members[members["index"] >= 0].iterrows():
            run = runs[row["index"]]  # its row's LR, seed and depth: what eval transfer reads
            run = replace(run, lr=float(row["lr"]), seed=int(row["seed"]), num_layers=int(row["depth"]), family=family,
                          best_lr=best.get((family, int(row["depth"]))))  # fmt: skip
            if row.get("shared_copy") is True:
                run = replace(run, preset=str(row["preset"]), shared=True)
            out.append(run)
    return out


def _finite(value: Optional[float]) -> float:
    return float(value) if value is not None and math.isfinite(value) else math.nan


def _result_status(status: str) -> str:
    """A summary's status as results.csv says it (launch status: a run not ended is pending)."""
    return status if status in RESULT_STATUSES else Status.PENDING.value


def select(
    runs: list[RunDynamics],
    lr: Optional[float] = None,
    presets: Optional[list[str]] = None,
    notes: Optional[list[str]] = None,
) -> list[RunDynamics]:
    """Per (family, depth): every seed at ``lr`` (nearest in log2), or at ``eval transfer``'s best
    grid LR at the end of training (each run's ``best_lr``: :func:`eval.transfer.best_grid_lrs`,
    the lowest seed-mean final validation loss, seeds that diverged counted as transfer counts
    them). ``presets``: only these presets' families (as ``eval transfer --presets``). A family and
    depth whose best LR has no runs with diagnostics is left out and said in ``notes``."""
    if presets:  # checked against the table by find_runs (eval.results.check_presets, as eval transfer)
        runs = [r for r in runs if r.preset in presets]
    groups: dict[tuple[Optional[Family], int], list[RunDynamics]] = {}
    for r in runs:
        groups.setdefault((r.family, r.num_layers), []).append(r)
    chosen = []
    for members in groups.values():
        by_lr: dict[float, list[RunDynamics]] = {}
        for r in members:
            by_lr.setdefault(r.lr, []).append(r)
        if lr is not None:
            best = min(by_lr, key=lambda x: abs(math.log2(x / lr)) if x > 0 else math.inf)
        else:
            first = members[0]
            best = next((x for x in by_lr if first.best_lr and math.isclose(x, first.best_lr, rel_tol=1e-9)), None)
            if best is None:
                where = f"{first.label} L={first.num_layers}"
                why = (f"its best LR {first.best_lr:g} has no runs with diagnostics" if first.best_lr
                       else "no LR has a usable final validation loss")  # fmt: skip
                if notes is not None:
                    notes.append(f"{where} left out: {why}")
                continue
        chosen += by_lr[best]
    return sorted(chosen, key=lambda r: (_family_order(r), r.num_layers, r.seed))


def _family_order(run: RunDynamics) -> tuple:
    return run.family.sort_key() if run.family else ((2, run.preset),)


def _step_at(run: RunDynamics, fraction: float) -> int:
    """The logged step nearest to ``fraction`` of the run's last logged step."""
    target = fraction * run.steps[-1]
    return min(run.steps, key=lambda s: abs(s - target))


def expected_exponent(quantity: str, runs: list[RunDynamics]) -> Optional[float]:
    """The exponent against depth the resolved tables predict (see the module docstring)."""
    xs, ys = [], []
    for r in runs:
        t = r.table
        roles = t["roles"]
        if quantity in ("update_ratio", "update_rms"):
            value = roles["hidden_in"]["lr_factor"]
            if t.get("optimizer_family") == "sgd":
                value *= t["branch_multiplier"]
            if quantity == "update_ratio":
                value /= roles["hidden_in"]["init_std"]
        elif quantity == "branch_rms":
            value = t["branch_multiplier"] * roles["hidden_out"]["init_std"]
        else:
            value = 1.0
        xs.append(math.log(r.num_layers))
        ys.append(math.log(value))
    if len(set(xs)) < 2:
        return None
    return round(float(np.polyfit(xs, ys, 1)[0]), 12) + 0.0  # a rational exponent: no -1e-17 printed as -0.000


def _fit(values: dict[int, list[np.ndarray]]) -> float:
    depths = sorted(values)
    means = [float(np.mean(np.concatenate(values[d]))) for d in depths]
    return float(np.polyfit(np.log(depths), means, 1)[0])


def exponent(
    quantity: str, runs: list[RunDynamics], fraction: float, n_boot: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Measured exponent of ``quantity`` against depth at ``fraction`` of training, with CI."""
    per_depth: dict[int, list[np.ndarray]] = {}
    from_source = absent = 0
    for r in runs:
        step = _step_at(r, fraction)
        if r.branch_step is not None and fraction * r.steps[-1] <= r.branch_step:
            if not r.inherited_steps:  # a source without diagnostics: nothing before the branch step
                absent += 1
                continue
            from_source += step in r.inherited_steps
        layers = r.per_layer[quantity].get(step, {})
        if layers:
            per_depth.setdefault(r.num_layers, []).append(np.log(np.array(list(layers.values()))))
    out: dict[str, Any] = {"quantity": quantity, "fraction": fraction, "depths": sorted(per_depth)}
    # branches: runs whose rows at this fraction are their source's (before the branch step), and
    # runs left out because their source logged no diagnostics there
    out.update(runs_from_source=from_source, runs_absent_before_branch=absent)
    out["expected"] = expected_exponent(quantity, runs)
    if len(per_depth) < 2:
        out.update(value=None, ci=None, note="needs two depths with rows")
        return out
    out["value"] = _fit(per_depth)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        sample = {}
        for d, run_values in per_depth.items():
            picked = [run_values[i] for i in rng.integers(0, len(run_values), len(run_values))]
            sample[d] = [v[rng.integers(0, len(v), len(v))] for v in picked]
        boots.append(_fit(sample))
    lo, hi = np.percentile(boots, [2.5, 97.5])
    out["ci"] = [float(lo), float(hi)]
    out["runs_per_depth"] = {str(d): len(v) for d, v in per_depth.items()}
    return out


def analyse(runs: list[RunDynamics], fractions: list[float], n_boot: int = 1000) -> dict[str, Any]:
    """Exponents per family (in ``eval transfer``'s order, with its labels), quantity and
    fraction; the per-step series (mean over blocks and seeds) per family and depth for the figures."""
    ordered = sorted({r.label: r for r in runs}.values(), key=_family_order)
    families = [r.label for r in ordered]
    result: dict[str, Any] = {
        "families": families,
        "presets": list(dict.fromkeys(r.preset for r in ordered)),
        "fractions": fractions,
        "exponents": [],
        "series": {},  # family -> quantity -> depth -> steps, values, source_steps (a branch's source's rows)
        "branch_steps": {},  # family -> its branch step (None: not a cooldown branch)
    }
    for first in ordered:
        mine = [r for r in runs if r.label == first.label]
        tag = {"family": first.label, "preset": first.preset, "keys": first.family.key_dict() if first.family else {}}
        for quantity in QUANTITIES:
            for fraction in fractions:
                result["exponents"].append({**tag, **exponent(quantity, mine, fraction, n_boot)})
        series: dict[str, dict[str, dict[str, list]]] = {}
        for depth in sorted({r.num_layers for r in mine}):
            at_depth = [r for r in mine if r.num_layers == depth]
            for quantity in QUANTITIES:
                steps = sorted({s for r in at_depth for s in r.per_layer[quantity]})
                ys = [float(np.exp(np.mean([np.log(v) for r in at_depth
                                             for v in r.per_layer[quantity].get(s, {}).values()])))
                      for s in steps]  # fmt: skip
                inherited = [s for s in steps if any(s in r.inherited_steps for r in at_depth)]
                series.setdefault(quantity, {})[str(depth)] = {"steps": steps, "values": ys, "source_steps": inherited}
        result["series"][first.label] = series
        result["branch_steps"][first.label] = first.branch_step  # the same for a family (a column of it)
    result["runs"] = [
        {"run_dir": str(r.run_dir), "family": r.label, "preset": r.preset, "num_layers": r.num_layers, "lr": r.lr,
         "seed": r.seed, **({"shared_base": True} if r.shared else {})}
        for r in runs
    ]  # fmt: skip
    return result


def markdown(result: dict[str, Any]) -> str:
    """The exponent table: measured [95% CI] next to expected, per family, quantity, fraction."""
    lines = [
        "| family | quantity | fraction | exponent vs depth [95% CI] | expected (init / first steps) | depths |",
        "|---|---|---|---|---|---|",
    ]
    for e in result["exponents"]:
        measured = "-" if e["value"] is None else (f"{number(e['value'], '+.3f')} "
                                                   f"[{number(e['ci'][0], '+.3f')}, {number(e['ci'][1], '+.3f')}]")  # fmt: skip
        expected = "-" if e["expected"] is None else number(e["expected"], "+.3f")
        lines.append(
            f"| {e['family']} | {e['quantity']} | {e['fraction']:g} | {measured} | {expected} | "
            f"{', '.join(map(str, e['depths']))} |"
        )
    notes = {}
    for e in result["exponents"]:  # the same for every quantity of a family and fraction
        said = []
        if e.get("runs_from_source"):
            said.append(f"{e['runs_from_source']} run(s) are cooldown branches whose rows there are their source's "
                        "(before the branch step)")  # fmt: skip
        if e.get("runs_absent_before_branch"):
            said.append(f"{e['runs_absent_before_branch']} branch run(s) are left out: their source logged no "
                        "diagnostics before the branch step")  # fmt: skip
        if said:
            notes.setdefault(f"{e['family']} at fraction {e['fraction']:g}: " + "; ".join(said), None)
    said = [*notes, *(n.rstrip(".") for n in result.get("notes", []))]  # then what the selection left out
    return "\n".join(lines) + "\n" + "".join(f"\n{n}." for n in said) + ("\n" if said else "")

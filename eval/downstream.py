"""Downstream scores of a sweep's runs (``lm_eval.json``, written by ``python -m eval lm-eval``).

``eval transfer`` calls :func:`write_downstream` when any run has scores: ``downstream.csv``
holds one row per run (its final validation loss and one column per ``task/metric``), and
``downstream.md`` compares, per preset and depth, the LR a sweep would pick by validation
loss with the LR it would pick by each downstream metric (seed means). Runs without scores
are listed as such, never imputed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Optional

import pandas as pd

from jobscripts.atomic import atomic_write_text
from rundir.contract import RUNS_DIR
from rundir.files import LM_EVAL_FILE

KEYS = ["preset", "depth", "lr", "seed"]


def read_scores(sweep_dir: Path | Callable[[str], Path], run_ids: list[str]) -> tuple[pd.DataFrame, dict[str, bool]]:
    """One row per run with scores (run_id and a ``task/metric`` column per score), and for each
    ``task/metric`` whether higher is better, as lm-eval says (``higher_is_better`` in
    lm_eval.json; absent from files written before it was kept, and for lm-eval groups whose
    tasks disagree). ``sweep_dir``: the sweep directory, or each run's directory by its ID
    (tables of several sweeps: ``SweepResults.run_dir``)."""
    run_dir = sweep_dir if callable(sweep_dir) else (lambda run_id: sweep_dir / RUNS_DIR / run_id)
    rows = []
    higher: dict[str, bool] = {}
    for run_id in run_ids:
        path = run_dir(run_id) / LM_EVAL_FILE
        if not path.is_file():
            continue
        try:
            record = json.loads(path.read_text())
            tasks = record["tasks"]
            directions = record.get("higher_is_better") or {}
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path}: not an lm-eval result of this toolkit: {exc}") from exc
        row = {"run_id": run_id}
        for task, metrics in tasks.items():
            for metric, value in metrics.items():
                if metric != "sample_len":
                    row[f"{task}/{metric}"] = float(value) if value not in (None, "N/A") else math.nan
            for metric, up in (directions.get(task) or {}).items():
                if isinstance(up, bool):
                    higher[f"{task}/{metric}"] = up
        rows.append(row)
    return pd.DataFrame(rows), higher


def per_run_table(final: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """The final eval of every run with its downstream columns (NaN where a run has none)."""
    base = final[["run_id", *KEYS, "status", "val_loss"]]
    return base.merge(scores, on="run_id", how="left").sort_values([*KEYS, "run_id"])


def choices(table: pd.DataFrame, metric: str, higher_is_better: bool = True) -> pd.DataFrame:
    """Per (preset, depth): the LR with the lowest mean val loss and the LR with the best mean
    ``metric`` (highest, or lowest for a metric where lower is better), over the runs that have
    both. LRs tied at the best metric (a small task's accuracies often are) pick the one nearest
    the val-loss LR in octaves; ``lrs_at_best_metric`` counts them."""
    have = table.dropna(subset=[metric, "val_loss"])
    out = []
    for (preset, depth), group in have.groupby(["preset", "depth"]):
        means = group.groupby("lr").agg(val_loss=("val_loss", "mean"), score=(metric, "mean"), seeds=("seed", "count"))
        by_loss = means["val_loss"].idxmin()
        best = means["score"].max() if higher_is_better else means["score"].min()
        tied = means.index[means["score"] == best]
        by_score = min(tied, key=lambda lr: (abs(math.log2(lr / by_loss)), lr))
        out.append(
            {
                "preset": preset,
                "depth": int(depth),
                "metric": metric,
                "lr_by_val_loss": by_loss,
                "lr_by_metric": by_score,
                "octaves_apart": math.log2(by_score / by_loss),
                "metric_at_lr_by_val_loss": means.loc[by_loss, "score"],
                "best_metric": means.loc[by_score, "score"],
                "lrs_at_best_metric": len(tied),
                "lrs": len(means),
                "seeds_per_lr": int(means["seeds"].min()),
            }
        )
    return pd.DataFrame(out)


def write_downstream(sweep, out: Path) -> Optional[Path]:
    """Write downstream.csv and downstream.md under ``out`` when any run has scores."""
    rows = sweep.rows
    final = rows.sort_values("fraction").groupby("run_id").tail(1)
    scores, higher = read_scores(sweep.run_dir, sorted(final["run_id"].unique()))
    if scores.empty:
        return None
    table = per_run_table(final, scores)
    atomic_write_text(out / "downstream.csv", table.to_csv(index=False))
    metrics = [c for c in scores.columns if c != "run_id" and not c.endswith("_stderr")]
    lines = [
        "# Downstream scores",
        "",
        f"{len(scores)} of {final['run_id'].nunique()} runs have lm-eval scores (per-run values: downstream.csv).",
        "Per preset and depth: the LR chosen by final validation loss and the LR chosen by each metric "
        "(means over seeds; a small task's scores are noisy: see each metric's _stderr column). "
        "LRs tied at a metric's best pick the one nearest the val-loss LR (lrs_at_best_metric counts them).",
        "",
    ]
    for metric in metrics:
        up = higher.get(metric)
        picked = choices(table, metric, higher_is_better=up is not False)
        if picked.empty:
            continue
        direction = {True: "higher is better", False: "lower is better"}.get(
            up, "direction not recorded in lm_eval.json: higher taken as better"
        )
        lines += [f"## {metric} ({direction})", "", picked.to_markdown(index=False, floatfmt=".4g"), ""]
    path = out / "downstream.md"
    atomic_write_text(path, "\n".join(lines))
    return path

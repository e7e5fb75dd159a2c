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
from pathlib import Path
from typing import Optional

import pandas as pd

from jobscripts.atomic import atomic_write_text
from rundir.contract import RUNS_DIR
from rundir.files import LM_EVAL_FILE

KEYS = ["preset", "depth", "lr", "seed"]


def read_scores(sweep_dir: Path, run_ids: list[str]) -> pd.DataFrame:
    """One row per run with scores: run_id and a ``task/metric`` column per score."""
    rows = []
    for run_id in run_ids:
        path = sweep_dir / RUNS_DIR / run_id / LM_EVAL_FILE
        if not path.is_file():
            continue
        try:
            tasks = json.loads(path.read_text())["tasks"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not an lm-eval result of this toolkit: {exc}") from exc
        row = {"run_id": run_id}
        for task, metrics in tasks.items():
            for metric, value in metrics.items():
                if metric != "sample_len":
                    row[f"{task}/{metric}"] = float(value) if value not in (None, "N/A") else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def per_run_table(final: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """The final eval of every run with its downstream columns (NaN where a run has none)."""
    base = final[["run_id", *KEYS, "status", "val_loss"]]
    return base.merge(scores, on="run_id", how="left").sort_values([*KEYS, "run_id"])


def choices(table: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per (preset, depth): the LR with the lowest mean val loss and the LR with the highest
    mean ``metric``, over the runs that have both."""
    have = table.dropna(subset=[metric, "val_loss"])
    out = []
    for (preset, depth), group in have.groupby(["preset", "depth"]):
        means = group.groupby("lr").agg(val_loss=("val_loss", "mean"), score=(metric, "mean"), seeds=("seed", "count"))
        by_loss, by_score = means["val_loss"].idxmin(), means["score"].idxmax()
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
                "lrs": len(means),
                "seeds_per_lr": int(means["seeds"].min()),
            }
        )
    return pd.DataFrame(out)


def write_downstream(sweep, out: Path) -> Optional[Path]:
    """Write downstream.csv and downstream.md under ``out`` when any run has scores."""
    rows = sweep.rows
    final = rows.sort_values("fraction").groupby("run_id").tail(1)
    scores = read_scores(sweep.sweep_dir, sorted(final["run_id"].unique()))
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
        "(means over seeds; a small task's scores are noisy: see each metric's _stderr column).",
        "",
    ]
    for metric in metrics:
        picked = choices(table, metric)
        if picked.empty:
            continue
        lines += [f"## {metric}", "", picked.to_markdown(index=False, floatfmt=".4g"), ""]
    path = out / "downstream.md"
    atomic_write_text(path, "\n".join(lines))
    return path

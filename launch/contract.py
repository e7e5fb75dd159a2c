"""Names fixed by docs/contracts.md that launch reads or writes (run dirs, results.csv)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
LOCK_FILE = ".lock"

# results.csv: run_id, these keys (always), other swept keys (sorted), then the tail.
CANONICAL_KEYS: tuple[str, ...] = (
    "parametrization.preset",
    "model.num_layers",
    "optimizer.lr",
    "run.seed",
    "parametrization.block_multiplier",
    "parametrization.base_num_layers",
    "model.hidden_size",
)
TAIL_COLUMNS: tuple[str, ...] = ("status", "step", "fraction", "val_loss")
RESULT_STATUSES: tuple[str, ...] = ("completed", "diverged", "failed", "pending")
FINAL_STATUSES: tuple[str, ...] = ("completed", "diverged")  # a rerun leaves these alone

# What else the launch side keeps from each run's resolved config.
EVAL_AT_KEY = "eval.at"
STEPS_KEY = "training.steps"


def canonical_values(flat_config: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical columns of a flattened resolved config; L0 defaults to L (ratio 1)."""
    out = {key: flat_config.get(key) for key in CANONICAL_KEYS}
    if out["parametrization.base_num_layers"] is None:
        out["parametrization.base_num_layers"] = out["model.num_layers"]
    return out

"""Names and codes fixed by docs/contracts.md, shared by train_gpt.py, launch and eval.

Change one here and every side of the contract changes with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Run directory.
CONFIG_FILE = "config.yaml"
PARAMETRIZATION_FILE = "parametrization.json"
METRICS_FILE = "metrics.jsonl"
DIAGNOSTICS_FILE = "diagnostics.jsonl"  # per-layer update and activation sizes (logging.diagnostics_interval)
SUMMARY_FILE = "summary.json"
CHECKPOINTS_DIR = "checkpoints"
LOCK_FILE = ".lock"
HF_EXPORT_DIR = "hf"  # python -m eval lm-eval exports a run here (training.export_hf)
LM_EVAL_FILE = "lm_eval.json"  # python -m eval lm-eval's scores; eval transfer reads them
LM_EVAL_SAMPLES_FILE = "lm_eval_samples.jsonl"  # --log-samples: one row per request

# train_gpt.py exit codes.
EXIT_COMPLETED = 0
EXIT_FAILED = 1
EXIT_CONFIG = 2
EXIT_DIVERGED = 3
EXIT_LOCKED = 4
EXIT_PREEMPTED = 75

# summary.json statuses; a rerun leaves the final ones alone.
FINAL_STATUSES: dict[str, int] = {"completed": EXIT_COMPLETED, "diverged": EXIT_DIVERGED}

# Sweep directory: results.csv = run_id, CANONICAL_KEYS, other swept keys (sorted), TAIL_COLUMNS.
RESULTS_FILE = "results.csv"
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


def canonical_values(flat_config: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical columns of a flattened resolved config; L0 defaults to L (ratio 1)."""
    out = {key: flat_config.get(key) for key in CANONICAL_KEYS}
    if out["parametrization.base_num_layers"] is None:
        out["parametrization.base_num_layers"] = out["model.num_layers"]
    return out

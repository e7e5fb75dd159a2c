"""Names fixed by docs/contracts.md that launch reads or writes (shared ones live in rundir.contract)."""

from __future__ import annotations

from rundir.contract import (  # noqa: F401 - re-exported for launch's modules
    CANONICAL_KEYS,
    CONFIG_FILE,
    LOCK_FILE,
    METRICS_FILE,
    RESULT_STATUSES,
    SUMMARY_FILE,
    TAIL_COLUMNS,
    canonical_values,
)
from rundir.contract import FINAL_STATUSES as _FINAL

FINAL_STATUSES: tuple[str, ...] = tuple(_FINAL)  # a rerun leaves these alone

# What else the launch side keeps from each run's resolved config.
EVAL_AT_KEY = "eval.at"
STEPS_KEY = "training.steps"

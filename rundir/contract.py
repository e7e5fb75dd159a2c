"""Names and codes fixed by docs/contracts.md, shared by train_gpt.py, launch, data_prep and eval.

Change one here and every side of the contract changes with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, IntEnum
from typing import Any

from patches.parametrization import base_depth

# Run directory.
CONFIG_FILE = "config.yaml"
PARAMETRIZATION_FILE = "parametrization.json"
METRICS_FILE = "metrics.jsonl"
DIAGNOSTICS_FILE = "diagnostics.jsonl"  # per-layer update and activation sizes (logging.diagnostics_interval)
SUMMARY_FILE = "summary.json"
# A trainer rank that ends with no summary.json to say how (a refusal, exit 2) writes its exit
# code and reason here, so a launcher that loses the ranks' codes (torchrun, srun with a killed
# rank) does not turn it into a crash to retry. (rundir.files: ExitRecord.)
EXIT_FILE = "exit.json"
# A rank locked out of its run directory (exit 4) must write nothing there: another live process
# owns it, and its launcher reads exit.json and summary.json as its own attempt's. So each launcher
# names a file of this attempt's own in this environment variable (launch: RUN_DIR/launch/exit-*.json,
# launch.attempts.exit_file); the trainer writes its ExitRecord there when it ends locked out, and
# the launcher reads it before EXIT_FILES. (rundir.files: write_attempt_exit, attempt_exit.)
ATTEMPT_EXIT_ENV = "DEPTHMUP_ATTEMPT_EXIT"
CHECKPOINTS_DIR = "checkpoints"
LOCK_FILE = ".lock"
WANDB_ID_FILE = "wandb_id"  # the W&B run a resumed session logs to (logging.wandb)
HF_EXPORT_DIR = "hf"  # python -m eval lm-eval exports a run here (training.export_hf)
LM_EVAL_FILE = "lm_eval.json"  # python -m eval lm-eval's scores; eval transfer reads them
LM_EVAL_SAMPLES_FILE = "lm_eval_samples.jsonl"  # --log-samples: one row per request


class ExitCode(IntEnum):
    """The exit code of every entry point (``train_gpt.py``, ``python -m launch``, ``data_prep``,
    ``eval``, ``training.show``, ``training.export_hf``): one meaning per code, docs/contracts.md."""

    OK = 0  # done: the run completed, or the command did what it was asked
    FAILED = 1  # a crash, or some run / unit of work failed (see the message or `launch status`)
    USAGE = 2  # bad input (config key, flag, file, record): the message names it; nothing was done
    DIVERGED = 3  # train_gpt.py: the run diverged (final, like OK)
    BUSY = 4  # the run directory is locked by a live process (running elsewhere)
    RESUMABLE = 75  # preempted or interrupted (EX_TEMPFAIL): what finished is kept; rerun to resume


class Status(str, Enum):
    """Where a run (or one attempt at it) stands: one vocabulary for ``summary.json``, the attempt
    log, ``launch status`` and ``results.csv``. Each file uses the subset its docs name."""

    COMPLETED = "completed"  # final (summary.json, attempts, states, results.csv)
    DIVERGED = "diverged"  # final
    FAILED = "failed"  # crashed (summary.json, attempts); its retries are used up or it failed last (states)
    PREEMPTED = "preempted"  # stopped by a signal after a checkpoint; resumes (summary.json, attempts)
    INVALID = "invalid"  # the trainer refused its config (attempts: exit 2)
    BUSY = "busy"  # the run directory was locked by another process (attempts: exit 4)
    INTERRUPTED = "interrupted"  # stopped by the launcher's own shutdown, or its launcher died (attempts)
    NO_MEMORY = "no_memory"  # ran out of GPU memory beside other runs packed on its GPU (attempts): requeued
    RUNNING = "running"  # locked by a live trainer, or an attempt is open (states)
    PENDING = "pending"  # not started, or resumable (states, results.csv)

    def __str__(self) -> str:
        return self.value


FINAL_STATUSES: frozenset[Status] = frozenset({Status.COMPLETED, Status.DIVERGED})  # a rerun leaves these alone

# How a trainer's exit code reads as a status (an attempt's outcome); anything else: FAILED.
STATUS_OF_EXIT: dict[int, Status] = {
    ExitCode.OK: Status.COMPLETED,
    ExitCode.FAILED: Status.FAILED,
    ExitCode.USAGE: Status.INVALID,
    ExitCode.DIVERGED: Status.DIVERGED,
    ExitCode.BUSY: Status.BUSY,
    ExitCode.RESUMABLE: Status.PREEMPTED,
}
# The exit code a trainer returns with each status it writes to summary.json.
EXIT_OF_STATUS: dict[Status, ExitCode] = {
    Status.COMPLETED: ExitCode.OK,
    Status.FAILED: ExitCode.FAILED,
    Status.DIVERGED: ExitCode.DIVERGED,
    Status.PREEMPTED: ExitCode.RESUMABLE,
}
SUMMARY_STATUSES: tuple[Status, ...] = tuple(EXIT_OF_STATUS)
# Where a trainer's own exit code is read when its launcher's code is not it (torchrun exits 1
# whatever its ranks exit with; srun exits with the highest code of its tasks): the first of
# these files written during the attempt, after the attempt's own file (ATTEMPT_EXIT_ENV) where its
# launcher named one. exit.json first: a refusing rank writes it, and rank 0 may still write a
# summary (a crash when its peer left) after it.
EXIT_FILES: tuple[str, ...] = (EXIT_FILE, SUMMARY_FILE)

# Sweep directory: RUNS_DIR/<run id>/ holds each run directory (launch writes, eval reads them);
# results.csv = run_id, CANONICAL_KEYS, other swept keys (sorted), [BRANCH_COLUMNS], TAIL_COLUMNS.
RUNS_DIR = "runs"
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
# A sweep whose runs continue other runs' checkpoints (checkpoint.init_mode=continue) names each
# run's source in these columns (summary.json's branch_of), in place of a swept checkpoint.init_from
# (a path). The branch step is a setting of the run (branches from other steps are other runs to
# compare); the source's run directory and its name (its run ID in a sweep) are records: the
# source's own settings are the run's key columns already.
INIT_MODE_KEY, INIT_FROM_KEY, CONTINUE = "checkpoint.init_mode", "checkpoint.init_from", "continue"
BRANCH_STEP_COLUMN = "branch_of.step"
RECORD_COLUMNS: tuple[str, ...] = ("branch_of.run_id", "branch_of.run_dir")
BRANCH_COLUMNS: tuple[str, ...] = (BRANCH_STEP_COLUMN, *RECORD_COLUMNS)
# Swept keys that, with parametrization.preset, say which parametrization a run is (preset
# custom's depth exponents: docs/parametrization.md). At the base depth L = L0 they change nothing
# (m_L = 1), so the analysis shares base-depth runs across them (eval.results.share_base_depth)
# and compares families that differ only in them and the preset as presets (eval.transfer).
PARAMETRIZATION_KEYS: tuple[str, ...] = ("parametrization.alpha", "parametrization.gamma")
RESULT_STATUSES: tuple[Status, ...] = (Status.COMPLETED, Status.DIVERGED, Status.FAILED, Status.PENDING)
# What else results.csv needs from each run's resolved config: its eval points.
EVAL_AT_KEY = "eval.at"
STEPS_KEY = "training.steps"


def canonical_values(flat_config: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical columns of a flattened resolved config; L0 defaults to L (ratio 1)."""
    out = {key: flat_config.get(key) for key in CANONICAL_KEYS}
    out["parametrization.base_num_layers"] = base_depth(out["parametrization.base_num_layers"], out["model.num_layers"])
    return out

"""What a run records: metrics.jsonl, summary.json, optional TensorBoard / W&B.

Only rank 0 writes. Every JSON row is flushed as it is written; summary.json and the
rewritten metrics file after a resume are replaced atomically (docs/contracts.md).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Optional

from runconfig import atomic_write_text
from runconfig.contract import METRICS_FILE as METRICS
from runconfig.contract import SUMMARY_FILE as SUMMARY


def _clean(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as strings so the file stays valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def read_summary(run_dir: Path) -> Optional[dict[str, Any]]:
    path = run_dir / SUMMARY
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    atomic_write_text(run_dir / SUMMARY, json.dumps(_clean(summary), indent=1) + "\n")


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / METRICS
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                break  # a line cut by a hard kill: everything after it is unreliable
    return rows


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Keep rows up to ``last_step`` (the restored checkpoint): no duplicates after resume."""
    rows = [r for r in read_metrics(run_dir) if r.get("step", 0) <= last_step]
    atomic_write_text(run_dir / METRICS, "".join(json.dumps(r) + "\n" for r in rows))


class RunLog:
    """Appends metrics rows and mirrors them to TensorBoard / W&B when asked."""

    def __init__(self, run_dir: Path, tensorboard: bool, wandb: bool, wandb_project: Optional[str], config: dict):
        self.file = open(run_dir / METRICS, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self.tb = None
        self.wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wandb_lib
            except ImportError as exc:
                raise ValueError("logging.wandb: the wandb package is not installed (pip install wandb)") from exc
            self.wandb = wandb_lib.init(
                project=wandb_project or "depthmup", name=run_dir.name, dir=str(run_dir), config=config, resume="allow"
            )

    def write(self, row: dict[str, Any]) -> None:
        self.file.write(json.dumps(_clean(row)) + "\n")
        step = row["step"]
        scalars = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k not in ("step",)}
        for group, lr in row.get("lr", {}).items():
            scalars[f"lr/{group}"] = lr
        prefix = "eval" if row.get("kind") == "eval" else "train"
        if self.tb is not None:
            for key, value in scalars.items():
                if value is not None:
                    self.tb.add_scalar(f"{prefix}/{key}", value, step)
        if self.wandb is not None:
            self.wandb.log({f"{prefix}/{k}": v for k, v in scalars.items()}, step=step)

    def sync(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()

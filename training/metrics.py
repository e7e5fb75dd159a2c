"""The metrics stream of a run: ``metrics.jsonl`` rows, mirrored to TensorBoard / W&B when asked.

Only rank 0 writes; every row is flushed as it is written. The file format (and
``summary.json``) is owned by :mod:`rundir.files`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from jobscripts.atomic import atomic_write_text
from rundir.contract import WANDB_ID_FILE
from rundir.files import DIAGNOSTICS_FILE, METRICS_FILE, metrics_line


class RunLog:
    """Appends metrics rows and mirrors them to TensorBoard / W&B when asked."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool,
        wandb: bool,
        wandb_project: Optional[str],
        config: dict,
        resume_step: int = 0,
    ):
        """``resume_step``: the step the session resumes from; TensorBoard hides what an earlier
        session logged after it (the rows metrics.jsonl drops), or a resumed curve shows twice,
        and W&B logs on into the earlier session's run (:func:`_wandb_run_id`)."""
        self.run_dir = run_dir
        self.file = open(run_dir / METRICS_FILE, "a", buffering=1)  # noqa: SIM115 - closed in close()
        self.diagnostics = None  # diagnostics.jsonl, opened on its first rows
        self.tb = None
        self.wandb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step + 1)
        if wandb:
            try:
                import wandb as wandb_lib
            except ImportError as exc:
                raise ValueError("logging.wandb: the wandb package is not installed (pip install wandb)") from exc
            self.wandb = wandb_lib.init(
                project=wandb_project or "depthmup",
                name=run_dir.name,
                id=_wandb_run_id(run_dir, resume_step, wandb_lib.util.generate_id),
                dir=str(run_dir),
                config=config,
                resume="allow",
            )

    def write(self, row: dict[str, Any]) -> None:
        self.file.write(metrics_line(row))
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

    def write_diagnostics(self, rows: list[dict[str, Any]]) -> None:
        """Append ``diagnostics.jsonl`` rows (training.diagnostics); TensorBoard / W&B get one
        scalar per row and quantity, named ``diag/<role or kind>/layer<l>/<quantity>``."""
        if self.diagnostics is None:
            self.diagnostics = open(self.run_dir / DIAGNOSTICS_FILE, "a", buffering=1)  # noqa: SIM115
        self.diagnostics.write("".join(metrics_line(r) for r in rows))
        if self.tb is None and self.wandb is None:
            return
        scalars: dict[str, float] = {}
        for row in rows:
            where = f"layer{row['layer']}" if row.get("layer") is not None else row.get("param", "model")
            for key in ("weight_rms", "update_rms", "update_ratio", "rms"):
                if isinstance(row.get(key), float):
                    scalars[f"diag/{row.get('role') or row.get('kind')}/{where}/{key}"] = row[key]
        step = rows[0]["step"] if rows else 0
        if self.tb is not None:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, step)
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)

    def sync(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()
        if self.diagnostics is not None:
            self.diagnostics.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _wandb_run_id(run_dir: Path, resume_step: int, generate: Any) -> str:
    """The W&B run id of this run directory: the one ``wandb_id`` records when the session resumes
    a checkpoint, so every session of a run logs into one W&B run (``resume="allow"`` without an
    id opened a new one per resume); a fresh id when it starts from step 0."""
    path = run_dir / WANDB_ID_FILE
    recorded = path.read_text().strip() if resume_step > 0 and path.is_file() else ""
    if recorded:
        return recorded
    run_id = str(generate())
    atomic_write_text(path, run_id + "\n")
    return run_id

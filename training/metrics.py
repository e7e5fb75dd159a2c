"""The metrics stream of a run: ``metrics.jsonl`` rows, mirrored to TensorBoard / W&B when asked.

Only rank 0 writes; every row is flushed as it is written. The file format (and
``summary.json``) is owned by :mod:`rundir.files`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Optional

from jobscripts.atomic import atomic_write_text
from rundir.contract import WANDB_ID_FILE
from rundir.files import DIAGNOSTICS_FILE, METRICS_FILE, metrics_line

log = logging.getLogger("train_gpt")


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
        branch: Optional[dict] = None,
    ):
        """``resume_step``: the step the session resumes from; TensorBoard hides what an earlier
        session logged after it (the rows metrics.jsonl drops), or a resumed curve shows twice,
        and W&B logs on into the earlier session's run (:func:`_wandb_run_id`). ``branch``: the
        record of the run this one continued (``checkpoint.branch_record``: ``run_dir``, ``step``),
        whose W&B run a new branch forks (:func:`_wandb_init`). A branch's TensorBoard events start
        after its branch step, where its metrics.jsonl rows do (``resume_step`` is that step)."""
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
            self.wandb = _wandb_init(wandb_lib, run_dir, wandb_project, config, resume_step, branch)

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


def _wandb_run_id(run_dir: Path, resume_step: int, generate: Any) -> tuple[str, bool]:
    """The W&B run id of this run directory and whether it is new: the one ``wandb_id`` records
    when the session resumes a checkpoint, so every session of a run logs into one W&B run
    (``resume="allow"`` without an id opened a new one per resume); a fresh id when it starts
    from step 0, or continues another run's checkpoint for the first time."""
    path = run_dir / WANDB_ID_FILE
    recorded = path.read_text().strip() if resume_step > 0 and path.is_file() else ""
    if recorded:
        return recorded, False
    run_id = str(generate())
    atomic_write_text(path, run_id + "\n")
    return run_id, True


def wandb_fork_point(branch: Optional[dict]) -> Optional[str]:
    """``fork_from`` for the first session of a branch: ``"{source's W&B id}?_step={branch step}"``
    (W&B's ``_step`` is the training step: :meth:`RunLog.write` logs with ``step=``); None where
    the source logged no W&B run (no ``wandb_id`` in its run directory)."""
    if not branch or branch.get("step") is None or not branch.get("run_dir"):
        return None
    path = Path(branch["run_dir"]) / WANDB_ID_FILE
    source_id = path.read_text().strip() if path.is_file() else ""
    return f"{source_id}?_step={int(branch['step'])}" if source_id else None


def _wandb_init(
    wandb_lib: Any, run_dir: Path, project: Optional[str], config: dict, resume_step: int, branch: Optional[dict]
) -> Any:
    """``wandb.init`` for this session. A branch's first session forks its source's W&B run at the
    branch step (``fork_from``, wandb >= 0.16.5; W&B then shows the source's history up to there
    as the branch's and the two runs linked); W&B refuses ``resume`` beside ``fork_from``, so a
    fork is a new run, and later sessions of the branch resume their own id. Where the fork
    cannot be made (an older wandb, a server without forking, the source in another project)
    the branch logs as a run of its own, said once; either way its config names the source
    (``branch_of``: run directory, step, W&B id)."""
    run_id, new = _wandb_run_id(run_dir, resume_step, wandb_lib.util.generate_id)
    source = wandb_fork_point(branch)
    fork = source if new else None
    if branch:
        record = {"run_dir": branch.get("run_dir"), "step": branch.get("step")}
        config = {**config, "branch_of": {**record, "wandb_id": source.split("?")[0] if source else None}}
    args = {"project": project or "depthmup", "name": run_dir.name, "id": run_id, "dir": str(run_dir), "config": config}
    if fork is not None:
        try:
            return wandb_lib.init(**args, fork_from=fork)
        except Exception as exc:  # noqa: BLE001 - W&B's errors vary by version and server
            log.warning(
                "logging.wandb: could not fork the source's W&B run (fork_from=%s: %s: %s); this branch logs as "
                "a W&B run of its own from step %d (its config names the source: branch_of)",
                fork,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
                resume_step + 1,
            )
    return wandb_lib.init(**args, resume="allow")

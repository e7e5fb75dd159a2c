"""An expanded sweep: every run with its ID and overrides, and how to run them.

This is what ``SWEEP_DIR/sweep.yaml`` holds. Executors and ``status`` work from it alone
(no re-validation, no spec file needed), so resuming a sweep is cheap and a SLURM array
task needs nothing but the sweep directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from launch.commands import TrainInvocation, format_override, old_default_trainer, trainer_command
from launch.errors import LaunchError
from rundir.contract import INIT_FROM_KEY, RUNS_DIR

BASE_SNAPSHOT = "base_config.yaml"
SHARED_INDEX_CACHE = ".index_cache"  # under runs/: a dot-folder, not a run
CACHE_DIR_KEY = "data.cache_dir"


@dataclass
class ExecutorSettings:
    """How runs are executed; the sweep spec's ``executor:`` section."""

    kind: str = "local"  # local | slurm
    max_parallel: int = 1  # slots at a time (local: one per GPU or CPU share; slurm: the array's %K)
    max_retries: int = 2  # failed attempts allowed after the first one; preemptions do not count
    gpus_per_run: int = 1  # 0: CPU runs; > 1: each trainer runs under torchrun --standalone
    start: str = "exec"  # local runs: exec a new python, or fork one that imported the trainer (launch.warm_start)
    # Packing: runs sharing one slot (a GPU, or a CPU slot's threads) at a time, so runs at a
    # time = slots x runs_per_gpu. A GPU run starts only when its GPU has gpu_memory_mib free
    # (0 when packing: the run's estimate, launch.gpu_share.RunMemory; no check otherwise).
    runs_per_gpu: int = 1
    gpu_memory_mib: int = 0
    mps: str = "auto"  # packed GPU runs: auto = start CUDA MPS where the node allows it (reported), off = never

    def __post_init__(self) -> None:
        if self.kind not in ("local", "slurm"):
            raise ValueError(f"executor.kind: must be 'local' or 'slurm', got {self.kind!r}")
        if self.start not in ("exec", "fork"):
            raise ValueError(f"executor.start: must be 'exec' or 'fork', got {self.start!r}")
        if self.mps not in ("auto", "off"):
            raise ValueError(f"executor.mps: must be 'auto' or 'off', got {self.mps!r}")
        for key, low in (
            ("max_parallel", 1), ("max_retries", 0), ("gpus_per_run", 0), ("runs_per_gpu", 1), ("gpu_memory_mib", 0),
        ):  # fmt: skip
            if getattr(self, key) < low:
                raise ValueError(f"executor.{key}: must be >= {low}, got {getattr(self, key)!r}")


@dataclass(frozen=True)
class PlannedRun:
    run_id: str
    point: dict[str, Any]  # the grid values of this run (dotted key -> value)
    resolved: dict[str, Any]  # canonical + swept keys, eval.at, training.steps from its full config


@dataclass
class SweepPlan:
    name: str
    spec_file: str
    base_config_source: str  # the spec's base config; runs use the snapshot in the sweep dir
    fixed: dict[str, Any]  # overrides applied to every run
    grid: dict[str, list[Any]]  # dotted key -> expanded values, in spec order
    executor: ExecutorSettings
    slurm: dict[str, Any]  # launch.scripts.SlurmOptions fields
    # The trainer the user gave at expansion (the spec's train_cmd, --train-cmd, $DEPTHMUP_TRAIN_CMD);
    # None: the toolkit's own, resolved where the sweep runs (:meth:`trainer`), so that the sweep
    # directory can move to a machine whose checkout lies elsewhere.
    train_cmd: Optional[list[str]]
    runs: list[PlannedRun] = field(default_factory=list)
    # The runs' megatron index cache in SWEEP_DIR/runs/.index_cache, one for the sweep (set at
    # expansion where the config gives no data.cache_dir); each run wrote its own, 38.8 MB each.
    shared_index_cache: bool = False
    # Keys of the runs' points whose values are paths relative to the sweep directory (a runs_of
    # branch's checkpoint.init_from: ../wsd_stable/runs/ID/checkpoints/step_00000006), so that the
    # sweep directory and its source sweep can move together (another disk, a GPU node) and keep
    # their run IDs and sources. Empty in sweeps expanded before this: absolute paths there.
    sweep_relative: list[str] = field(default_factory=list)
    # True where train_cmd was given, False where none was. None: a sweep expanded before this,
    # which recorded "none given" as the expanding checkout's absolute python and train_gpt.py
    # (launch.commands.old_default_trainer): taken as none given.
    train_cmd_given: Optional[bool] = None

    def trainer_is_given(self) -> bool:
        """Whether :attr:`train_cmd` is a trainer the user gave (kept as written), not the toolkit's own."""
        if not self.train_cmd:
            return False
        return self.train_cmd_given if self.train_cmd_given is not None else not old_default_trainer(self.train_cmd)

    def trainer(self) -> list[str]:
        """The trainer command here: :attr:`train_cmd` where given, else this checkout's (its python
        and train_gpt.py, or $DEPTHMUP_TRAIN_CMD where set now)."""
        return list(self.train_cmd) if self.trainer_is_given() else trainer_command(None)

    def run(self, run_id: str) -> PlannedRun:
        for run in self.runs:
            if run.run_id == run_id:
                return run
        raise LaunchError(f"sweep {self.name!r} has no run {run_id!r}")

    def train_invocation(self, sweep_dir: Path, run: PlannedRun) -> TrainInvocation:
        """The trainer call of ``run``: the base snapshot, fixed overrides, grid values, run.dir."""
        sweep_dir = sweep_dir.resolve()
        overrides = [format_override(k, v) for k, v in {**self.fixed, **self.point(sweep_dir, run)}.items()]
        overrides.append(format_override("run.dir", str(sweep_dir / RUNS_DIR / run.run_id)))
        if self.shared_index_cache:  # not part of the run's ID, as run.dir
            overrides.append(format_override(CACHE_DIR_KEY, str(sweep_dir / RUNS_DIR / SHARED_INDEX_CACHE)))
        return TrainInvocation(tuple(self.trainer()), str(sweep_dir / BASE_SNAPSHOT), tuple(overrides))

    def point(self, sweep_dir: Path, run: PlannedRun) -> dict[str, Any]:
        """``run``'s grid values as the trainer takes them: :attr:`sweep_relative` paths joined to
        ``sweep_dir`` (where the sweep is now)."""
        return {k: sweep_path(sweep_dir, v) if k in self.sweep_relative else v for k, v in run.point.items()}

    def missing_sources(self, sweep_dir: Path, runs: list[PlannedRun]) -> list[str]:
        """``RUN_ID: PATH`` for each of ``runs`` whose ``checkpoint.init_from`` is not there (the
        sweep moved without its source sweep, or one expanded before :attr:`sweep_relative` moved)."""
        missing = []
        for run in runs:
            source = self.point(sweep_dir, run).get(INIT_FROM_KEY, self.fixed.get(INIT_FROM_KEY))
            if isinstance(source, str) and Path(source).is_absolute() and not Path(source).exists():
                missing.append(f"{run.run_id}: {source}")
        return missing

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["runs"] = [{"id": r.run_id, "point": r.point, "resolved": r.resolved} for r in self.runs]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepPlan:
        fields = dict(data)
        runs = [PlannedRun(r["id"], dict(r["point"]), dict(r["resolved"])) for r in fields.pop("runs")]
        executor = ExecutorSettings(**fields.pop("executor"))
        return cls(**fields, executor=executor, runs=runs)


def sweep_path(sweep_dir: Path, relative: str) -> str:
    """A :attr:`SweepPlan.sweep_relative` value as an absolute path, ``..`` folded."""
    return os.path.normpath(Path(sweep_dir).resolve() / relative)

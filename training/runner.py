"""One training run, start to finish: the run-directory contract of docs/contracts.md.

:class:`Trainer` takes the run lock, builds the :class:`~training.session.Session` (set-up and
resume, all before the first step), hands each step to the loop's named parts
(:mod:`training.loop_parts`) and writes the summary: by one code path, on rank 0, however
the run ends. Exit codes: 0 completed, 1 failed, 2 invalid config, 3 diverged, 4 run
directory locked, 75 preempted.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import math
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from runconfig.schema import RunConfig
from rundir.contract import (
    EXIT_COMPLETED,
    EXIT_CONFIG,
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_PREEMPTED,
    LOCK_FILE,
)
from rundir.contract import FINAL_STATUSES as FINISHED
from rundir.files import (
    CHECKPOINTS_DIR,
    EvalRecord,
    RunSummary,
    read_metrics,
    read_summary,
    run_identity,
    write_summary,
)
from training.loop_parts import Checkpointer, DivergenceGuard, EvalSchedule, ThroughputMeter
from training.session import Session, SetupError, build_session

log = logging.getLogger("train_gpt")


class RunLock:
    """An exclusive ``flock`` on RUN_DIR/.lock held for the whole run (one writer per run)."""

    def __init__(self, run_dir: Path) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / LOCK_FILE
        self.fh = open(self.path, "a+")  # noqa: SIM115 - held until release()

    def acquire(self) -> bool:
        try:
            fcntl.flock(self.fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.write(f"{os.getpid()}\n")
        self.fh.flush()
        return True

    def release(self) -> None:
        fcntl.flock(self.fh, fcntl.LOCK_UN)
        self.fh.close()


class PreemptionFlag:
    """SIGTERM / SIGINT ask the loop to checkpoint and exit 75 at the end of the step."""

    def __init__(self) -> None:
        self.signal: Optional[str] = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signal = signal.Signals(signum).name

    def raised_anywhere(self) -> bool:
        flag = torch.tensor([1.0 if self.signal else 0.0])
        if dist.is_initialized() and dist.get_world_size() > 1:
            if dist.get_backend() == "nccl":
                flag = flag.cuda()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)


class Trainer:
    """Runs ``cfg`` to completion, divergence, preemption or failure; ``run()`` returns the exit code."""

    def __init__(self, cfg: RunConfig, force: bool = False) -> None:
        self.cfg = cfg
        self.force = force
        self.run_dir = Path(cfg.run.dir)
        self.rank = int(os.environ.get("RANK", "0"))
        self.is_main = self.rank == 0
        self.session: Optional[Session] = None
        self.started = time.time()
        self.session_start: Optional[float] = None  # when this process's first step began

    # ------------------------------------------------------------------ entry
    def run(self) -> int:
        previous = read_summary(self.run_dir)
        if previous and previous.final and not self.force:
            if self.is_main:
                print(f"{self.run_dir}: already {previous.status}; nothing to do (use --force to retrain)")
            return FINISHED[previous.status]
        lock = RunLock(self.run_dir) if self.is_main else None
        if lock is not None and not lock.acquire():
            print(f"error: {self.run_dir} is in use by another process (lock {lock.path})", file=sys.stderr)
            return EXIT_LOCKED
        self.started = time.time()
        flag = PreemptionFlag()
        try:
            try:
                self.session = build_session(self.cfg, force=self.force, is_main=self.is_main)
            except SetupError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_CONFIG
            return self._loop(self.session, flag)
        except Exception as exc:  # a crash still leaves a summary behind
            if self.is_main:
                log.error("run failed:\n%s", traceback.format_exc())
            self._finish("failed", f"{type(exc).__name__}: {exc}", EXIT_FAILED)
            return EXIT_FAILED
        finally:
            if self.session is not None and self.session.runlog is not None:
                self.session.runlog.close()
            from training.distributed import shutdown

            shutdown()
            if lock is not None:
                lock.release()

    # ------------------------------------------------------------------ loop
    def _loop(self, s: Session, flag: PreemptionFlag) -> int:
        from tqdm import tqdm

        from training.data import micro_batches
        from training.flops import peak_flops, train_flops_per_step
        from training.optim import group_lrs

        cfg = s.cfg
        steps = cfg.training.steps
        tokens_per_step = cfg.training.global_batch_size * cfg.model.seq_length
        evals = EvalSchedule.of(cfg)
        guard = DivergenceGuard.of(cfg, s.vocab_size)
        on_gpu = s.device == "cuda"
        meter = ThroughputMeter(
            tokens_per_step,
            s.info.world_size,
            train_flops_per_step(cfg, s.padded_vocab) if on_gpu else None,
            peak_flops(torch.cuda.get_device_name()) if on_gpu else None,
        )
        checkpointer = Checkpointer(self._save, cfg.checkpoint.interval, steps)
        bar = tqdm(
            total=steps,
            initial=s.start_step,
            disable=not (self.is_main and cfg.logging.progress_bar),
            desc=s.run_dir.name,
            unit="step",
            dynamic_ncols=True,
        )
        self.session_start = time.time()
        try:
            for step in range(s.start_step, steps):
                batches = micro_batches(s.data.train, s.plan, step)
                lrs = group_lrs(s.backend.param_groups, s.resolved)
                if s.diagnostics is not None:
                    s.diagnostics.before_step(step + 1)
                t0 = time.perf_counter()
                result = s.backend.train_step(batches)
                s.scheduler.step(1)
                dt = time.perf_counter() - t0
                done = step + 1
                if s.diagnostics is not None:
                    rows = s.diagnostics.after_step(done)
                    if rows and s.runlog is not None:
                        s.runlog.write_diagnostics(rows)
                meter.add(dt)
                reason = guard.check(result.loss, result.grad_norm, done)

                if s.runlog is not None and (done % cfg.logging.interval == 0 or done == steps or reason):
                    s.runlog.write(
                        {
                            "kind": "train",
                            "step": done,
                            "tokens": done * tokens_per_step,
                            "loss": result.loss,
                            "grad_norm": result.grad_norm,
                            "lr": lrs,
                            **meter.row(),
                            "skipped": not result.applied,
                        }
                    )
                if reason:
                    log.warning("diverged: %s", reason)
                    bar.close()
                    self._finish("diverged", reason, EXIT_DIVERGED, done)
                    return EXIT_DIVERGED

                frac = evals.due(done)
                if frac is not None:
                    val = s.backend.evaluate(s.eval_batches)
                    s.evals.append({"step": done, "fraction": frac, "val_loss": val})
                    if s.runlog is not None:
                        s.runlog.write(
                            {
                                "kind": "eval",
                                "step": done,
                                "fraction": frac,
                                "tokens": done * tokens_per_step,
                                "val_loss": val,
                            }
                        )
                        log.info("step %d (%.3g of training): val_loss %.4f", done, frac, val)
                    if not math.isfinite(val):
                        self._finish("diverged", f"validation loss is {val} at step {done}", EXIT_DIVERGED, done)
                        return EXIT_DIVERGED

                bar.update(1)
                bar.set_postfix(loss=f"{result.loss:.3f}", tok_s=f"{tokens_per_step / dt:,.0f}")
                checkpointer.maybe_save(done)
                if flag.raised_anywhere():
                    self._save(done)
                    why = f"preempted ({flag.signal or 'signal on another rank'}) at step {done}"
                    log.warning("%s: checkpoint saved, exiting %d", why, EXIT_PREEMPTED)
                    self._finish("failed", why, EXIT_PREEMPTED, done)
                    return EXIT_PREEMPTED
        finally:
            bar.close()
        if cfg.checkpoint.final:
            self._save(steps)
        self._finish("completed", None, EXIT_COMPLETED, steps)
        return EXIT_COMPLETED

    # ------------------------------------------------------------------ outputs
    def _wall_time(self) -> float:
        offset = self.session.wall_offset if self.session is not None else 0.0
        return offset + (time.time() - (self.session_start or self.started))

    def _save(self, step: int) -> None:
        from megatron.core import parallel_state

        from training import checkpoint

        s = self.session
        assert s is not None
        common = {
            "step": step,
            "consumed_samples": step * s.cfg.training.global_batch_size,
            "evals": s.evals,
            "wall_time_s": self._wall_time(),
            "layout": {
                "tp": parallel_state.get_tensor_model_parallel_world_size(),
                "pp": parallel_state.get_pipeline_model_parallel_world_size(),
                "dp": parallel_state.get_data_parallel_world_size(),
            },
            "parametrization": s.table,
            "config": s.config_dict,
        }
        if s.runlog is not None:
            s.runlog.sync()
        checkpoint.save(
            s.run_dir / CHECKPOINTS_DIR,
            step,
            common,
            s.backend,
            s.scheduler,
            s.info.rank,
            s.cfg.checkpoint.keep,
        )

    def _finish(self, status: str, reason: Optional[str], code: int, step: Optional[int] = None) -> None:
        """Write ``summary.json``: the one place it is written, on rank 0 only."""
        if not self.is_main:
            return
        cfg, s = self.cfg, self.session
        evals = list(s.evals) if s is not None else []
        final_at = EvalSchedule.of(cfg).final_step
        final = [e["val_loss"] for e in evals if e["step"] == final_at]
        train_rows = [r for r in read_metrics(self.run_dir) if r.get("kind") == "train"]
        done = step if step is not None else (train_rows[-1]["step"] if train_rows else 0)
        write_summary(
            self.run_dir,
            RunSummary(
                status=status,
                reason=reason,
                exit_code=code,
                steps=done,
                target_steps=cfg.training.steps,
                tokens=done * cfg.training.global_batch_size * cfg.model.seq_length,
                evals=tuple(EvalRecord(e["step"], e["fraction"], e["val_loss"]) for e in evals),
                final_val_loss=final[0] if final else None,
                final_train_loss=train_rows[-1]["loss"] if train_rows else None,
                wall_time_s=self._wall_time(),
                **run_identity(cfg),
            ),
        )


def replace_run_dir(cfg: RunConfig, run_dir: str) -> RunConfig:
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=run_dir))

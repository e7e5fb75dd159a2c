"""One training run, start to finish: the run-directory contract of docs/contracts.md.

:class:`Trainer` takes the run lock, builds the :class:`~training.session.Session` (set-up and
resume, all before the first step), hands each step to the loop's named parts
(:mod:`training.loop_parts`) and writes the summary: by one code path, on rank 0, however
the run ends. Every way a run ends is an :class:`Ending` (a status of the run contract); its
exit code follows from the contract's table (``rundir.contract.EXIT_OF_STATUS``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from runconfig.schema import RunConfig, run_identity
from runconfig.validate import check_world
from rundir.contract import EXIT_OF_STATUS, LOCK_FILE, ExitCode, Status
from rundir.files import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    EvalRecord,
    ExitRecord,
    RunSummary,
    read_metrics,
    read_summary,
    write_attempt_exit,
    write_exit_record,
    write_summary,
)
from rundir.lock import RunLock, run_locked
from training.backends import StepResult
from training.loop_parts import (
    Checkpointer,
    DivergenceGuard,
    EtaEstimate,
    EvalSchedule,
    ThroughputMeter,
    eval_line,
    perplexity,
    summary_line,
    train_line,
)
from training.session import Session, SetupError, build_session, device_of

log = logging.getLogger("train_gpt")


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


@dataclass(frozen=True)
class Ending:
    """How a session ended: what ``summary.json`` records. ``step``: None when unknown (a crash)."""

    status: Status
    reason: Optional[str] = None
    step: Optional[int] = None

    @property
    def exit_code(self) -> ExitCode:
        return EXIT_OF_STATUS[self.status]


class Trainer:
    """Runs ``cfg`` to completion, divergence, preemption or failure; ``run()`` returns the exit code."""

    def __init__(
        self, cfg: RunConfig, force: bool = False, received: Callable[[], Optional[str]] = lambda: None
    ) -> None:
        """``received``: the name of a stop signal that reached the caller's own handler before
        the trainer's (train_gpt.py's start-up), read once the trainer's handlers are in place."""
        self.cfg = cfg
        self.force = force
        self.received = received
        self.run_dir = Path(cfg.run.dir)
        self.rank = int(os.environ.get("RANK", "0"))
        self.is_main = self.rank == 0
        self.session: Optional[Session] = None
        self.started = time.time()
        self.session_start: Optional[float] = None  # when this process's first step began
        self._skipped = 0  # steps of the current logging interval whose update was skipped

    # ------------------------------------------------------------------ entry
    def run(self) -> ExitCode:
        previous = read_summary(self.run_dir)
        if previous and previous.final and not self.force:
            changes = self._changes_from_finished()
            if changes:
                return self._refuse(
                    f"{self.run_dir}: already {previous.status} with another config; refusing to report "
                    "it as this one's (--force retrains it; or give another run.dir):\n  " + "\n  ".join(changes),
                    owns_run_dir=False,
                )
            if self.is_main:
                print(f"{self.run_dir}: already {previous.status}; nothing to do (use --force to retrain)")
            return EXIT_OF_STATUS[previous.status]
        try:  # before the lock's all-reduce sets up a process group for a world that cannot be split
            check_world(
                int(os.environ.get("WORLD_SIZE", "1")),
                self.cfg.parallel.tensor_model_parallel_size,
                self.cfg.parallel.pipeline_model_parallel_size,
            )
        except ValueError as exc:
            return self._refuse(str(exc), owns_run_dir=False)
        lock = RunLock(self.run_dir) if self.is_main else None
        if not self._lock_taken(lock):
            message = f"{self.run_dir} is in use by another process (lock {self.run_dir / LOCK_FILE})"
            if self.is_main:
                print(f"error: {message}", file=sys.stderr)
            # not exit.json: the run directory is the live owner's, and its launcher reads that
            # file as its own attempt's; under torchrun (exit 1) only this attempt's file says 4
            # (every rank writes it: a node without rank 0 has a launcher of its own)
            write_attempt_exit(ExitRecord(ExitCode.BUSY, message, self.rank))
            if lock is not None:
                lock.release()
            from training.distributed import shutdown

            shutdown()
            return ExitCode.BUSY
        self.started = time.time()
        flag = PreemptionFlag()
        flag.signal = flag.signal or self.received()
        try:
            try:
                self.session = build_session(self.cfg, force=self.force, is_main=self.is_main)
                ending = self._loop(self.session, flag)
            except SetupError as exc:
                return self._refuse(str(exc))
            except Exception as exc:  # a crash still leaves a summary behind
                if self.is_main:
                    log.error("run failed:\n%s", traceback.format_exc())
                ending = Ending(Status.FAILED, f"{type(exc).__name__}: {exc}")
                if self.session_start is None and not (flag.signal or self.received()):
                    # crashed while starting, unasked (after a stop signal a crash may be the stop's
                    # doing): on any rank, this attempt's own file says 1, since srun's kill-on-bad-exit
                    # stops the other ranks while they start, they exit 75 (a preemption to requeue),
                    # and srun with them (train_gpt.record_attempt_exit: a crash before this)
                    write_attempt_exit(
                        ExitRecord(ExitCode.FAILED, f"crashed while starting: {ending.reason}", self.rank)
                    )
            self._finish(ending)
            return ending.exit_code
        finally:
            if self.session is not None and self.session.runlog is not None:
                self.session.runlog.close()
            from training.distributed import shutdown

            shutdown()
            if lock is not None:
                lock.release()

    def _lock_taken(self, lock: Optional[RunLock]) -> bool:
        """Rank 0 takes the run lock; on several ranks every rank learns whether it did, so
        that all of them leave at once when it did not (before: rank 0 exited 4 and the others
        waited for it in the process group's rendezvous until torchrun killed them, 30 s after
        its SIGTERM, which they could not act on there)."""
        taken = lock.acquire() if lock is not None else True
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from training.distributed import all_agree

            device = "cuda" if device_of(self.cfg) == "cuda" and torch.cuda.is_available() else "cpu"
            taken = all_agree(device, taken)
        return taken

    def _refuse(self, message: str, *, owns_run_dir: bool = True) -> ExitCode:
        """Exit 2 naming why; ``exit.json`` says so too (there is no summary to): under torchrun
        or srun the launcher's own code is not this one (docs/launch.md, "Runs under torchrun").
        ``owns_run_dir`` False (refused before the run lock was taken): the run directory may
        be a live owner's, whose launcher reads ``exit.json`` as its own attempt's, so the
        record goes to this attempt's own file; to ``exit.json`` only where no launcher named
        one and no process on this host holds the lock."""
        print(f"error: {message}", file=sys.stderr)
        record = ExitRecord(ExitCode.USAGE, message, self.rank)
        if owns_run_dir:
            write_exit_record(self.run_dir, record)
        elif not write_attempt_exit(record) and not run_locked(self.run_dir):
            write_exit_record(self.run_dir, record)
        return ExitCode.USAGE

    def _changes_from_finished(self) -> list[str]:
        """``key: old -> new`` for each key where this config differs from the finished run's
        ``config.yaml`` in what the run computed (what a resume may change is left out, as is
        the data's location); empty where that file is missing or unreadable (cannot tell)."""
        import yaml

        from runconfig import to_dict
        from runconfig.schema import as_recorded, explain_added
        from training.data import DATA_LOCATION_KEYS
        from training.session import RESUMABLE_CHANGES, config_differences

        try:
            old = yaml.safe_load((self.run_dir / CONFIG_FILE).read_text())
        except (OSError, yaml.YAMLError):
            return []
        if not isinstance(old, dict):
            return []
        lines = config_differences(as_recorded(old), to_dict(self.cfg), RESUMABLE_CHANGES + DATA_LOCATION_KEYS)
        return explain_added(lines, old)

    # ------------------------------------------------------------------ loop
    def _loop(self, s: Session, flag: PreemptionFlag) -> Ending:
        """Step until the run ends; each check that can end it returns its :class:`Ending`."""
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        from training.flops import peak_flops, train_flops_per_step
        from training.optim import group_lrs

        cfg = s.cfg
        steps = cfg.training.steps
        evals = EvalSchedule.of(cfg)
        guard = DivergenceGuard.of(cfg, s.data.vocab_size)
        on_gpu = s.device == "cuda"
        meter = ThroughputMeter(
            cfg.training.global_batch_size * cfg.model.seq_length,
            s.dist.world_size,
            train_flops_per_step(cfg, s.data.padded_vocab),
            peak_flops(torch.cuda.get_device_name()) if on_gpu else None,
        )
        checkpointer = Checkpointer(self._save, cfg.checkpoint.interval, steps)
        # The bar only on a terminal (disable=None: off when stderr is not a TTY, e.g. a sweep's
        # log file); log lines go through tqdm.write while it is shown, never into it.
        bar = tqdm(
            total=steps,
            initial=s.resume.step,
            disable=None if (self.is_main and cfg.logging.progress_bar) else True,
            desc=s.run_dir.name,
            unit="step",
            dynamic_ncols=True,
        )
        eta = EtaEstimate()
        self.session_start = time.time()
        meter.start(s.resume.step)
        eta.start(s.resume.step)
        try:
            with logging_redirect_tqdm(loggers=[log]):
                for step in range(s.resume.step, steps):
                    done = step + 1
                    lrs = group_lrs(s.backend.param_groups, s.resolved)  # the LRs this step uses
                    base_lr = s.scheduler.get_lr({})  # eta x schedule: each group's LR is a multiple
                    result = self._train_step(s, step)
                    warmup = meter.warmed_up() if step == s.resume.step else None
                    if warmup is not None:
                        eta.warmed_up()
                    self._skipped += not result.applied
                    reason = guard.check(result.loss, result.grad_norm, done)
                    if warmup is not None and not reason:  # a run ending here logs that step alone
                        self._warmed_up(s, done, warmup)
                    rates = self._log_train(s, done, result, lrs, base_lr, meter, eta, force=bool(reason))
                    if reason:
                        log.warning("diverged: %s", reason)
                        return Ending(Status.DIVERGED, reason, done)
                    with _excluded(meter):
                        ending = self._maybe_evaluate(s, evals, done)
                    if ending is not None:
                        return ending
                    bar.update(1)
                    if rates is not None:
                        bar.set_postfix(loss=f"{result.loss:.3f}", tok_s=f"{rates['tokens_per_s']:,.0f}")
                    with _excluded(meter):
                        saved = checkpointer.maybe_save(done)
                    if flag.raised_anywhere():
                        if not saved:  # a second save of this step would only spend the signal's grace
                            self._save(done)
                        why = f"preempted ({flag.signal or 'signal on another rank'}) at step {done}"
                        log.warning("%s: checkpoint saved, exiting %d", why, ExitCode.RESUMABLE)
                        return Ending(Status.PREEMPTED, why, done)
        finally:
            bar.close()
        if cfg.checkpoint.final and s.resume.step < steps:  # resumed at the last step: its checkpoint is the final one
            self._save(steps)
        return Ending(Status.COMPLETED, None, steps)

    def _train_step(self, s: Session, step: int) -> StepResult:
        """One optimizer step (0-based ``step``): its micro-batches, the step, diagnostics around it."""
        from training.data import micro_batches

        batches = micro_batches(s.data.datasets.train, s.data.plan, step)
        if s.diagnostics is not None:
            s.diagnostics.before_step(step + 1)
        result = s.backend.train_step(batches)
        s.scheduler.step(1)
        if s.diagnostics is not None:
            rows = s.diagnostics.after_step(step + 1)
            if rows and s.runlog is not None:
                s.runlog.write_diagnostics(rows)
        return result

    def _warmed_up(self, s: Session, done: int, seconds: float) -> None:
        """Say what the session's first step took where its training line will not: the
        interval that line reports leaves it out (``ThroughputMeter.warmed_up``)."""
        steps, interval = s.cfg.training.steps, s.cfg.logging.interval
        if s.runlog is None or done % interval == 0 or done == steps:
            return
        logged = min(steps, (done // interval + 1) * interval)
        log.info(
            "warm-up: iteration %d, the first of this session, took %.1f ms: left out of the elapsed time per "
            "iteration at iteration %d",
            done,
            seconds * 1000,
            logged,
        )

    def _log_train(
        self,
        s: Session,
        done: int,
        result: StepResult,
        lrs: dict,
        base_lr: float,
        meter: ThroughputMeter,
        eta: EtaEstimate,
        force: bool,
    ) -> Optional[dict]:
        """Every ``logging.interval`` steps, at the last step and when the run is about to end
        (``force``): a ``train`` row of metrics.jsonl and the training line (console and
        train.log). Returns the interval's rates (None when nothing was logged)."""
        cfg = s.cfg
        if s.runlog is None or not (done % cfg.logging.interval == 0 or done == cfg.training.steps or force):
            return None
        rates = meter.row(done)
        s.runlog.write(
            {
                "kind": "train",
                "step": done,
                "tokens": done * meter.tokens_per_step,
                "loss": result.loss,
                "grad_norm": result.grad_norm,
                "lr": lrs,
                **rates,
                "skipped": not result.applied,
            }
        )
        line = train_line(
            done,
            cfg.training.steps,
            global_batch_size=cfg.training.global_batch_size,
            loss=result.loss,
            lr=base_lr,
            grad_norm=result.grad_norm,
            rates=rates,
            elapsed_s=self._wall_time(),
            eta_s=eta.seconds_left(done, cfg.training.steps),
            skipped=self._skipped,
        )
        log.info("%s", line)
        self._skipped = 0
        return rates

    def _maybe_evaluate(self, s: Session, evals: EvalSchedule, done: int) -> Optional[Ending]:
        """The held-out loss where the schedule asks for one; a non-finite one ends the run."""
        frac = evals.due(done)
        if frac is None:
            return None
        val = s.backend.evaluate(s.data.eval_batches)
        s.evals.append({"step": done, "fraction": frac, "val_loss": val})
        if s.runlog is not None:
            tokens = done * s.cfg.training.global_batch_size * s.cfg.model.seq_length
            row = {"kind": "eval", "step": done, "fraction": frac, "tokens": tokens, "val_loss": val}
            s.runlog.write({**row, "val_ppl": perplexity(val)})
            log.info("%s", eval_line(done, frac, val))
        if not math.isfinite(val):
            return Ending(Status.DIVERGED, f"validation loss is {val} at step {done}", done)
        return None

    # ------------------------------------------------------------------ outputs
    def _wall_time(self) -> float:
        offset = self.session.resume.wall_offset if self.session is not None else 0.0
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
            "data": s.data_identity,
        }
        if s.branch is not None:
            common["branch_of"] = s.branch
        if s.runlog is not None:
            s.runlog.sync()
        checkpoint.save(
            s.run_dir / CHECKPOINTS_DIR,
            step,
            common,
            s.backend,
            s.scheduler,
            s.dist.rank,
            s.cfg.checkpoint.keep,
        )

    def _finish(self, ending: Ending) -> None:
        """Write ``summary.json``: the one place it is written, on rank 0 only."""
        if not self.is_main:
            return
        cfg, s = self.cfg, self.session
        evals = list(s.evals) if s is not None else []
        final_at = EvalSchedule.of(cfg).final_step
        final = [e["val_loss"] for e in evals if e["step"] == final_at]
        train_rows = [r for r in read_metrics(self.run_dir) if r.get("kind") == "train"]
        done = ending.step if ending.step is not None else (train_rows[-1]["step"] if train_rows else 0)
        summary = RunSummary(
            status=ending.status,
            reason=ending.reason,
            exit_code=int(ending.exit_code),
            steps=done,
            target_steps=cfg.training.steps,
            tokens=done * cfg.training.global_batch_size * cfg.model.seq_length,
            evals=tuple(EvalRecord(e["step"], e["fraction"], e["val_loss"]) for e in evals),
            final_val_loss=final[0] if final else None,
            final_train_loss=train_rows[-1]["loss"] if train_rows else None,
            wall_time_s=self._wall_time(),
            branch_of=s.branch if s is not None else None,
            **run_identity(cfg),
        )
        write_summary(self.run_dir, summary)
        log.info("%s", summary_line(summary))


@contextlib.contextmanager
def _excluded(meter: ThroughputMeter) -> Iterator[None]:
    """Time spent inside does not count toward the logged throughput (evaluation, checkpoints)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        meter.exclude(time.perf_counter() - t0)


def replace_run_dir(cfg: RunConfig, run_dir: str) -> RunConfig:
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=run_dir))

"""One training run, start to finish: the run-directory contract of docs/contracts.md.

Set-up (lock, distributed init, data, patched model, optimizer, scheduler, resume), the
step loop (train, log, evaluate at the configured fractions, checkpoint, stop on
divergence or preemption) and the summary. Exit codes: 0 completed, 1 failed,
2 invalid config, 3 diverged, 4 run directory locked, 75 preempted.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
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

from runconfig import atomic_write_text, dump_yaml, flatten, to_dict
from runconfig.contract import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    EXIT_COMPLETED,
    EXIT_CONFIG,
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_PREEMPTED,
    LOCK_FILE,
    METRICS_FILE,
    PARAMETRIZATION_FILE,
    SUMMARY_FILE,
)
from runconfig.contract import FINAL_STATUSES as FINISHED
from runconfig.schema import RunConfig

# Config keys that may change between a run and its resume (they do not change the math).
RESUMABLE_CHANGES = ("run.dir", "logging.", "checkpoint.", "parallel.cpu_threads", "data.cache_dir")

log = logging.getLogger("train_gpt")


class SetupError(ValueError):
    """Invalid config discovered while setting up (exit 2, nothing trained)."""


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


def eval_schedule(cfg: RunConfig) -> dict[int, float]:
    """Step -> recorded fraction: each ``eval.at`` fraction, plus every ``eval.interval`` steps."""
    steps = cfg.training.steps
    points = {}
    if cfg.eval.interval:
        points.update({s: s / steps for s in range(cfg.eval.interval, steps + 1, cfg.eval.interval)})
    points.update({max(1, round(f * steps)): f for f in cfg.eval.at})
    return dict(sorted(points.items()))


def config_differences(old: dict, new: dict) -> list[str]:
    a, b = flatten(old), flatten(new)
    return [
        f"{k}: {a.get(k)!r} -> {b.get(k)!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k) and not any(k == p or k.startswith(p) for p in RESUMABLE_CHANGES)
    ]


def _setup_logging(run_dir: Path, is_main: bool) -> None:
    log.handlers.clear()
    log.setLevel(logging.INFO if is_main else logging.WARNING)
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    err = logging.StreamHandler(sys.stderr)
    err.setFormatter(fmt)
    log.addHandler(err)
    if is_main:
        fh = logging.FileHandler(run_dir / "train.log")
        fh.setFormatter(fmt)
        log.addHandler(fh)
    log.propagate = False


class Trainer:
    def __init__(self, cfg: RunConfig, force: bool = False) -> None:
        self.cfg = cfg
        self.force = force
        self.run_dir = Path(cfg.run.dir)
        self.rank = int(os.environ.get("RANK", "0"))
        self.is_main = self.rank == 0

    # ------------------------------------------------------------------ entry
    def run(self) -> int:
        from training.metrics import read_summary

        previous = read_summary(self.run_dir)
        if previous and previous.get("status") in FINISHED and not self.force:
            if self.is_main:
                print(f"{self.run_dir}: already {previous['status']}; nothing to do (use --force to retrain)")
            return FINISHED[previous["status"]]
        lock = RunLock(self.run_dir) if self.is_main else None
        if lock is not None and not lock.acquire():
            print(f"error: {self.run_dir} is in use by another process (lock {lock.path})", file=sys.stderr)
            return EXIT_LOCKED
        self.started = time.time()
        self.flag = PreemptionFlag()
        try:
            try:
                self._setup()
            except SetupError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_CONFIG
            return self._loop()
        except Exception as exc:  # a crash still leaves a summary behind
            tb = traceback.format_exc()
            if self.is_main:
                log.error("run failed:\n%s", tb)
                self._write_summary("failed", f"{type(exc).__name__}: {exc}", EXIT_FAILED)
            return EXIT_FAILED
        finally:
            if getattr(self, "runlog", None) is not None:
                self.runlog.close()
            from training.distributed import shutdown

            shutdown()
            if lock is not None:
                lock.release()

    # ------------------------------------------------------------------ set-up
    def _setup(self) -> None:
        from training import checkpoint
        from training.data import build_datasets, data_parallel_plan, eval_micro_batches
        from training.distributed import init_distributed, seed_everything
        from training.metrics import RunLog, truncate_metrics
        from training.model import Placement, build_model, padded_vocab_size, resolve

        cfg = self.cfg
        try:
            cfg.check_data_source()
        except ValueError as exc:
            raise SetupError(str(exc)) from exc
        par = cfg.parallel
        device = par.device if par.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise SetupError("parallel.device: cuda requested but no CUDA device is available")
        bf16 = cfg.training.precision == "bf16" or (cfg.training.precision == "auto" and device == "cuda")
        if bf16 and device == "cpu":
            raise SetupError("training.precision: bf16 needs the GPU path; use fp32 on CPU")
        if device == "cpu":
            threads = par.cpu_threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
            if threads:
                torch.set_num_threads(threads)
            # Denormal floats take a slow microcode path on x86 CPUs (GPUs flush them in bf16
            # anyway); small Adam second moments and scaled branches produce them routinely.
            torch.set_flush_denormal(True)
        self.device, self.bf16 = device, bf16

        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if self.force:
                self._clear_run_dir()
        _setup_logging(self.run_dir, self.is_main)
        self.info = init_distributed(device, par.tensor_model_parallel_size, par.pipeline_model_parallel_size)
        seed_everything(cfg.run.seed, device)

        try:
            cache = cfg.data.cache_dir or str(self.run_dir / ".index_cache")
            self.data = build_datasets(cfg, cache)
            self.plan = data_parallel_plan(cfg)
        except (ValueError, FileNotFoundError) as exc:
            raise SetupError(str(exc)) from exc
        self.eval_batches = eval_micro_batches(self.data.valid, self.plan, cfg.eval.batches)
        self.vocab_size = self.data.tokenizer.vocab_size
        if cfg.model.vocab_size is not None and cfg.model.vocab_size != self.vocab_size and not cfg.data.mock:
            raise SetupError(
                f"model.vocab_size: {cfg.model.vocab_size} disagrees with the data's tokenizer ({self.vocab_size})"
            )
        self.padded_vocab = padded_vocab_size(self.vocab_size, par.tensor_model_parallel_size)

        self.resolved = resolve(cfg)
        model = build_model(cfg, self.padded_vocab, Placement(device=device, bf16=bf16), resolved=self.resolved)
        self.table = self._gather_table(model)
        self.backend = self._backend(model)
        from training.optim import build_scheduler

        self.scheduler = build_scheduler(cfg, self.backend.optimizer)
        self.bound = cfg.training.divergence_loss_bound or math.log(self.vocab_size) + 3.0

        self.config_dict = to_dict(cfg)
        self.start_step, self.evals, self.wall_offset = 0, [], 0.0
        ckpt = checkpoint.latest_checkpoint(self.run_dir / CHECKPOINTS_DIR)
        if ckpt is not None:
            common = json.loads((ckpt / "common.json").read_text())
            self._check_resumable(common, ckpt)
            common = checkpoint.load(ckpt, self.backend, self.scheduler, self.info.rank)
            self.start_step = common["step"]
            self.evals = common["evals"]
            self.wall_offset = common["wall_time_s"]
            log.info("resumed from %s (step %d)", ckpt, self.start_step)
        if self.is_main:
            truncate_metrics(self.run_dir, self.start_step)
            (self.run_dir / SUMMARY_FILE).unlink(missing_ok=True)
            atomic_write_text(self.run_dir / CONFIG_FILE, dump_yaml(cfg))
            atomic_write_text(self.run_dir / PARAMETRIZATION_FILE, json.dumps(self.table, indent=1) + "\n")
            lg = cfg.logging
            self.runlog = RunLog(self.run_dir, lg.tensorboard, lg.wandb, lg.wandb_project, self.config_dict)
        log.info(
            "run %s: %s L=%d n=%d lr=%g on %s (%s, tp=%d pp=%d dp=%d), %d steps x %d sequences",
            self.run_dir,
            cfg.parametrization.preset,
            cfg.model.num_layers,
            cfg.model.hidden_size,
            cfg.optimizer.lr,
            device,
            "bf16" if bf16 else "fp32",
            par.tensor_model_parallel_size,
            par.pipeline_model_parallel_size,
            self.plan.dp_size,
            cfg.training.steps,
            cfg.training.global_batch_size,
        )

    def _clear_run_dir(self) -> None:
        import shutil

        for name in (CHECKPOINTS_DIR, METRICS_FILE, SUMMARY_FILE, "tensorboard"):
            path = self.run_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()

    def _backend(self, model: torch.nn.Module) -> Any:
        from training.backends import CpuBackend, GpuBackend

        try:
            if self.device == "cuda":
                return GpuBackend(self.cfg, model, self.resolved, self.bf16)
            return CpuBackend(self.cfg, model, self.resolved)
        except ValueError as exc:
            raise SetupError(str(exc)) from exc

    def _gather_table(self, model: torch.nn.Module) -> dict:
        """The resolved table with global names and shapes, gathered over pipeline stages."""
        from megatron.core import parallel_state

        from patches.table import build_table, global_parameters

        pp = parallel_state.get_pipeline_model_parallel_world_size()
        offset = parallel_state.get_pipeline_model_parallel_rank() * self.cfg.model.num_layers // pp
        rows = global_parameters(model, parallel_state.get_tensor_model_parallel_world_size(), offset)
        if pp > 1:
            gathered: list = [None] * pp
            dist.all_gather_object(gathered, rows, group=parallel_state.get_pipeline_model_parallel_group())
            rows = sorted({r[0]: r for part in gathered for r in part}.values())
        return build_table(self.resolved, rows)

    def _check_resumable(self, common: dict, ckpt: Path) -> None:
        from patches.table import table_differences

        diffs = table_differences(common["parametrization"], self.table)
        if diffs:
            raise SetupError(
                f"{ckpt}: the resolved parametrization differs from the checkpoint's; refusing to resume:\n  "
                + "\n  ".join(diffs[:20])
            )
        diffs = config_differences(common["config"], self.config_dict)
        if diffs:
            raise SetupError(
                f"{ckpt}: the config differs from the checkpoint's; refusing to resume:\n  " + "\n  ".join(diffs)
            )

    # ------------------------------------------------------------------ loop
    def _loop(self) -> int:
        from tqdm import tqdm

        from training.data import micro_batches
        from training.flops import peak_flops, train_flops_per_step
        from training.optim import group_lrs

        cfg = self.cfg
        steps, gbs, seq = cfg.training.steps, cfg.training.global_batch_size, cfg.model.seq_length
        tokens_per_step = gbs * seq
        evals_at = eval_schedule(cfg)
        flops = train_flops_per_step(cfg, self.padded_vocab) if self.device == "cuda" else None
        peak = peak_flops(torch.cuda.get_device_name()) if self.device == "cuda" else None
        world = self.info.world_size
        above = 0
        window: list[float] = []
        bar = tqdm(
            total=steps,
            initial=self.start_step,
            disable=not (self.is_main and cfg.logging.progress_bar),
            desc=self.run_dir.name,
            unit="step",
            dynamic_ncols=True,
        )
        self.session_start = time.time()
        try:
            for step in range(self.start_step, steps):
                batches = micro_batches(self.data.train, self.plan, step)
                lrs = group_lrs(self.backend.param_groups, self.resolved)
                t0 = time.perf_counter()
                result = self.backend.train_step(batches)
                self.scheduler.step(1)
                dt = time.perf_counter() - t0
                done = step + 1
                window.append(dt)

                reason = None
                if not math.isfinite(result.loss):
                    reason = f"loss is {result.loss} at step {done}"
                elif not math.isfinite(result.grad_norm):
                    reason = f"grad norm is {result.grad_norm} at step {done}"
                else:
                    above = above + 1 if result.loss > self.bound else 0
                    if above >= cfg.training.divergence_patience:
                        reason = f"loss {result.loss:.4g} above bound {self.bound:.4g} at step {done}"

                if self.is_main and (done % cfg.logging.interval == 0 or done == steps or reason):
                    mean_dt = sum(window) / len(window)
                    tflops = flops / mean_dt / world / 1e12 if flops else None
                    self.runlog.write(
                        {
                            "kind": "train",
                            "step": done,
                            "tokens": done * tokens_per_step,
                            "loss": result.loss,
                            "grad_norm": result.grad_norm,
                            "lr": lrs,
                            "step_time_s": mean_dt,
                            "tokens_per_s": tokens_per_step / mean_dt,
                            "tflops_per_gpu": tflops,
                            "mfu": tflops * 1e12 / peak if tflops and peak else None,
                            "skipped": not result.applied,
                        }
                    )
                    window = []
                if reason:
                    log.warning("diverged: %s", reason)
                    bar.close()
                    self._finish("diverged", reason, EXIT_DIVERGED, done)
                    return EXIT_DIVERGED

                if done in evals_at:
                    val = self.backend.evaluate(self.eval_batches)
                    frac = evals_at[done]
                    self.evals.append({"step": done, "fraction": frac, "val_loss": val})
                    if self.is_main:
                        self.runlog.write(
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
                ck = cfg.checkpoint
                if ck.interval and done % ck.interval == 0 and done < steps:
                    self._save(done)
                if self.flag.raised_anywhere():
                    self._save(done)
                    why = f"preempted ({self.flag.signal or 'signal on another rank'}) at step {done}"
                    log.warning("%s: checkpoint saved, exiting %d", why, EXIT_PREEMPTED)
                    self._write_summary("failed", why, EXIT_PREEMPTED, done)
                    return EXIT_PREEMPTED
        finally:
            bar.close()
        if cfg.checkpoint.final:
            self._save(steps)
        self._finish("completed", None, EXIT_COMPLETED, steps)
        return EXIT_COMPLETED

    # ------------------------------------------------------------------ outputs
    def _wall_time(self) -> float:
        return self.wall_offset + (time.time() - getattr(self, "session_start", self.started))

    def _save(self, step: int) -> None:
        from megatron.core import parallel_state

        from training import checkpoint

        common = {
            "step": step,
            "consumed_samples": step * self.cfg.training.global_batch_size,
            "evals": self.evals,
            "wall_time_s": self._wall_time(),
            "layout": {
                "tp": parallel_state.get_tensor_model_parallel_world_size(),
                "pp": parallel_state.get_pipeline_model_parallel_world_size(),
                "dp": parallel_state.get_data_parallel_world_size(),
            },
            "parametrization": self.table,
            "config": self.config_dict,
        }
        if self.is_main:
            self.runlog.sync()
        checkpoint.save(
            self.run_dir / CHECKPOINTS_DIR,
            step,
            common,
            self.backend,
            self.scheduler,
            self.info.rank,
            self.cfg.checkpoint.keep,
        )

    def _finish(self, status: str, reason: Optional[str], code: int, step: int) -> None:
        if self.is_main:
            self._write_summary(status, reason, code, step)

    def _write_summary(self, status: str, reason: Optional[str], code: int, step: Optional[int] = None) -> None:
        from training.metrics import read_metrics, write_summary

        cfg = self.cfg
        evals = list(getattr(self, "evals", []))
        final_at = max(eval_schedule(cfg))
        final = [e["val_loss"] for e in evals if e["step"] == final_at]
        train_rows = [r for r in read_metrics(self.run_dir) if r.get("kind") == "train"]
        resolved = getattr(self, "resolved", None)
        done = step if step is not None else (train_rows[-1]["step"] if train_rows else 0)
        write_summary(
            self.run_dir,
            {
                "status": status,
                "reason": reason,
                "exit_code": code,
                "steps": done,
                "target_steps": cfg.training.steps,
                "tokens": done * cfg.training.global_batch_size * cfg.model.seq_length,
                "evals": evals,
                "final_val_loss": final[0] if final else None,
                "final_train_loss": train_rows[-1]["loss"] if train_rows else None,
                "wall_time_s": self._wall_time(),
                "preset": cfg.parametrization.preset,
                "num_layers": cfg.model.num_layers,
                "hidden_size": cfg.model.hidden_size,
                "lr": cfg.optimizer.lr,
                "block_multiplier": cfg.parametrization.block_multiplier,
                "seed": cfg.run.seed,
                "base_num_layers": resolved.base_num_layers if resolved else cfg.parametrization.base_num_layers,
                "optimizer": cfg.optimizer.name,
            },
        )


def replace_run_dir(cfg: RunConfig, run_dir: str) -> RunConfig:
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, dir=run_dir))

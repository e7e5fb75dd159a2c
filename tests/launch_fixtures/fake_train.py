"""A stand-in for train_gpt.py that honours its run-directory contract (docs/contracts.md).

Same command line (``--config FILE [key=value ...] [--force]``, plus ``--local_rank=N`` /
``--local-rank N``), same config loading (``runconfig.load_config(RunConfig, ...)``: a bad
key exits 2), the ``flock`` on ``RUN_DIR/.lock`` (busy: exit 4, said in ``$DEPTHMUP_ATTEMPT_EXIT``
only, never in the run directory), atomic ``config.yaml``,
``metrics.jsonl`` (rows past the restored checkpoint dropped on resume),
``checkpoints/step_XXXXXXXX`` + ``latest``, ``summary.json``, and the exit codes 0/1/3/75 (``rundir.contract``).
A run dir whose summary says completed/diverged is left alone unless ``--force``.

Test knobs (environment):
  FAKE_STEP_SECONDS   sleep per step (default 0.02)
  FAKE_STARTUP_SECONDS  sleep before anything, with default signal handling (like a slow import)
  FAKE_DIVERGE_LR     optimizer.lr above this diverges at step 3 (default 0.01)
  FAKE_FAIL_MATCH     runs whose run.dir contains this text crash (exit 1) at step 2 ...
  FAKE_FAIL_TIMES     ... on their first N starts (default: always)
  FAKE_FAIL_REASON    ... with this summary reason (default: RuntimeError: injected failure at step 2)
  FAKE_OOM_MATCH      runs whose run.dir contains this text fail at their first step with a CUDA
                      out-of-memory reason in summary.json (exit 1) ...
  FAKE_OOM_TIMES      ... on their first N starts (default 1)
  FAKE_SAVE_SECONDS   sleep before the checkpoint a stop signal asks for (a large model's save)
  FAKE_TEARDOWN_SECONDS  sleep after summary.json is written, with default signal handling (like
                      the interpreter's exit, which restores them, tearing down torch)
  FAKE_REFUSE_RANK    under torchrun/srun, this rank refuses its resume as train_gpt.py does (exit 2,
                      exit.json) before joining the collective; the others wait in it and exit 75
                      on SIGTERM, as train_gpt.py does while it starts (nothing trained)
Every start appends {"event": "start", "pid", "start_step", "time"} to RUN_DIR/fake_events.jsonl
and every exit an "end" event, so tests can count attempts and check they never overlap.
Under torchrun (WORLD_SIZE > 1) the ranks all-reduce over gloo and rank 0 writes dist.json.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import shutil
import signal
import sys
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
# patches/__init__.py imports Megatron (seconds); the schema needs only patches.parametrization,
# so this stand-in registers the package without running its __init__ (this process only).
_pkg = types.ModuleType("patches")
_pkg.__path__ = [str(REPO / "patches")]
sys.modules.setdefault("patches", _pkg)

from jobscripts.atomic import atomic_write_text  # noqa: E402
from runconfig import ConfigError, dump_yaml, load_config  # noqa: E402
from runconfig.schema import RunConfig, run_identity  # noqa: E402
from rundir import files as rd  # noqa: E402  (the run-directory format, as the real trainer writes it)
from rundir.contract import EXIT_OF_STATUS, ExitCode, Status  # noqa: E402

PREEMPT = {"signal": None}


def _on_signal(signum: int, _frame: object) -> None:
    PREEMPT["signal"] = signum


def _event(run_dir: Path, **fields: object) -> None:
    with open(run_dir / "fake_events.jsonl", "a") as fh:
        fh.write(json.dumps({**fields, "pid": os.getpid(), "time": time.time()}) + "\n")


def _starts(run_dir: Path) -> int:
    path = run_dir / "fake_events.jsonl"
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text().splitlines() if json.loads(line)["event"] == "start")


def _save_checkpoint(run_dir: Path, step: int, keep: int) -> None:
    folder = rd.checkpoint_dir(run_dir, step)
    ckpts = folder.parent
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / "state.json", json.dumps({"step": step}))
    atomic_write_text(folder / rd.COMMON_FILE, json.dumps({"step": step}))
    atomic_write_text(ckpts / rd.LATEST, folder.name)
    for old in sorted(p for p in ckpts.iterdir() if p.is_dir() and p.name.startswith("step_"))[:-keep]:
        shutil.rmtree(old)


def _restore(run_dir: Path) -> int:
    latest = rd.latest_checkpoint(run_dir)
    return 0 if latest is None else json.loads((latest / "state.json").read_text())["step"]


def _metrics(run_dir: Path, upto: int) -> list[dict]:
    rd.truncate_metrics(run_dir, upto)
    return rd.read_metrics(run_dir)


def _append(run_dir: Path, row: dict) -> None:
    with open(run_dir / rd.METRICS_FILE, "a") as fh:
        fh.write(rd.metrics_line(row))


def _summary(run_dir: Path, cfg: RunConfig, status: Status, reason, code: int, step: int, started: float) -> None:
    rows = _metrics(run_dir, step)
    evals = [
        {"step": r["step"], "fraction": r["fraction"], "val_loss": r["val_loss"]} for r in rows if r["kind"] == "eval"
    ]
    train = [r for r in rows if r["kind"] == "train"]
    tokens = step * cfg.training.global_batch_size * cfg.model.seq_length
    final_frac = max(cfg.eval.at)
    summary = rd.RunSummary(
        status=status,
        reason=reason,
        exit_code=code,
        steps=step,
        target_steps=cfg.training.steps,
        tokens=tokens,
        evals=tuple(rd.EvalRecord(e["step"], e["fraction"], e["val_loss"]) for e in evals),
        final_val_loss=next((e["val_loss"] for e in evals if e["fraction"] == final_frac), None),
        final_train_loss=train[-1]["loss"] if train else None,
        wall_time_s=time.time() - started,
        **run_identity(cfg),
    )
    rd.write_summary(run_dir, summary)


def _all_reduce(rank: int, world: int) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world)
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    return float(value.item())


def main() -> int:
    time.sleep(float(os.environ.get("FAKE_STARTUP_SECONDS", "0")))  # like importing Megatron: no handlers yet
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None)
    args, overrides = parser.parse_known_args()
    bad = [o for o in overrides if o.startswith("-")]
    if bad:
        print(f"fake_train: unknown option {bad[0]}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        cfg = load_config(RunConfig, args.config, overrides)
        cfg.check_data_source()
    except (ConfigError, ValueError) as exc:
        print(f"fake_train: {exc}", file=sys.stderr)
        return ExitCode.USAGE

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    run_dir = Path(cfg.run.dir)
    if world > 1 and os.environ.get("FAKE_REFUSE_RANK") == str(rank):
        reason = f"{run_dir}/checkpoints/step_00000002: the config differs from the checkpoint's; refusing to resume"
        print(f"fake_train: {reason}", file=sys.stderr)
        rd.write_exit_record(run_dir, rd.ExitRecord(ExitCode.USAGE, reason, rank))
        return ExitCode.USAGE
    if world > 1 and os.environ.get("FAKE_REFUSE_RANK") is not None:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(ExitCode.RESUMABLE))
    if world > 1:
        total = _all_reduce(rank, world)
        if rank != 0:
            import torch.distributed as dist

            dist.barrier()
            return ExitCode.OK
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = open(run_dir / ".lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"fake_train: {run_dir} is locked by another process", file=sys.stderr)
        rd.write_attempt_exit(rd.ExitRecord(ExitCode.BUSY, f"{run_dir} is locked by another process", rank))
        return ExitCode.BUSY
    code = _train(cfg, run_dir, args.force)
    if teardown := float(os.environ.get("FAKE_TEARDOWN_SECONDS", "0")):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        time.sleep(teardown)
    if world > 1:
        import torch.distributed as dist

        atomic_write_text(run_dir / "dist.json", json.dumps({"world_size": world, "all_reduce_sum": total}))
        dist.barrier()
    return code


def _train(cfg: RunConfig, run_dir: Path, force: bool) -> int:
    recorded = rd.read_summary(run_dir)
    if recorded is not None and recorded.final and not force:
        _event(run_dir, event="skip", status=recorded.status)
        return recorded.exit_code
    if force:
        for name in ("summary.json", "metrics.jsonl"):
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    started = time.time()
    attempt = _starts(run_dir) + 1
    step = _restore(run_dir)
    _metrics(run_dir, step)
    _event(
        run_dir,
        event="start",
        start_step=step,
        attempt=attempt,
        omp=os.environ.get("OMP_NUM_THREADS"),
        gpus=os.environ.get("CUDA_VISIBLE_DEVICES"),
        mps=os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
        shutdown_timeout=os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"),
    )
    atomic_write_text(run_dir / "config.yaml", dump_yaml(cfg))

    steps = cfg.training.steps
    eval_steps = {max(1, round(f * steps)): f for f in cfg.eval.at}
    step_s = float(os.environ.get("FAKE_STEP_SECONDS", "0.02"))
    diverge_lr = float(os.environ.get("FAKE_DIVERGE_LR", "0.01"))
    fail_match = os.environ.get("FAKE_FAIL_MATCH")
    fail_times = int(os.environ.get("FAKE_FAIL_TIMES", "1000000"))
    oom_match = os.environ.get("FAKE_OOM_MATCH")
    oom_times = int(os.environ.get("FAKE_OOM_TIMES", "1"))

    def end(status: Status, reason) -> int:
        code = EXIT_OF_STATUS[status]
        _summary(run_dir, cfg, status, reason, code, step, started)
        print(f"fake_train: {status} {step} steps (exit {int(code)})", flush=True)
        _event(run_dir, event="end", exit_code=int(code), step=step)
        return code

    if oom_match and oom_match in str(run_dir) and attempt <= oom_times:
        time.sleep(step_s)
        return end(Status.FAILED, "OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB")
    while step < steps:
        if PREEMPT["signal"] is not None:
            time.sleep(float(os.environ.get("FAKE_SAVE_SECONDS", "0")))
            _save_checkpoint(run_dir, step, cfg.checkpoint.keep)
            return end(Status.PREEMPTED, f"preempted by signal {PREEMPT['signal']} at step {step}")
        if fail_match and fail_match in str(run_dir) and attempt <= fail_times and step == 2:
            return end(
                Status.FAILED, os.environ.get("FAKE_FAIL_REASON", f"RuntimeError: injected failure at step {step}")
            )
        time.sleep(step_s)
        step += 1
        loss = 6.0 / (1.0 + step * cfg.optimizer.lr * 50) + 0.01 * cfg.model.num_layers
        if cfg.optimizer.lr > diverge_lr and step >= 3:
            _append(run_dir, {"kind": "train", "step": step, "loss": math.nan})
            return end(Status.DIVERGED, f"loss is nan at step {step}")
        _append(run_dir, {"kind": "train", "step": step, "tokens": step * 512, "loss": loss, "grad_norm": 1.0})
        if step in eval_steps:
            row = {
                "kind": "eval",
                "step": step,
                "fraction": eval_steps[step],
                "tokens": step * 512,
                "val_loss": loss + 0.1,
            }
            _append(run_dir, row)
        _save_checkpoint(run_dir, step, cfg.checkpoint.keep)
    return end(Status.COMPLETED, None)


if __name__ == "__main__":
    sys.exit(main())

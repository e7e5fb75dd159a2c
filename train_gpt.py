"""Megatron-core GPT pretraining with width muP + depth-muP patches.

    python train_gpt.py --config configs/tiny_cpu.yaml [key=value ...] [--force]
    torchrun --nproc-per-node 8 train_gpt.py --config configs/gpt_100m_gpu.yaml

Writes the run directory of docs/contracts.md (config.yaml, parametrization.json,
metrics.jsonl, summary.json, checkpoints/) and resumes from it when rerun. Exit codes:
0 completed, 1 failed, 2 invalid config, 3 diverged, 4 run directory locked, 75 preempted.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rundir.contract import ExitCode

# Standard library only above: a signal during the imports below (several seconds: torch,
# megatron) must reach main's handler, never Python's default (a traceback, or death by signal).
STARTUP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
TORCHRUN_WORKER_ENV = "TORCHELASTIC_RUN_ID"  # set by torchrun's agent in each rank's environment


class StartupInterrupted(BaseException):
    """SIGTERM/SIGINT arrived before the trainer took its own handlers: nothing was trained."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.name = signal.Signals(signum).name


class StartupSignals:
    """The start-up's handler: the first SIGTERM/SIGINT is recorded (``name``) and acted on once
    the imports are done, a second stops the start-up at once.

    Raising from the first would put the exception wherever the imports happen to be, and some
    import machinery swallows it: torch's C module imports numpy while it is created and carries
    on without it when that import fails, so a signal there was lost (the run trained on,
    ignoring its SIGTERM) or left numpy half-imported (exit 1 on a RecursionError instead of 75).
    """

    def __init__(self) -> None:
        self.name: str | None = None

    def __call__(self, signum: int, _frame: object) -> None:
        if self.name is not None:
            raise StartupInterrupted(signum)
        self.name = signal.Signals(signum).name


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from runconfig import OverridesParser
    from runconfig.schema import RunConfig

    parser = OverridesParser(prog="train_gpt.py", description=__doc__.splitlines()[0], override_schema=RunConfig)
    parser.add_argument("--config", required=True, help="run config YAML (see configs/ and runconfig/schema.py)")
    parser.add_argument("--force", action="store_true", help="retrain even if the run directory says it finished")
    # The DeepSpeed launcher appends --local_rank=N; torchrun and SLURM use LOCAL_RANK.
    parser.add_argument(
        "--local_rank", "--local-rank", dest="local_rank", type=int, default=None, help=argparse.SUPPRESS
    )
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. optimizer.lr=3e-3")
    return parser.parse_intermixed_args(argv)  # flags may sit among the key=value overrides


def record_attempt_exit(code: int, reason: str) -> None:
    """An ending before the Trainer took over, recorded in this attempt's own exit file where its
    launcher named one (``$DEPTHMUP_ATTEMPT_EXIT``): torchrun exits 1 whatever its ranks exit
    with, and srun 75 when ``--kill-on-bad-exit`` stopped the other ranks while they started (a
    preemption to requeue, up to ``max_requeues`` times), so without it the launcher saw a crash
    or a preemption, not bad input (2), nor a crash to stop at (1: an import failing on a broken
    node would have been requeued to crash again)."""
    from rundir.files import ExitRecord, write_attempt_exit

    write_attempt_exit(ExitRecord(code, reason, int(os.environ.get("RANK", "0"))))


def main(argv: list[str] | None = None) -> ExitCode:
    # Until the Trainer installs its preemption flag (SIGTERM/SIGINT then checkpoint and exit 75),
    # a signal stops the start-up with one line and the contract's exit 75: nothing was trained,
    # nothing is lost, a rerun starts (or resumes) the run. A signal after the check below and
    # before the flag exists is handed to the flag (``received``).
    received = StartupSignals()
    previous = {sig: signal.signal(sig, received) for sig in STARTUP_SIGNALS}
    if TORCHRUN_WORKER_ENV in os.environ:  # torchrun sets no parent-death signal: a SIGKILLed
        from jobscripts.parent_death import die_with_parent  # agent left its ranks training on

        die_with_parent(os.getppid())  # now they get SIGTERM: checkpoint and exit 75
    trainer = None
    try:
        from jobscripts.quiet import quiet_libraries
        from rundir.contract import ExitCode

        quiet_libraries()
        try:
            args = parse_args(argv)
        except SystemExit as exc:  # argparse's usage error (its message printed above)
            if exc.code == ExitCode.USAGE:
                record_attempt_exit(ExitCode.USAGE, "train_gpt.py: bad command line (see its error message)")
            raise
        if args.local_rank is not None:
            os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
        from runconfig import ConfigError, load_config
        from runconfig.schema import RunConfig

        try:
            cfg = load_config(RunConfig, args.config, args.overrides)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            record_attempt_exit(ExitCode.USAGE, str(exc))
            return ExitCode.USAGE
        from training.runner import Trainer

        if received.name is not None:
            raise StartupInterrupted(signal.Signals[received.name])
        trainer = Trainer(cfg, force=args.force, received=lambda: received.name)
        return trainer.run()
    except Exception as exc:  # the Trainer records its own crashes; after a stop signal a crash
        if trainer is None and received.name is None:  # may be the stop's doing
            from rundir.contract import ExitCode  # (again: the crash may have been its first import)

            record_attempt_exit(ExitCode.FAILED, f"crashed while starting: {type(exc).__name__}: {exc}")
        raise
    except StartupInterrupted as exc:
        for sig in STARTUP_SIGNALS:  # a second Ctrl-C must not turn the one line into a traceback
            signal.signal(sig, signal.SIG_IGN)
        print(
            f"train_gpt.py: interrupted by {exc.name} while starting, nothing trained: rerun to start (or resume)",
            file=sys.stderr,
        )
        from rundir.contract import ExitCode  # (again: the signal may have cut its first import short)

        return ExitCode.RESUMABLE
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) in (received, signal.SIG_IGN):  # the Trainer's own stay
                signal.signal(sig, handler)


if __name__ == "__main__":
    code = main()
    # The run's ending is decided (and, past the config check, recorded in summary.json): a stop
    # signal during the interpreter's exit, which runs with default handlers and takes over a
    # second with torch loaded, must not turn a completed run's exit 0 into death by signal.
    for sig in STARTUP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(code)

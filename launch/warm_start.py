"""Start CPU trainers by forking a process that has already imported them (``executor.start: fork``).

Importing torch and megatron-core takes about 6 s per process on this project's 2-core
machines, as long as training a depth-2 model of the CPU demo: a sweep of a hundred short
runs spends a fifth of its wall time importing. With ``start: fork`` the local executor
imports the trainer once (:func:`preload`) and forks one child per run, which calls
``train_gpt.main(args)`` exactly as ``python train_gpt.py args`` would. Only CPU runs of
the in-tree trainer are forked (CUDA does not survive a fork; any other trainer command is
exec'd as before). The parent never runs a torch operation, so no thread pool is forked.

The child is a :class:`ForkedTrainer`, which offers the part of ``subprocess.Popen`` that
the executor uses (``pid``, ``poll``, ``wait``, ``returncode``, ``send_signal``, ``terminate``),
and gets the same parent-death signal as an exec'd child (:mod:`launch.processes`).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Optional

from launch.commands import DEFAULT_TRAINER_SCRIPT
from launch.processes import FORWARDED_SIGNALS, die_with_parent

START_METHODS = ("exec", "fork")


def forkable(argv: Sequence[str], gpus: Sequence[str]) -> bool:
    """True for ``[this python, <repo>/train_gpt.py, ...]`` on a slot without GPUs."""
    return (
        not gpus
        and len(argv) >= 2
        and Path(argv[0]).resolve() == Path(sys.executable).resolve()
        and Path(argv[1]).resolve() == DEFAULT_TRAINER_SCRIPT
    )


# What a CPU trainer imports before its first step; the trainer imports most of it lazily
# (inside functions), so naming train_gpt alone would leave megatron-core to every child.
PRELOAD_MODULES = (
    "train_gpt",
    "training.runner",
    "training.backends",
    "training.checkpoint",
    "training.data",
    "training.distributed",
    "training.flops",
    "training.metrics",
    "training.model",
    "training.optim",
    "patches",
    "patches.table",
    "data_prep.tokenizer",
    "megatron.core",
    "megatron.core.distributed",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.optimizer",
    "megatron.core.pipeline_parallel.schedules",
)


def preload() -> None:
    """Import what every trainer process imports (the repo root is on sys.path: launch runs
    from it). Idempotent: imports are cached."""
    import warnings

    with warnings.catch_warnings():  # the children's own filters (train_gpt.main) hide these too
        warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*not installed.*")
        for name in PRELOAD_MODULES:
            importlib.import_module(name)


class ForkedTrainer:
    """A forked child running ``train_gpt.main``; reaped with ``waitpid`` like a Popen."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)  # -N for signal N, as Popen
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"forked trainer {self.pid} still running after {timeout} s")
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def fork_trainer(argv: Sequence[str], *, env: Mapping[str, str], stdout: IO[str]) -> ForkedTrainer:
    """Fork a child that runs ``train_gpt.main(argv[2:])`` with ``env`` and output to ``stdout``.

    Call :func:`preload` first, or the child pays the imports itself (still correct).
    """
    preexec = die_with_parent(os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedTrainer(pid)
    code = 1
    try:  # the child: never return into the executor's code
        preexec()
        for sig in FORWARDED_SIGNALS:  # the executor's forwarding handlers are not ours
            signal.signal(sig, signal.SIG_DFL)
        os.dup2(stdout.fileno(), 1)
        os.dup2(stdout.fileno(), 2)
        # new stream objects on fds 1 and 2: the inherited ones may be a caller's replacements
        sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(argv[1:])
        import train_gpt

        code = train_gpt.main(list(argv[2:]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report like an uncaught exception in a fresh process
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)

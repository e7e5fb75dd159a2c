"""Child processes that cannot silently outlive launch.

Each trainer is started with ``PR_SET_PDEATHSIG=SIGTERM`` (Linux): if the launching process
dies, even by SIGKILL, the kernel sends the child SIGTERM, which ``train_gpt.py`` answers by
writing a checkpoint and exiting 75. The signal is tied to the *thread* that forked, so
children must be started from the main thread (the executors are single-threaded).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, Optional, Union

from jobscripts import parent_death

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def with_repo_on_path(repo: os.PathLike, environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with ``repo`` first on ``PYTHONPATH``, keeping what was there: packages carried
    on ``PYTHONPATH`` (a GPU node's wheels in /tmp/site) must stay importable in the child."""
    path = os.pathsep.join(p for p in (str(repo), environ.get("PYTHONPATH", "")) if p)
    return {**environ, "PYTHONPATH": path}


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A function for the child, run right after the fork: send it ``sig`` when ``parent_pid`` dies."""

    def preexec() -> None:
        parent_death.die_with_parent(parent_pid, sig)

    return preexec


def start_child(
    argv: Sequence[str],
    *,
    env: Optional[Mapping[str, str]] = None,
    stdout: Union[int, IO, None] = None,
    cwd: Optional[str] = None,
) -> subprocess.Popen:
    """``Popen(argv)`` whose process gets SIGTERM when this process dies."""
    return subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        stdout=stdout,
        stderr=subprocess.STDOUT if stdout is not None else None,
        cwd=cwd,
        preexec_fn=die_with_parent(os.getpid()),
    )


@contextmanager
def forwarding_signals(children: Callable[[], Sequence[subprocess.Popen]]) -> Iterator[list[int]]:
    """While active, SIGTERM/SIGINT/SIGHUP are forwarded as SIGTERM to ``children()`` and recorded
    in the yielded list (the caller stops starting work once it is non-empty)."""
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        received.append(signum)
        for proc in children():
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    previous = {sig: signal.signal(sig, handler) for sig in FORWARDED_SIGNALS}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

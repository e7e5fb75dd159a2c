"""A time limit a benchmark keeps between its rounds, so that a device call's hard limit
(``timeout``) never cuts a round off and loses what the finished rounds measured.

A device call lends at most 10 minutes and a session 30: the benchmarks run fewer rounds when
time is short, print and record how many they ran, and end with their summary.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import time


def time_limit(text: str) -> float:
    """argparse type of ``--time-limit``: positive seconds (argparse exits 2 naming the option)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return seconds


def add_time_limit(parser: argparse.ArgumentParser) -> None:
    """``--time-limit S``, as every benchmark that runs rounds takes it."""
    parser.add_argument("--time-limit", type=time_limit, help="seconds: run fewer rounds rather than pass it")


class TimeLimit(BaseException):
    """The deadline passed inside a block run by ``Deadline.bounded`` (a BaseException, so that
    the ``except Exception`` of the code it interrupts does not swallow it)."""


class Stopped(BaseException):
    """SIGTERM arrived inside ``stop_on_sigterm``: the stage's ``timeout`` is ending the process."""


@contextlib.contextmanager
def stop_on_sigterm():
    """SIGTERM raises ``Stopped`` (once: a second one is ignored) instead of ending the process
    at once, so a benchmark can write what it has measured before it exits. Main thread only."""

    def on_term(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Stopped("SIGTERM (the stage's time limit)")

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class Deadline:
    """``seconds`` from now (None: no limit). ``allows(s)``: whether ``s`` more seconds fit."""

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and seconds <= 0:
            raise ValueError(f"--time-limit must be positive, got {seconds}")
        self.seconds = seconds
        self.end = None if seconds is None else time.monotonic() + seconds

    def left(self) -> float:
        return float("inf") if self.end is None else self.end - time.monotonic()

    def allows(self, seconds: float) -> bool:
        return seconds <= self.left()

    @contextlib.contextmanager
    def bounded(self):
        """Run the block until the deadline at most: SIGALRM raises ``TimeLimit`` inside it when
        the deadline passes (a set-up with no bound of its own, such as a first ``torch.compile``).
        No limit: the block runs unbounded. Main thread only."""
        if self.end is None:
            yield
            return
        left = self.left()
        if left <= 0:
            raise TimeLimit(f"the time limit ({self.seconds:.0f} s) had passed")

        def on_alarm(signum, frame):
            raise TimeLimit(f"the time limit ({self.seconds:.0f} s) passed")

        old = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, left)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


class Rounds:
    """Up to ``planned`` rounds while the next one, costed as the longest so far plus ``reserve``
    (the seconds what comes after the rounds needs), fits the deadline. The first always runs."""

    def __init__(self, planned: int, deadline: Deadline, reserve=lambda: 0.0) -> None:
        self.planned, self.deadline, self.reserve = planned, deadline, reserve
        self.longest = 0.0
        self.done = 0
        self.stopped_early = False
        self.stopped_by = ""  # what ended the rounds from outside (stop), if anything did

    def __iter__(self):
        for r in range(self.planned):
            if r and not self.deadline.allows(self.longest + self.reserve()):
                self.stopped_early = True
                return
            t0 = time.monotonic()
            yield r
            self.longest = max(self.longest, time.monotonic() - t0)
            self.done = r + 1

    def stop(self, why: str) -> None:
        """The rounds were ended from outside (``Stopped``) inside round ``done``: it does not count."""
        self.stopped_early, self.stopped_by = True, why

    def note(self) -> str:
        """'' when every planned round ran, else a line saying how many did and why."""
        if not self.stopped_early:
            return ""
        why = self.stopped_by or f"time limit ({self.deadline.seconds:.0f} s)"
        return f"{why}: {self.done} of {self.planned} rounds ran"

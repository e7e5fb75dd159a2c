"""A time limit a benchmark keeps between its rounds, so that a device call's hard limit
(``timeout``) never cuts a round off and loses what the finished rounds measured.

A device call lends at most 10 minutes and a session 30: the benchmarks run fewer rounds when
time is short, print and record how many they ran, and end with their summary.
"""

from __future__ import annotations

import argparse
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


class Rounds:
    """Up to ``planned`` rounds while the next one, costed as the longest so far plus ``reserve``
    (the seconds what comes after the rounds needs), fits the deadline. The first always runs."""

    def __init__(self, planned: int, deadline: Deadline, reserve=lambda: 0.0) -> None:
        self.planned, self.deadline, self.reserve = planned, deadline, reserve
        self.longest = 0.0
        self.done = 0
        self.stopped_early = False

    def __iter__(self):
        for r in range(self.planned):
            if r and not self.deadline.allows(self.longest + self.reserve()):
                self.stopped_early = True
                return
            t0 = time.monotonic()
            yield r
            self.longest = max(self.longest, time.monotonic() - t0)
            self.done = r + 1

    def note(self) -> str:
        """'' when every planned round ran, else a line saying how many did and why."""
        if not self.stopped_early:
            return ""
        return f"time limit ({self.deadline.seconds:.0f} s): {self.done} of {self.planned} rounds ran"

"""The study's console lines: ``[demo] ...`` on stderr, flushed (runs write their own logs)."""

from __future__ import annotations

import sys


def log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)

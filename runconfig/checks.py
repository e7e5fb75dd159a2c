"""Value checks shared by the config schemas; each message starts with the dotted key."""

from __future__ import annotations


def check_choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{key}: must be one of {list(choices)}, got {value!r}")


def check_at_least(key: str, value: float | None, low: float, *, optional: bool = False) -> None:
    """``value >= low``; ``None`` passes only when the key is ``optional``."""
    if value is None and optional:
        return
    if value is None or value < low:
        raise ValueError(f"{key}: must be >= {low}, got {value!r}")


def check_fraction(key: str, value: float | None) -> None:
    """``value`` in [0, 1], or ``None``."""
    if value is not None and not 0.0 <= value <= 1.0:
        raise ValueError(f"{key}: must be in [0, 1], got {value!r}")

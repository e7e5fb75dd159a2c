"""Value checks shared by the config schemas; each message starts with the dotted key."""

from __future__ import annotations

from typing import Any, Literal, get_args, get_origin

FLOAT32_MAX = 3.4028234663852886e38  # torch keeps step sizes as float32 scalars
SEED_MAX = 2**32 - 1  # numpy's seed range (np.random.seed, megatron's dataset RandomState)


def choices_of(choices: Any) -> tuple[Any, ...]:
    """The values of a ``Literal[...]`` type, or the given tuple itself."""
    return get_args(choices) if get_origin(choices) is Literal else tuple(choices)


def check_choice(key: str, value: Any, choices: Any) -> None:
    """``value`` is one of ``choices`` (a tuple or a ``Literal`` type)."""
    allowed = choices_of(choices)
    if value not in allowed:
        raise ValueError(f"{key}: must be one of {list(allowed)}, got {value!r}")


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


def check_below(key: str, value: float, low: float, high: float) -> None:
    """``value`` in ``[low, high)`` (NaN fails), e.g. an Adam beta in [0, 1)."""
    if not low <= value < high:
        raise ValueError(f"{key}: must be in [{low:g}, {high:g}), got {value!r}")


def check_seed(key: str, seed: int) -> None:
    """``seed`` in numpy's seed range."""
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"{key}: must be in [0, 2**32 - 1] (numpy's seed range), got {seed!r}")

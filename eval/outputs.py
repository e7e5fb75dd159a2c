"""JSON helpers for the outputs of ``python -m eval``; atomic writes come from :mod:`runconfig`."""

from __future__ import annotations

import io
import json
import math
import os
from typing import Any

from runconfig import atomic_write_bytes, atomic_write_text

__all__ = ["atomic_write_bytes", "atomic_write_text", "json_safe", "write_json"]


def json_safe(value: Any) -> Any:
    """Replace non-finite floats by ``None`` (strict JSON has no NaN) and numpy scalars by Python ones."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_json(path: str | os.PathLike, data: Any) -> None:
    buf = io.StringIO()
    json.dump(json_safe(data), buf, indent=2, allow_nan=False)
    buf.write("\n")
    atomic_write_text(path, buf.getvalue())

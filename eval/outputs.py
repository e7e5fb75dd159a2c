"""JSON helpers for the outputs of ``python -m eval``; atomic writes come from :mod:`jobscripts.atomic`, the non-finite convention from :mod:`rundir.files`.

Values the analysis could not compute are ``None`` before they get here (written ``null``).
"""

from __future__ import annotations

import io
import json
import os
from typing import Any

from jobscripts.atomic import atomic_write_bytes, atomic_write_text
from rundir.files import json_safe  # the toolkit's one convention: non-finite -> "nan"/"inf"/"-inf"

__all__ = ["atomic_write_bytes", "atomic_write_text", "json_safe", "write_json"]


def write_json(path: str | os.PathLike, data: Any) -> None:
    buf = io.StringIO()
    json.dump(json_safe(data), buf, indent=2, allow_nan=False)
    buf.write("\n")
    atomic_write_text(path, buf.getvalue())

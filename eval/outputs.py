"""JSON helpers for the outputs of ``python -m eval``; atomic writes come from :mod:`jobscripts.atomic`, the non-finite convention from :mod:`rundir.files`;
:func:`number`: every number eval prints (text, Markdown, HTML, figures), written without a signed zero;
:func:`lr_text`: every LR eval labels (legends, notes), as the table has it.

Values the analysis could not compute are ``None`` before they get here (written ``null``).
"""

from __future__ import annotations

import io
import json
import math
import os
from typing import Any

from jobscripts.atomic import atomic_write_bytes, atomic_write_text
from rundir.files import json_safe  # the toolkit's one convention: non-finite -> "nan"/"inf"/"-inf"

__all__ = ["atomic_write_bytes", "atomic_write_text", "json_safe", "lr_text", "number", "write_json"]


def number(x: float, spec: str = ".3f") -> str:
    """``format(x, spec)``, but a value that rounds to zero is written as zero is (``+0.000``, not
    ``-0.000``: a least-squares slope of equal optima is -9e-16, a regret -1e-17). Only the text:
    JSON and CSV keep the value itself."""
    text = format(x, spec)
    if text.lstrip().startswith("-"):
        try:
            if float(text) == 0.0:
                return format(0.0, spec)
        except ValueError:  # a spec whose text is not a number (none used now): as format gives it
            pass
    return text


def lr_text(lr: float) -> str:
    """An LR as ``results.csv`` and the config have it (Python's shortest text of the float:
    ``0.0156``, ``0.001953125``), with its power of two after it where it is one exactly
    (``0.015625 (2^-6)``). Not ``2^log2(lr)``: 0.0156 is not 2^-6 = 0.015625, and a label
    rounded to it reads as another LR."""
    text = repr(float(lr))
    if lr > 0 and math.isfinite(lr):
        exponent = math.log2(lr)
        if exponent == round(exponent) and 2.0 ** round(exponent) == lr:
            text += f" (2^{round(exponent)})"
    return text


def write_json(path: str | os.PathLike, data: Any) -> None:
    buf = io.StringIO()
    json.dump(json_safe(data), buf, indent=2, allow_nan=False)
    buf.write("\n")
    atomic_write_text(path, buf.getvalue())

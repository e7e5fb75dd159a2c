"""Deterministic run IDs: a readable prefix from the swept values plus a hash of all overrides.

``L8-depth_mup-lr2^-9-s0-1f3a9c0e``: the prefix names the grid values that vary (in the
order of :data:`PREFIX_PARTS`, then any other swept key by name); the 8 hex digits are the
SHA-256 of the canonical JSON of every override of the run (fixed + grid, not ``run.dir``),
so the same point always maps to the same directory and different points never share one.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from rundir.files import checkpoint_step

HASH_CHARS = 8
MAX_PREFIX_CHARS = 96
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._^+=-]")

# (key, prefix, style): "pow2" writes exact powers of two as 2^e.
PREFIX_PARTS: tuple[tuple[str, str, str], ...] = (
    ("model.num_layers", "L", "plain"),
    ("model.hidden_size", "w", "plain"),
    ("parametrization.preset", "", "plain"),
    ("optimizer.name", "", "plain"),
    ("optimizer.lr", "lr", "pow2"),
    ("parametrization.block_multiplier", "bm", "plain"),
    ("run.seed", "s", "plain"),
    ("checkpoint.init_from", "from", "checkpoint"),  # a branch's source step (from12); its run: the keys above
)


def canonical_json(overrides: Mapping[str, Any]) -> str:
    return json.dumps(dict(overrides), sort_keys=True, separators=(",", ":"))


def label(value: Any, style: str = "plain") -> str:
    """A short, filename-safe text for one value (2^-9 for 0.001953125 in style pow2; in style
    checkpoint, a checkpoint folder's step and any other path's last part)."""
    if style == "checkpoint" and isinstance(value, str):
        name = PurePath(value).name
        step = checkpoint_step(name)
        text = str(step) if step is not None else name
    elif isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:g}"
        if style == "pow2" and value > 0 and math.isfinite(value):
            exponent = round(math.log2(value) * 2) / 2
            if math.isclose(2.0**exponent, value, rel_tol=1e-12):
                text = f"2^{exponent:g}"
    elif isinstance(value, (list, tuple)):
        text = ",".join(label(v) for v in value)
    else:
        text = str(value)
    return UNSAFE_CHARS.sub("_", text)


def run_id(point: Mapping[str, Any], fixed: Mapping[str, Any]) -> str:
    """The ID of the run with grid values ``point`` and fixed overrides ``fixed``."""
    known = [key for key, _, _ in PREFIX_PARTS]
    parts = [f"{prefix}{label(point[key], style)}" for key, prefix, style in PREFIX_PARTS if key in point]
    parts += [f"{key.rsplit('.', 1)[-1]}{label(point[key])}" for key in sorted(point) if key not in known]
    prefix = "-".join(parts)[:MAX_PREFIX_CHARS].strip("-.") or "run"
    digest = hashlib.sha256(canonical_json({**fixed, **point}).encode()).hexdigest()[:HASH_CHARS]
    return f"{prefix}-{digest}"

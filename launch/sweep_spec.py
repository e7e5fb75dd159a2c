"""Sweep specs (``configs/sweeps/*.yaml``): parse, check and expand into a :class:`SweepPlan`.

The spec is itself loaded with ``runconfig.load_config`` against :class:`SweepSpec`, so an
unknown top-level key or a bad executor value is reported like any config error. Every
grid value and then every grid point is loaded as a full run config before anything runs:
a bad key fails here, naming the spec file, the grid entry (or point) and the key.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING

from launch.commands import TrainerSpec, format_override, trainer_command
from launch.contract import CANONICAL_KEYS, EVAL_AT_KEY, STEPS_KEY, canonical_values
from launch.errors import LaunchError
from launch.run_configs import flat_config, load_run_config
from launch.run_ids import run_id
from launch.scripts import SlurmOptions
from launch.sweep_plan import ExecutorSettings, PlannedRun, SweepPlan
from runconfig import ConfigError, flatten, load_config

# Grid value forms besides a plain list: {log2_range: [start, stop, step]} -> 2**start .. 2**stop.
RANGE_BASES: dict[str, float] = {"log2_range": 2.0, "log10_range": 10.0}

# Keys launch owns.
FORBIDDEN_KEYS: dict[str, str] = {"run.dir": "launch sets it to SWEEP_DIR/runs/<run id>"}

# Grid keys refused unless listed in allow_grid_keys, and why.
GUARDED_GRID_PREFIXES: dict[str, str] = {
    "training.": "the token budget (steps, batch sizes) must be the same at every grid point",
    "data.": "data order and held-out batches are shared by every run of a sweep",
}


@dataclass
class SweepSpec:
    name: str = MISSING
    base_config: str = MISSING  # relative to the spec file
    overrides: dict[str, Any] = field(default_factory=dict)  # fixed, applied to every run
    grid: dict[str, Any] = field(default_factory=dict)  # dotted key -> list | {log2_range: [a, b, step]}
    allow_grid_keys: list[str] = field(default_factory=list)  # opt-in for guarded grid keys
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    train_cmd: Any = None  # list or string; default: $DEPTHMUP_TRAIN_CMD, else python train_gpt.py


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> SweepSpec:
    try:
        return load_config(SweepSpec, path, overrides)
    except ConfigError as exc:
        raise LaunchError(f"sweep spec {exc}") from None


def grid_values(key: str, raw: Any, where: str) -> list[Any]:
    """The values of one grid entry: a list, ``{values: [...]}`` or ``{log2_range: [a, b, step]}``."""
    if isinstance(raw, Mapping) and len(raw) == 1 and "values" in raw:
        raw = raw["values"]
    if isinstance(raw, Mapping):
        kind = next(iter(raw)) if len(raw) == 1 else None
        if kind not in RANGE_BASES:
            raise LaunchError(
                f"{where}: grid entry '{key}': a mapping must be one of "
                f"{sorted(['values', *RANGE_BASES])}, got keys {sorted(raw)}"
            )
        bounds = raw[kind]
        if not (
            isinstance(bounds, list)
            and len(bounds) == 3
            and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
        ):
            raise LaunchError(f"{where}: grid entry '{key}': {kind} needs [start, stop, step], got {bounds!r}")
        start, stop, step = bounds
        if step <= 0 or stop < start:
            raise LaunchError(f"{where}: grid entry '{key}': {kind} needs start <= stop and step > 0, got {bounds}")
        count = math.floor((stop - start) / step + 1e-9) + 1
        return [RANGE_BASES[kind] ** (start + i * step) for i in range(count)]
    if not isinstance(raw, list):
        raise LaunchError(f"{where}: grid entry '{key}': must be a list of values or {{log2_range: [a, b, step]}}")
    if not raw:
        raise LaunchError(f"{where}: grid entry '{key}': has no values")
    return list(raw)


def _describe(point: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v!r}" for k, v in point.items()) + "}"


def _check_keys(where: str, fixed: Mapping[str, Any], grid: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in [*fixed, *grid]:
        if key in FORBIDDEN_KEYS:
            raise LaunchError(f"{where}: '{key}' may not be set in a sweep: {FORBIDDEN_KEYS[key]}")
    for key in grid:
        if key in fixed:
            raise LaunchError(f"{where}: grid entry '{key}' is also a fixed override; keep one")
        for prefix, reason in GUARDED_GRID_PREFIXES.items():
            if key.startswith(prefix) and key not in allowed:
                raise LaunchError(
                    f"{where}: grid entry '{key}' is not allowed: {reason}; "
                    f"list it under allow_grid_keys to sweep it anyway"
                )


def _typed_value(base: Path, fixed: list[str], key: str, value: Any, where: str) -> Any:
    """``value`` as the schema stores it (``'1e-3'`` -> 0.001, ``completep`` -> ``ode``)."""
    flat = flat_config(load_run_config(base, [*fixed, format_override(key, value)], where=where))
    if key not in flat:
        raise LaunchError(f"{where}'{key}' is a section, not a single setting; name its keys one by one")
    return flat[key]


def expand(spec_path: str | Path, spec: SweepSpec, train_cmd: TrainerSpec = None) -> SweepPlan:
    """Check ``spec`` and expand its grid (cartesian product, in spec order) into runs."""
    spec_path = Path(spec_path).resolve()
    where = f"sweep spec {spec_path}"
    base = (spec_path.parent / spec.base_config).resolve()
    if not base.is_file():
        raise LaunchError(f"{where}: base_config {spec.base_config!r} not found (looked for {base})")
    raw_fixed = flatten(dict(spec.overrides))
    _check_keys(where, raw_fixed, spec.grid, spec.allow_grid_keys)

    fixed_args = [format_override(k, v) for k, v in raw_fixed.items()]
    base_flat = flat_config(load_run_config(base, fixed_args, where=f"{where}: overrides: "))
    for key in raw_fixed:
        if key not in base_flat:
            raise LaunchError(f"{where}: overrides: '{key}' is a section, not a single setting")
    fixed = {key: base_flat[key] for key in raw_fixed}
    fixed_args = [format_override(k, v) for k, v in fixed.items()]

    grid: dict[str, list[Any]] = {}
    for key, raw in spec.grid.items():
        values = []
        for value in grid_values(key, raw, where):
            typed = _typed_value(base, fixed_args, key, value, f"{where}: grid entry '{key}' value {value!r}: ")
            if typed in values:
                raise LaunchError(f"{where}: grid entry '{key}' lists the value {typed!r} twice")
            values.append(typed)
        grid[key] = values

    points = [dict(zip(grid, combo)) for combo in itertools.product(*grid.values())]
    if len(points) > 50:
        print(f"[launch] validating {len(points)} grid points", file=sys.stderr)
    runs: list[PlannedRun] = []
    seen: dict[str, dict[str, Any]] = {}
    for point in points:
        point_args = [format_override(k, v) for k, v in point.items()]
        cfg = load_run_config(base, [*fixed_args, *point_args], where=f"{where}: grid point {_describe(point)}: ")
        flat = flat_config(cfg)
        resolved = {
            **canonical_values(flat),
            **{key: flat[key] for key in grid if key not in CANONICAL_KEYS},
            EVAL_AT_KEY: list(flat[EVAL_AT_KEY]),
            STEPS_KEY: flat[STEPS_KEY],
        }
        rid = run_id(point, fixed)
        if rid in seen:  # pragma: no cover - needs a hash collision of two distinct points
            raise LaunchError(f"{where}: grid points {_describe(seen[rid])} and {_describe(point)} share ID {rid}")
        seen[rid] = point
        runs.append(PlannedRun(rid, point, resolved))

    return SweepPlan(
        name=spec.name,
        spec_file=str(spec_path),
        base_config_source=str(base),
        fixed=fixed,
        grid=grid,
        executor=spec.executor,
        slurm=asdict(spec.slurm),
        train_cmd=trainer_command(train_cmd if train_cmd is not None else spec.train_cmd),
        runs=runs,
    )

"""Sweep specs (``configs/sweeps/*.yaml``): parse, check and expand into a :class:`SweepPlan`.

The spec is itself loaded with ``runconfig.load_config`` against :class:`SweepSpec`, so an
unknown top-level key or a bad executor value is reported like any config error. Every
grid value and then every grid point is loaded as a full run config before anything runs:
a bad key fails here, naming the spec file, the grid entry (or point) and the key. The
``executor:`` keys (kind, max_parallel, max_retries, gpus_per_run, start, runs_per_gpu,
gpu_memory_mib, mps) are :class:`launch.sweep_plan.ExecutorSettings`, typed and checked there.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING

from jobscripts.scripts import SlurmOptions
from launch.commands import TrainerSpec, format_override, given_trainer
from launch.errors import LaunchError
from launch.run_configs import RunConfigs, config_values, flat_config
from launch.run_ids import run_id
from launch.sweep_plan import CACHE_DIR_KEY, ExecutorSettings, PlannedRun, SweepPlan
from runconfig import ConfigError, flatten, load_config
from runconfig.validate import validate_layout
from rundir.contract import CANONICAL_KEYS, EVAL_AT_KEY, INIT_FROM_KEY, STEPS_KEY, canonical_values

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
    train_cmd: Any = None  # list or string; default: $DEPTHMUP_TRAIN_CMD, else the running checkout's train_gpt.py
    # set by `launch demo` in the spec it writes (the study's name): that sweep's runs are the
    # study planner's, so `launch sweep` refuses the spec (`launch run`/`status` take the sweep dir)
    study: Optional[str] = None


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> SweepSpec:
    overrides = [_grid_entry_override(o) for o in overrides]
    # a grid entry given on the command line replaces the file's (a merge would keep the file's
    # `log2_range` beside a given `values`, and cannot put a list where the file has a mapping)
    replaced = [m.group(1) for o in overrides if (m := re.match(r"grid\[([^\]]+)\]=", o))]
    try:
        return load_config(SweepSpec, path, overrides, extra=[{"grid": dict.fromkeys(replaced)}] if replaced else ())
    except ConfigError as exc:
        raise LaunchError(f"sweep spec {exc}{_run_key_hint(overrides)}") from None


def _grid_entry_override(override: str) -> str:
    """``grid.model.num_layers=[2, 4]`` names the grid entry ``model.num_layers`` (a run-config
    key, dots and all): written ``grid[model.num_layers]=...`` so that it replaces that entry
    instead of nesting ``{model: {num_layers: ...}}`` beside it."""
    key, sep, value = override.partition("=")
    if sep and key.startswith("grid.") and "[" not in key:
        return f"grid[{key[len('grid.') :]}]={value}"
    return override


def _run_key_hint(overrides: Sequence[str]) -> str:
    """Where a run-config key given as a spec override (``training.steps=50``) belongs: the
    spec's fixed ``overrides`` (``overrides.training.steps=50``) apply it to every run."""
    from runconfig.schema import RunConfig

    sections = {f.name for f in fields(RunConfig)}
    run_keys = [o for o in overrides if "=" in o and o.split(".", 1)[0] in sections]
    if not run_keys:
        return ""
    return "; run-config keys go under the spec's overrides: write " + ", ".join(f"overrides.{o}" for o in run_keys)


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


# A grid entry whose key names several settings ("model.hidden_size,model.num_layers") is one
# axis of linked values: a list of rows, one value per key, or a generator below.
LINKED_KEY_SEPARATOR = ","
SHAPE_KEYS = ("model.hidden_size", "model.num_layers")


def linked_rows(keys: tuple[str, ...], raw: Any, where: str) -> list[tuple[Any, ...]]:
    """The rows of a linked grid entry: ``[[v1, v2], ...]`` or, for the shape keys,
    ``{fixed_gamma: {s, base_hidden_size, base_num_layers, hidden_sizes}}``: for each width the
    depth that keeps Yaida's gamma = L / n^(1-s) at the base shape's value (rounded)."""
    entry = f"{where}: grid entry '{LINKED_KEY_SEPARATOR.join(keys)}'"
    if isinstance(raw, Mapping):
        if set(raw) != {"fixed_gamma"}:
            raise LaunchError(f"{entry}: a mapping must be {{fixed_gamma: {{...}}}}, got keys {sorted(raw)}")
        if set(keys) != set(SHAPE_KEYS):
            raise LaunchError(f"{entry}: fixed_gamma links exactly {', '.join(SHAPE_KEYS)}")
        return [tuple(row[k] for k in keys) for row in fixed_gamma_shapes(raw["fixed_gamma"], entry)]
    if not isinstance(raw, list) or not raw:
        raise LaunchError(f"{entry}: must be a non-empty list of rows [{', '.join(keys)}] or {{fixed_gamma: ...}}")
    rows = []
    for i, row in enumerate(raw):
        if not isinstance(row, list) or len(row) != len(keys):
            raise LaunchError(f"{entry}: row {i} must list {len(keys)} values ({', '.join(keys)}), got {row!r}")
        rows.append(tuple(row))
    return rows


# A grid entry checkpoint.init_from: {runs_of: SWEEP_DIR, step: S} branches every run of another
# sweep: one row per run, its checkpoint at step S linked with that run's grid values. S may be a
# list of steps (a row per run and step), and `cooldown: C` (or a list) makes each branch nothing
# but a WSD cooldown of C steps: training.steps = S + C and scheduler.wsd_decay_steps = C.
RUNS_OF = "runs_of"
COOLDOWN = "cooldown"
WSD_DECAY_STEPS_KEY = "scheduler.wsd_decay_steps"
DECAY_STYLE_KEY = "scheduler.decay_style"
COOLDOWN_KEYS: tuple[str, ...] = (STEPS_KEY, WSD_DECAY_STEPS_KEY)  # the keys `cooldown` sets, in row order


def _positive_ints(raw: Any, name: str, entry: str, what: str) -> list[int]:
    """``raw``: a positive integer or a list of distinct ones."""
    values = raw if isinstance(raw, list) else [raw]
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if not values or bad:
        raise LaunchError(f"{entry}: {name}: must be a positive integer or a list of them ({what}), got {raw!r}")
    if len(set(values)) < len(values):
        raise LaunchError(f"{entry}: {name}: lists a value twice: {raw!r}")
    return values


def runs_of_rows(raw: Mapping[str, Any], entry: str, sweep_dir: Path) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    """The linked keys (``checkpoint.init_from``, with ``cooldown`` :data:`COOLDOWN_KEYS`, and the
    other sweep's grid keys) and one row per run of that sweep and branch step (and cooldown):
    its checkpoint folder at that step, relative to ``sweep_dir`` (the branches' sweep directory:
    ``../wsd_stable/runs/ID/checkpoints/step_00000006``, so that a run ID does not change when both
    sweeps move together; :attr:`SweepPlan.sweep_relative`), and its grid values, so that a branch
    has its source's depth, LR, seed... A run that ended (diverged) before a step is left out there,
    said on stderr; one that has not got there yet, or whose checkpoint is gone, is refused."""
    from launch.sweep_dir import read_plan

    if not {RUNS_OF, "step"} <= set(raw) <= {RUNS_OF, "step", COOLDOWN}:
        raise LaunchError(f"{entry}: {RUNS_OF} needs exactly the keys ['{RUNS_OF}', 'step'] (and optionally "
                          f"'{COOLDOWN}'), got {sorted(raw)}")  # fmt: skip
    steps = _positive_ints(raw["step"], "step", entry, "the checkpoints to branch from")
    cooldowns: list[Optional[int]] = [None]
    if COOLDOWN in raw:
        cooldowns = list(_positive_ints(raw[COOLDOWN], COOLDOWN, entry, "steps of WSD decay after the branch step"))
    source = Path(str(raw[RUNS_OF])).resolve()  # relative to the current directory, as --sweep-dir
    try:
        plan = read_plan(source)
    except LaunchError as exc:
        raise LaunchError(f"{entry}: {RUNS_OF}: {exc}") from None
    keys = tuple(plan.grid)
    set_here = COOLDOWN_KEYS if COOLDOWN in raw else ()
    if clash := [k for k in set_here if k in keys]:
        raise LaunchError(f"{entry}: {COOLDOWN}: sets {list(COOLDOWN_KEYS)}, but the runs of {source} sweep {clash}; "
                          "give the branch's keys by hand in another grid entry instead of cooldown")  # fmt: skip
    rows = []
    for step in steps:
        for folder, values in _branch_sources(plan, source, step, entry):
            relative = os.path.relpath(folder, sweep_dir.resolve())
            for cooldown in cooldowns:
                mine = () if cooldown is None else (step + cooldown, cooldown)
                rows.append((relative, *mine, *values))
    return (INIT_FROM_KEY, *set_here, *keys), rows


def _branch_sources(plan: SweepPlan, source: Path, step: int, entry: str) -> list[tuple[str, tuple[Any, ...]]]:
    """(checkpoint folder at ``step``, grid values) of every run of the sweep ``source`` that has it."""
    from launch.sweep_dir import run_dir
    from rundir.files import checkpoint_dir, checkpoint_steps, read_summary

    rows, skipped, missing = [], [], []
    for run in plan.runs:
        rd = run_dir(source, run.run_id)
        ckpt = checkpoint_dir(rd, step)
        if step in checkpoint_steps(rd):
            rows.append((str(ckpt), tuple(run.point[k] for k in plan.grid)))
            continue
        summary = read_summary(rd)
        if summary is not None and summary.final and summary.steps < step:
            skipped.append(f"{run.run_id} ({summary.status} at step {summary.steps})")
        elif summary is not None and summary.final:
            missing.append(f"{run.run_id}: {summary.status} at step {summary.steps} and has no checkpoint {ckpt.name} "
                           f"(kept: {checkpoint_steps(rd)}; the source needs checkpoint.interval dividing {step} "
                           "and checkpoint.keep keeping it)")  # fmt: skip
        else:
            missing.append(f"{run.run_id}: has not reached step {step} yet (run the sweep {source} first)")
    if missing:
        raise LaunchError(f"{entry}: {len(missing)} run(s) of {source} have no checkpoint at step {step}:\n  "
                          + "\n  ".join(missing))  # fmt: skip
    if skipped:
        print(f"[launch] {entry}: {len(skipped)} run(s) of {source} ended before step {step}, no branch: "
              f"{', '.join(skipped)}", file=sys.stderr)  # fmt: skip
    if not rows:
        raise LaunchError(f"{entry}: no run of {source} has a checkpoint at step {step}")
    return rows


def fixed_gamma_shapes(options: Any, where: str) -> list[dict[str, int]]:
    """``{model.hidden_size: n, model.num_layers: L}`` per width at fixed gamma (see linked_rows)."""
    from patches.rules import depth_at_fixed_scale

    required = {"s", "base_hidden_size", "base_num_layers", "hidden_sizes"}
    if not isinstance(options, Mapping) or set(options) != required:
        got = sorted(options) if isinstance(options, Mapping) else options
        raise LaunchError(f"{where}: fixed_gamma needs exactly the keys {sorted(required)}, got {got!r}")
    s, n0, l0, widths = (options[k] for k in ("s", "base_hidden_size", "base_num_layers", "hidden_sizes"))
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not 0.0 <= s <= 1.0:
        raise LaunchError(f"{where}: fixed_gamma.s: must be in [0, 1], got {s!r}")
    for name, value in (("base_hidden_size", n0), ("base_num_layers", l0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LaunchError(f"{where}: fixed_gamma.{name}: must be a positive integer, got {value!r}")
    if not isinstance(widths, list) or not widths or not all(isinstance(w, int) and w > 0 for w in widths):
        raise LaunchError(f"{where}: fixed_gamma.hidden_sizes: must be a list of positive integers, got {widths!r}")
    return [{SHAPE_KEYS[0]: n, SHAPE_KEYS[1]: depth_at_fixed_scale(n, float(s), n0, l0)} for n in widths]


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


def _load_in_context(configs: RunConfigs, args: list[str], context: list[str], where: str) -> Any:
    """The config of ``args``; where it fails alone, the config of ``context`` (other grid entries'
    first values) then ``args``, so that a key needing another's value passes; if that fails too,
    the error of ``args`` alone stands."""
    try:
        return configs.load(args, where=where)
    except LaunchError as alone:
        if not context:
            raise
        try:
            return configs.load([*context, *args], where=where)
        except LaunchError:
            raise alone from None


def _typed_row(
    base: RunConfigs,
    fixed: list[str],
    keys: tuple[str, ...],
    values: tuple[Any, ...],
    where: str,
    context: list[str] = (),  # type: ignore[assignment]
) -> tuple:
    """``values`` of ``keys`` as the schema stores them (``'1e-3'`` -> 0.001, ``completep`` ->
    ``ode``), set together: the keys of a linked entry are one setting of the run (e.g.
    ``parametrization.preset=custom`` with its alpha and gamma, none valid without the others)."""
    args = [*fixed, *(format_override(k, v) for k, v in zip(keys, values))]
    flat = flat_config(_load_in_context(base, args, list(context), where))
    for key in keys:
        if key not in flat:
            raise LaunchError(f"{where}'{key}' is a section, not a single setting; name its keys one by one")
    return tuple(flat[key] for key in keys)


def _check_branch_point(where: str, point: Mapping[str, Any], flat: Mapping[str, Any], cooldown: bool) -> None:
    """A branch of a runs_of entry trains past its branch step (the trainer would refuse it at its
    start, exit 2); with ``cooldown`` its schedule is WSD (else the cooldown would be no decay)."""
    from rundir.files import checkpoint_step

    step = checkpoint_step(Path(point[INIT_FROM_KEY]).name)
    if step is not None and flat[STEPS_KEY] <= step:
        raise LaunchError(
            f"{where}: grid point {_describe(point)}: {STEPS_KEY}={flat[STEPS_KEY]} is not past the branch step {step}: "
            f"a branch trains on from there (give '{COOLDOWN}' in the {RUNS_OF} entry: {STEPS_KEY} = step + {COOLDOWN})"
        )
    if cooldown and flat[DECAY_STYLE_KEY] != "wsd":
        raise LaunchError(
            f"{where}: grid point {_describe(point)}: '{COOLDOWN}' sets {WSD_DECAY_STEPS_KEY}, the decay of "
            f"scheduler.decay_style=wsd, but this point's is {flat[DECAY_STYLE_KEY]!r}: fix "
            "scheduler.decay_style: wsd in the overrides"
        )


def expand(
    spec_path: str | Path, spec: SweepSpec, train_cmd: TrainerSpec = None, sweep_dir: Optional[Path] = None
) -> SweepPlan:
    """Check ``spec`` and expand its grid (cartesian product, in spec order) into runs for the
    sweep directory ``sweep_dir`` (default :func:`default_sweep_dir`; a runs_of branch's source
    is written relative to it)."""
    spec_path = Path(spec_path).resolve()
    sweep_dir = Path(sweep_dir if sweep_dir is not None else default_sweep_dir(spec)).resolve()
    where = f"sweep spec {spec_path}"
    base = (spec_path.parent / spec.base_config).resolve()
    if not base.is_file():
        raise LaunchError(f"{where}: base_config {spec.base_config!r} not found (looked for {base})")
    raw_fixed = flatten(dict(spec.overrides))
    raw_axes: list[tuple[str, tuple[str, ...], list[tuple[Any, ...]]]] = []  # entry, its keys, raw rows
    branches: Optional[str] = None  # the runs_of entry
    cooldown = False  # it sets COOLDOWN_KEYS
    for key, raw in spec.grid.items():
        keys = tuple(k.strip() for k in key.split(LINKED_KEY_SEPARATOR))
        if keys == (INIT_FROM_KEY,) and isinstance(raw, Mapping) and RUNS_OF in raw:
            keys, raw_rows = runs_of_rows(raw, f"{where}: grid entry '{key}'", sweep_dir)
            branches, cooldown = key, COOLDOWN in raw
        elif len(keys) > 1:
            raw_rows = linked_rows(keys, raw, where)
        else:
            raw_rows = [(v,) for v in grid_values(key, raw, where)]
        raw_axes.append((key, keys, raw_rows))
    if cooldown:  # its keys are the cooldown's, set nowhere else (and no allow_grid_keys needed)
        elsewhere = [k for k in COOLDOWN_KEYS
                     if k in raw_fixed or any(k in keys for e, keys, _ in raw_axes if e != branches)]  # fmt: skip
        if elsewhere:
            raise LaunchError(f"{where}: grid entry '{branches}': {COOLDOWN} sets {elsewhere} ({STEPS_KEY} = step + "
                              f"{COOLDOWN}, {WSD_DECAY_STEPS_KEY} = {COOLDOWN}); set them in one place")  # fmt: skip
    member_keys: dict[str, None] = {}
    for _entry, keys, _ in raw_axes:
        for k in keys:
            if k in member_keys:
                raise LaunchError(f"{where}: grid key '{k}' appears in two grid entries; keep one")
            member_keys[k] = None
    _check_keys(where, raw_fixed, member_keys, [*spec.allow_grid_keys, *(COOLDOWN_KEYS if cooldown else ())])

    # A key can need another's value: checkpoint.init_mode=continue needs checkpoint.init_from,
    # scheduler.decay_style=wsd its scheduler.wsd_decay_steps. Where the fixed overrides (or one
    # entry's value) fail alone, they are checked again with the other entries' first values;
    # every full grid point is checked below in any case.
    first = {i: [format_override(k, v) for k, v in zip(keys, rows[0])] for i, (_, keys, rows) in enumerate(raw_axes)}

    def context(skip: int = -1) -> list[str]:
        return [arg for i, args in first.items() if i != skip for arg in args]

    fixed_args = [format_override(k, v) for k, v in raw_fixed.items()]
    configs = RunConfigs(base, where=f"{where}: overrides: ")  # the base file read and merged once
    base_cfg = _load_in_context(configs, fixed_args, context(), f"{where}: overrides: ")
    base_flat = flat_config(base_cfg)
    for key in raw_fixed:
        if key not in base_flat:
            raise LaunchError(f"{where}: overrides: '{key}' is a section, not a single setting")
    fixed = {key: base_flat[key] for key in raw_fixed}
    fixed_args = [format_override(k, v) for k, v in fixed.items()]

    axes: list[tuple[tuple[str, ...], list[tuple[Any, ...]]]] = []  # linked keys -> rows of values
    for index, (key, keys, raw_rows) in enumerate(raw_axes):
        rows: list[tuple[Any, ...]] = []
        for raw_row in raw_rows:
            shown_raw = raw_row[0] if len(keys) == 1 else list(raw_row)
            row = _typed_row(
                configs,
                fixed_args,
                keys,
                tuple(raw_row),
                f"{where}: grid entry '{key}' value {shown_raw!r}: ",
                context(index),
            )
            if row in rows:
                shown = row[0] if len(keys) == 1 else list(row)
                raise LaunchError(f"{where}: grid entry '{key}' lists the value {shown!r} twice")
            rows.append(row)
        axes.append((keys, rows))
    # The values each key takes (for a linked entry, its column of rows).
    grid: dict[str, list[Any]] = {k: list(dict.fromkeys(row[i] for row in rows)) for keys, rows in axes
                                  for i, k in enumerate(keys)}  # fmt: skip

    points = [
        {k: v for (keys, _), row in zip(axes, combo) for k, v in zip(keys, row)}
        for combo in itertools.product(*(rows for _, rows in axes))
    ]
    if len(points) > 50:
        print(f"[launch] validating {len(points)} grid points", file=sys.stderr)
    runs: list[PlannedRun] = []
    seen: dict[str, dict[str, Any]] = {}
    for point in points:
        point_args = [format_override(k, v) for k, v in point.items()]
        # base_cfg with the point's typed values: every check runs, without a merge per point
        cfg = configs.load_with(
            base_cfg, point, [*fixed_args, *point_args], where=f"{where}: grid point {_describe(point)}: "
        )
        try:  # each run is one trainer over executor.gpus_per_run GPUs (one process on CPU)
            validate_layout(cfg, max(1, spec.executor.gpus_per_run))
        except ValueError as exc:
            raise LaunchError(
                f"{where}: grid point {_describe(point)}: with executor.gpus_per_run={spec.executor.gpus_per_run}: {exc}"
            ) from None
        flat = config_values(cfg, [*CANONICAL_KEYS, *grid, EVAL_AT_KEY, STEPS_KEY, DECAY_STYLE_KEY])
        if branches is not None:
            _check_branch_point(where, point, flat, cooldown)
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

    # none given: None, the toolkit's own where the sweep runs (a sweep directory moves between checkouts)
    given = given_trainer(train_cmd if train_cmd is not None else spec.train_cmd)
    return SweepPlan(
        name=spec.name,
        spec_file=str(spec_path),
        base_config_source=str(base),
        fixed=fixed,
        grid=grid,
        executor=spec.executor,
        slurm=asdict(spec.slurm),
        train_cmd=given,
        train_cmd_given=given is not None,
        runs=runs,
        shared_index_cache=base_flat[CACHE_DIR_KEY] is None and CACHE_DIR_KEY not in grid,
        sweep_relative=[INIT_FROM_KEY] if branches is not None else [],
    )


def default_sweep_dir(spec: SweepSpec) -> Path:
    """Where a sweep goes without ``--sweep-dir``: ``sweeps/<name>`` under the current directory."""
    return Path("sweeps") / spec.name

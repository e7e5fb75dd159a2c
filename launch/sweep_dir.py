"""The sweep directory on disk: ``sweep.yaml``, the base-config snapshot, ``runs/ID/``.

The base config is copied into the sweep directory when the sweep is first expanded and
every run reads the copy, so editing ``configs/*.yaml`` later cannot silently change the
runs of a sweep half-way; re-expanding against a changed base is refused unless asked for.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path, PurePath
from typing import Any

import yaml

from jobscripts.atomic import atomic_write_text
from launch.errors import LaunchError
from launch.sweep_plan import BASE_SNAPSHOT, SweepPlan
from runconfig import load_yaml
from rundir.contract import INIT_FROM_KEY, RUNS_DIR
from rundir.files import run_dirs

SWEEP_FILE = "sweep.yaml"
PLAN_CACHE = "sweep.cache.json"  # sweep.yaml parsed, for readers of a large plan (status, array tasks)


def run_dir(sweep_dir: Path, run_id: str) -> Path:
    return sweep_dir / RUNS_DIR / run_id


SWEEP_REMEDY = (
    "use a new --sweep-dir, restore the file, or pass --allow-base-change (finished runs are kept and not rerun)"
)


def check_base(sweep_dir: Path, plan: SweepPlan, *, allow_base_change: bool = False, remedy: str = SWEEP_REMEDY) -> str:
    """The base config's text; refused when it differs from the snapshot the sweep's runs were
    started with (a dry run checks this too, so it shows what the real command would do).
    The refusal names the keys that differ (old -> new) and ends with ``remedy``."""
    source = Path(plan.base_config_source)
    snapshot = sweep_dir / BASE_SNAPSHOT
    text = source.read_text()
    if snapshot.is_file() and not allow_base_change:
        old, new = load_yaml(snapshot.read_text()), load_yaml(text)
        if old != new:
            raise LaunchError(
                f"{source} differs from the snapshot {snapshot} this sweep's runs were started with "
                f"({'; '.join(base_differences(old, new))}); {remedy}"
            )
    return text


def base_differences(old: object, new: object) -> list[str]:
    """``key: old -> new`` for each dotted key whose value differs between two parsed configs."""
    from runconfig import changed_keys, describe_changes

    if not (isinstance(old, dict) and isinstance(new, dict)):
        return [f"{old!r} -> {new!r}"]
    return describe_changes(changed_keys(old, new))


def write_plan(sweep_dir: Path, plan: SweepPlan, *, allow_base_change: bool = False) -> None:
    """Snapshot the base config (refusing a changed one) and write ``sweep.yaml``, atomically."""
    text = check_base(sweep_dir, plan, allow_base_change=allow_base_change)
    atomic_write_text(sweep_dir / BASE_SNAPSHOT, text)
    atomic_write_text(sweep_dir / SWEEP_FILE, yaml.safe_dump(plan.to_dict(), sort_keys=False, width=1000))
    (sweep_dir / RUNS_DIR).mkdir(exist_ok=True)


def read_plan(sweep_dir: Path) -> SweepPlan:
    path = sweep_dir / SWEEP_FILE
    if not path.is_file():
        raise LaunchError(
            f"{path} not found: expand the sweep first with `python -m launch sweep SPEC --sweep-dir DIR`"
        )
    try:
        return SweepPlan.from_dict(_parsed_plan(path))
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise LaunchError(f"{path}: not a sweep file written by launch ({exc})") from None


def file_stamp(path: Path) -> list[int]:
    """The key a cache of what a file holds is kept under: its (inode, mtime, size). Take it before
    reading the file: one replaced (an atomic write is a new inode) or rewritten after it is read
    again next time. OSError where the file is missing. ``sweep.cache.json`` and
    ``results.configs.json`` (``launch.status.WrittenConfigs``) key their entries with it."""
    st = path.stat()
    return [st.st_ino, st.st_mtime_ns, st.st_size]


def _parsed_plan(path: Path) -> object:
    """``sweep.yaml`` parsed, from :data:`PLAN_CACHE` where that was written from this version of it.

    Parsing the YAML took 4.6 s for 10000 runs, in every ``status`` and every array task; the same
    data as JSON reads in a fraction of that. The cache is kept under sweep.yaml's
    :func:`file_stamp`; unreadable, stale or unwritable, it is passed by."""
    stamp = file_stamp(path)
    cache = path.with_name(PLAN_CACHE)
    try:
        cached = json.loads(cache.read_text())
        if cached["stamp"] == stamp:
            return cached["plan"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    data = load_yaml(path.read_text())
    try:
        text = json.dumps({"stamp": stamp, "plan": data}, separators=(",", ":"))
        if json.loads(text)["plan"] == data:  # JSON holds what YAML gave (not so for a non-string key)
            atomic_write_text(cache, text)
    except (OSError, TypeError, ValueError):
        pass  # a sweep directory this user cannot write, or a value JSON cannot hold: no shortcut
    return data


SOURCE_PARTS = 5  # a branch source's identity: <source sweep>/runs/<ID>/checkpoints/step_N


def keep_run_ids(sweep_dir: Path, plan: SweepPlan) -> int:
    """Give each run of ``plan`` that the ``sweep.yaml`` in ``sweep_dir`` holds under another ID
    that ID; returns how many did. The same run: the same fixed overrides and grid point but for
    where its ``checkpoint.init_from`` lies, compared by the folder's last :data:`SOURCE_PARTS`
    parts (the source sweep's name, its run ID, the step). A sweep expanded before runs_of sources
    were kept relative to the sweep directory hashed their absolute path; re-expanded after the
    sweeps moved (or after they moved apart), its branches keep their IDs and are not run again."""
    try:
        old = read_plan(sweep_dir)
    except LaunchError:  # none yet (or not ours: write_plan replaces it)
        return 0
    ids = {_moved_free(old.fixed, run.point): run.run_id for run in old.runs}
    taken = {run.run_id for run in plan.runs}
    kept = 0
    for i, run in enumerate(plan.runs):
        rid = ids.get(_moved_free(plan.fixed, run.point))
        if rid is not None and rid != run.run_id and rid not in taken:
            taken.add(rid)
            plan.runs[i] = replace(run, run_id=rid)
            kept += 1
    return kept


def _moved_free(fixed: dict[str, Any], point: dict[str, Any]) -> str:
    values = {**fixed, **point}
    source = values.get(INIT_FROM_KEY)
    if isinstance(source, str):
        values[INIT_FROM_KEY] = "/".join(PurePath(source).parts[-SOURCE_PARTS:])
    return json.dumps(values, sort_keys=True, default=str)


def orphan_run_dirs(sweep_dir: Path, plan: SweepPlan) -> list[str]:
    """Run directories from an earlier expansion (other fixed overrides) that the plan no longer lists
    (dot-folders such as the trainer's ``.index_cache`` are not runs)."""
    known = {run.run_id for run in plan.runs}
    if not (sweep_dir / RUNS_DIR).is_dir():
        return []
    return [p.name for p in run_dirs(sweep_dir) if p.name not in known]

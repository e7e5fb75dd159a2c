"""Study definitions as data: one YAML file per study under ``configs/studies/`` (or any path).

A study sizes the adaptive depth-transfer sweep that ``python -m launch demo`` runs: presets,
depths, the LR search and the model/training shape. This module only reads and validates
them; the planner (``launch.demo``) applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional

import yaml

from data_prep.config import MIN_VOCAB_SIZE
from eval.seed_model import SEED_MODELS
from launch.errors import LaunchError
from rundir.contract import PARAMETRIZATION_KEYS
from study.corpus import DEFAULT_CORPUS

STUDIES_DIR = Path(__file__).resolve().parents[1] / "configs" / "studies"


@dataclass(frozen=True)
class Study:
    """Everything that sizes one study (keys of its YAML file, all required)."""

    name: str
    depths: tuple[int, ...]
    presets: tuple[str, ...]
    base_lrs_log2: tuple[float, ...]  # the grid at the base depth (= depths[0] = L0)
    window: int  # LR points at each deeper depth, centred on the previous depth's optimum
    step_log2: float  # LR spacing in octaves
    max_widen: int  # extra points allowed per (preset, depth) when the optimum is at an edge
    seeds: int  # seeds (run.seed: initialization) at the best LR and its neighbours
    refine_log2: float  # 0: none; else all seeds at best +- this many octaves
    fit_window: int  # eval transfer --fit-window: usable neighbours each side in the quadratic fit
    hidden_size: int
    heads: int
    seq_length: int
    batch: int
    steps: int
    warmup: int
    vocab_size: int
    eval_batches: int
    claims: bool  # False for a smoke test: no conclusions are printed
    # optional: name -> run-config overrides (dotted keys); every preset is studied under each
    # variant, with its own shared base depth. Default: one unnamed variant, no overrides.
    variants: dict[str, dict[str, Any]] = field(default_factory=lambda: {"": {}})
    # optional: logging.diagnostics_interval of every run (0: off); > 0 adds eval dynamics to the report
    diagnostics_interval: int = 0
    # optional: seeds at the base depth L0 (the larger of this and ``seeds``). L0's runs are the
    # cheapest, are shared by every preset, and have the most leverage on the slope (log2 L0 is
    # the end of the depth axis); their seed noise is also the largest (docs/study_design.md).
    base_seeds: int = 0
    # optional: how a cell's seed losses are averaged, by the planner and by eval transfer
    # (eval/seed_model.py): "independent" (plain seed means) or "additive" (seed offsets removed)
    seed_model: str = "independent"
    # optional, for studies on GPUs (the defaults are the CPU study's, so older study files and
    # their run configs are unchanged): the device and precision of every run, the corpus (a
    # row of data_prep.registry_corpora, or a path to the user's JSONL or data_prep output:
    # study.corpus; stored resolved), the micro-batch (0: batch, no accumulation), the runs
    # sharing one GPU (executor.runs_per_gpu) and checkpoint.interval (0: max(50, steps // 4);
    # >= steps: no periodic checkpoint, only the one a preempted run writes)
    device: str = "cpu"
    precision: str = "auto"
    corpus: str = DEFAULT_CORPUS
    micro_batch: int = 0
    runs_per_gpu: int = 1
    checkpoint_interval: int = 0
    # optional: precision goals (eval/goals.py: slope_ci_halfwidth, deepest_opt_ci_width), each
    # checked for every preset and analysed fraction. With goals, the planner's sequential phase
    # adds seeds until every goal is met or ``budget_runs`` is spent (study/planner.py).
    goals: dict[str, float] = field(default_factory=dict)
    # optional with goals (then required): the most runs the study may train per variant, every
    # phase and the shared base (once) counted; a study with V variants may train V times as many
    # (:attr:`run_budget`), so selecting variants (``--variants``) keeps each one's budget. A run
    # count, not minutes, so the plan does not depend on the machine's speed.
    budget_runs: int = 0
    # optional: seeds the sequential phase adds per batch at the chosen depth's best LR and neighbours
    seed_step: int = 2
    # optional: bootstrap samples of the intervals (the planner's and the report's: the same call)
    bootstrap: int = 1000
    # optional: a run at depth L costs about L + this many layers' worth of time (start-up, data,
    # embedding); the sequential phase weighs where to add seeds by it (docs/study_design.md)
    run_overhead_layers: float = 2.0
    # optional: the fractions of training at which every run evaluates (eval.at), ascending, the
    # last 1.0 (the end loss the planner walks on); each is analysed, and each goal is checked at
    # each of them, so more points cost sequential-phase runs, never scan runs
    eval_at: tuple[float, ...] = (0.5, 1.0)
    # optional: named arms of preset custom, name -> {"alpha": a, "gamma": g} (both required,
    # docs/parametrization.md "Presets"); ``presets`` lists them by name beside the fixed presets.
    # Each arm is its own family in results.csv (parametrization.preset=custom with its alpha and
    # gamma columns) and in eval transfer; the base depth is shared with every other arm.
    custom_presets: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def run_budget(self) -> int:
        """The most runs the whole study may train: ``budget_runs`` for each variant."""
        return self.budget_runs * len(self.variants)

    def arm_keys(self) -> list[str]:
        """The config keys besides ``parametrization.preset`` that tell the arms apart: custom
        arms' alpha and gamma (every run records them, empty for a fixed preset); none without."""
        return list(PARAMETRIZATION_KEYS) if self.custom_presets else []

    def arm_values(self, arm: str) -> dict[str, Any]:
        """The run-config values of the arm ``arm`` (a name in ``presets``): its
        ``parametrization.preset`` and every :meth:`arm_keys` key (None where a fixed preset sets none)."""
        custom = self.custom_presets.get(arm)
        values: dict[str, Any] = {"parametrization.preset": "custom" if custom else arm}
        for k in self.arm_keys():
            values[k] = custom[k.split(".")[-1]] if custom else None
        return values

    def config_presets(self) -> list[str]:
        """The distinct ``parametrization.preset`` values of the arms, in order (results.csv's column)."""
        return list(dict.fromkeys(self.arm_values(a)["parametrization.preset"] for a in self.presets))

    def variant_keys(self) -> list[str]:
        """Every config key some variant sets (each run records all of them, so that
        ``eval transfer`` tells the variants apart as families)."""
        return sorted({k for overrides in self.variants.values() for k in overrides})


_TUPLES = {"depths": int, "presets": str, "base_lrs_log2": float, "eval_at": float}
OPTIONAL = (
    "variants",
    "diagnostics_interval",
    "base_seeds",
    "seed_model",
    "goals",
    "budget_runs",
    "seed_step",
    "bootstrap",
    "run_overhead_layers",
    "eval_at",
    "custom_presets",
)
GPU_OPTIONAL = ("device", "precision", "corpus", "micro_batch", "runs_per_gpu", "checkpoint_interval")
DEVICES = ("cpu", "cuda")
PRECISIONS = ("auto", "fp32", "bf16")
# Keys a variant may not set: the planner sweeps them, or the shared run shape fixes them.
_PLANNED_KEYS = ("model.num_layers", "parametrization.preset", "optimizer.lr", "run.seed", "run.dir")


def study_path(name_or_path: str) -> Path:
    """``NAME`` -> ``configs/studies/NAME.yaml``; anything with a suffix or a slash is a path."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        return Path(name_or_path)
    return STUDIES_DIR / f"{name_or_path}.yaml"


def available() -> list[str]:
    return sorted(p.stem for p in STUDIES_DIR.glob("*.yaml"))


def load_study(name_or_path: str, variants: Optional[Sequence[str]] = None, **overrides: Any) -> Study:
    """Read and check a study file; ``overrides`` (e.g. ``depths=(2, 4)``) replace its keys and
    ``variants`` (names) keeps only those of the file's variants, in the file's order."""
    path = study_path(name_or_path)
    if not path.is_file():
        raise LaunchError(f"--study {name_or_path}: no file {path} (studies here: {', '.join(available())})")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise LaunchError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise LaunchError(f"{path}: expected a mapping of study keys")
    names = [f.name for f in fields(Study)]
    unknown = sorted(set(raw) - set(names))
    missing = [n for n in names if n not in raw and n not in OPTIONAL + GPU_OPTIONAL]
    if unknown:
        raise LaunchError(f"{path}: unknown key(s) {unknown}; a study has {names}")
    if missing:
        raise LaunchError(f"{path}: missing key(s) {missing}")
    values: dict[str, Any] = {}
    for f in fields(Study):
        if f.name == "variants":
            if "variants" in raw:
                values["variants"] = _variants(path, raw["variants"])
            continue
        if f.name == "goals":
            if "goals" in raw:
                values["goals"] = _goals(path, raw["goals"])
            continue
        if f.name == "custom_presets":
            if "custom_presets" in raw:
                values["custom_presets"] = _custom_presets(path, raw["custom_presets"])
            continue
        if f.name in raw:
            values[f.name] = _coerce(path, f.name, raw[f.name], f.type)
    study = replace(Study(**values), **{k: v for k, v in overrides.items() if v is not None})
    if variants:
        study = replace(study, variants=_select_variants(path, study.variants, variants))
    study = replace(
        study,
        presets=_presets(path, study.presets, study.custom_presets),
        corpus=_corpus(path, study.corpus, overrides),
    )
    try:
        _check(path, study)
    except LaunchError as exc:  # a value the command line gave (--depths, --seeds, ...) is named as its flag
        for key, value in overrides.items():
            head = f"{path}: {key}: "
            if value is not None and str(exc).startswith(head):
                raise LaunchError(f"--{key.replace('_', '-')}: {str(exc)[len(head) :]}") from exc
        raise
    return study


def _presets(path: Path, presets: Sequence[str], custom: dict[str, dict[str, float]]) -> tuple[str, ...]:
    """The arms: fixed presets by their canonical names (``completep`` -> ``ode``, as a run
    config stores them) and the names of ``custom_presets`` arms. An unknown name, or ``custom``
    itself (its alpha and gamma belong to a named arm), is refused here, before anything trains
    (each used to fail only when the planner reached the first depth past the shared base, after
    the base had trained); so is a custom arm that ``presets`` does not list."""
    from patches.presets import canonical_preset

    canonical = []
    for p in presets:
        if p in custom:
            canonical.append(p)
            continue
        if p == "custom":
            example = next(iter(custom), "a050")
            raise LaunchError(
                f"{path}: presets: 'custom' needs its alpha and gamma: name each custom arm under custom_presets "
                f"(e.g. custom_presets: {{{example}: {{alpha: 0.5, gamma: 0.5}}}}) and list it by name in presets"
            )
        try:
            canonical.append(canonical_preset(p))
        except ValueError as exc:
            named = (
                f" or a custom_presets arm ({', '.join(custom)})"
                if custom
                else " (or name a custom arm under custom_presets)"
            )
            raise LaunchError(f"{path}: presets: {str(exc).split(': ', 1)[1]}{named}") from None
    if len(set(canonical)) != len(canonical):
        raise LaunchError(f"{path}: presets: listed twice in {list(presets)} (as {canonical})")
    unused = [name for name in custom if name not in canonical]
    if unused:
        raise LaunchError(
            f"{path}: custom_presets: {unused} not listed in presets {list(presets)}: list each arm there (its "
            "place sets the planner's order; the first arm trains the shared base depth), or remove it"
        )
    return tuple(canonical)


def _custom_presets(path: Path, raw: Any) -> dict[str, dict[str, float]]:
    """``custom_presets``: name -> {alpha, gamma}, each checked by the parametrization itself
    (:class:`patches.parametrization.Parametrization`, whose refusals are the run config's)."""
    from patches.parametrization import Parametrization
    from patches.presets import ALIASES, PRESETS

    if not isinstance(raw, dict) or not raw:
        raise LaunchError(f"{path}: custom_presets: expected a mapping name -> {{alpha: A, gamma: G}}, got {raw!r}")
    out: dict[str, dict[str, float]] = {}
    fields_ = [k.split(".")[-1] for k in PARAMETRIZATION_KEYS]
    for name, arm in raw.items():
        where = f"{path}: custom_presets.{name}"
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
            raise LaunchError(f"{path}: custom_presets: name {name!r} must be letters, digits and underscores")
        if name in PRESETS or name in ALIASES:
            raise LaunchError(f"{where}: {name!r} is a preset's name; give the custom arm another name")
        if not isinstance(arm, dict):
            raise LaunchError(f"{where}: expected a mapping {{alpha: A, gamma: G}}, got {arm!r}")
        unknown = sorted(set(arm) - set(fields_))
        missing = [k for k in fields_ if k not in arm]
        if unknown or missing:
            what = f"unknown key(s) {unknown}" if unknown else f"missing {missing}"
            raise LaunchError(
                f"{where}: {what}; a custom arm has exactly {fields_} (preset custom's depth exponents: the "
                "residual-branch multiplier (L/L0)^-alpha and the in-block Adam LR factor (L/L0)^-gamma, "
                "docs/parametrization.md; other settings go to every arm through variants)"
            )
        for k in fields_:
            if isinstance(arm[k], bool) or not isinstance(arm[k], (int, float)):
                raise LaunchError(f"{where}.{k}: expected a number, got {arm[k]!r}")
        values = {k: float(arm[k]) for k in fields_}
        try:
            Parametrization(preset="custom", **values)
        except ValueError as exc:
            raise LaunchError(f"{where}: {exc}") from None
        twin = next((other for other, v in out.items() if v == values), None)
        if twin is not None:
            raise LaunchError(
                f"{where}: the same {values} as custom_presets.{twin}: two arms of one parametrization would be "
                "the same runs"
            )
        out[name] = values
    return out


def _corpus(path: Path, corpus: str, overrides: dict[str, Any]) -> str:
    """The registry name, or the absolute path of the user's corpus: a path in the study file
    is relative to the file's folder, one given as ``--corpus`` to the current directory."""
    from study.corpus import CorpusError, resolve_corpus

    given = overrides.get("corpus") is not None
    try:
        return resolve_corpus(corpus, Path.cwd() if given else path.parent)
    except CorpusError as exc:
        raise LaunchError(f"--corpus: {exc}" if given else f"{path}: corpus: {exc}") from None


def scan_runs(s: Study) -> int:
    """The fewest runs the scan phase trains per variant: the base grid at L0 (shared by every
    preset) and ``window`` LRs per preset at each deeper depth. The scan, refine and seed phases
    run whatever the budget (it caps the sequential phase), so a budget below this is a mistake."""
    return len(s.base_lrs_log2) + len(s.presets) * (len(s.depths) - 1) * s.window


def _coerce(path: Path, key: str, value: Any, type_name: Any) -> Any:
    if key in _TUPLES:
        kind = _TUPLES[key]
        if not isinstance(value, list) or not value:
            raise LaunchError(f"{path}: {key}: expected a non-empty list, got {value!r}")
        if kind is int and not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            # int(4.5) is 4: a depth written as 4.5 would have been trained as 4 without a word
            raise LaunchError(f"{path}: {key}: expected a list of whole numbers, got {value!r}")
        try:
            return tuple(kind(v) if not isinstance(v, bool) else _bad(path, key, v) for v in value)
        except (TypeError, ValueError) as exc:
            raise LaunchError(f"{path}: {key}: expected a list of {kind.__name__}, got {value!r}") from exc
    expected = {"str": str, "int": int, "float": (int, float), "bool": bool}[str(type_name)]
    if isinstance(value, bool) and expected is not bool:
        _bad(path, key, value)
    if not isinstance(value, expected):
        _bad(path, key, value)
    return float(value) if str(type_name) == "float" else value


def _select_variants(path: Path, have: dict[str, dict[str, Any]], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    unknown = [n for n in names if n not in have]
    if unknown or list(have) == [""]:
        listed = ", ".join(n for n in have if n) or "none"
        raise LaunchError(
            f"--variants {' '.join(names)}: {path} has no variant(s) {unknown or list(names)} (its variants: {listed})"
        )
    return {n: overrides for n, overrides in have.items() if n in names}


def _variants(path: Path, raw: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict) or not raw:
        raise LaunchError(f"{path}: variants: expected a mapping name -> {{dotted.key: value}}, got {raw!r}")
    out: dict[str, dict[str, Any]] = {}
    for name, overrides in raw.items():
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
            raise LaunchError(f"{path}: variants: name {name!r} must be letters, digits and underscores")
        if overrides is None:
            overrides = {}
        if not isinstance(overrides, dict) or not all(isinstance(k, str) and "." in k for k in overrides):
            raise LaunchError(f"{path}: variants.{name}: expected a mapping of dotted config keys, got {overrides!r}")
        planned = sorted(set(overrides) & set(_PLANNED_KEYS))
        if planned:
            raise LaunchError(f"{path}: variants.{name}: {planned} are set by the study planner, not a variant")
        arm = sorted(set(overrides) & set(PARAMETRIZATION_KEYS))
        if arm:
            raise LaunchError(
                f"{path}: variants.{name}: {arm} belong to a preset, not a variant (a variant's keys go to every "
                "preset, and a fixed preset refuses them): name custom arms under custom_presets"
            )
        out[name] = dict(overrides)
    return out


def _goals(path: Path, raw: Any) -> dict[str, float]:
    from eval.goals import GOALS

    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise LaunchError(f"{path}: goals: expected a mapping goal -> target, got {raw!r}")
    out = {}
    for name, target in raw.items():
        if name not in GOALS:
            raise LaunchError(f"{path}: goals.{name}: unknown goal; the goals are {sorted(GOALS)}")
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not target > 0:
            raise LaunchError(f"{path}: goals.{name}: expected a positive number, got {target!r}")
        out[name] = float(target)
    return out


def _bad(path: Path, key: str, value: Any) -> Any:
    raise LaunchError(f"{path}: {key}: bad value {value!r}")


def _check(path: Path, s: Study) -> None:
    if list(s.depths) != sorted(set(s.depths)) or s.depths[0] < 1:
        raise LaunchError(f"{path}: depths: must be positive and strictly increasing, got {list(s.depths)}")
    if len(s.depths) < 2:
        raise LaunchError(
            f"{path}: depths: a transfer study needs the base depth L0 (the first) and at least one deeper depth, "
            f"got {list(s.depths)}"
        )
    if len(set(s.presets)) != len(s.presets):
        raise LaunchError(f"{path}: presets: listed twice in {list(s.presets)}")
    if s.max_widen < 0 or s.step_log2 <= 0:
        raise LaunchError(f"{path}: max_widen must be >= 0 and step_log2 > 0, got {s.max_widen} and {s.step_log2}")
    if s.refine_log2 < 0 or s.refine_log2 >= s.step_log2:
        raise LaunchError(f"{path}: refine_log2: must be in [0, step_log2={s.step_log2}), got {s.refine_log2}")
    for key in (
        "window",
        "seeds",
        "fit_window",
        "hidden_size",
        "heads",
        "seq_length",
        "batch",
        "steps",
        "vocab_size",
        "eval_batches",
    ):
        if getattr(s, key) < 1:
            raise LaunchError(f"{path}: {key}: must be >= 1, got {getattr(s, key)}")
    _check_lr_grid(path, s)
    _check_eval_at(path, s)
    if s.seed_model not in SEED_MODELS:
        raise LaunchError(f"{path}: seed_model: must be one of {list(SEED_MODELS)}, got {s.seed_model!r}")
    if s.base_seeds < 0:
        raise LaunchError(f"{path}: base_seeds: must be >= 0 (0: as many as seeds), got {s.base_seeds}")
    if s.goals and s.budget_runs < 1:
        raise LaunchError(f"{path}: budget_runs: a study with goals needs a run budget >= 1, got {s.budget_runs}")
    if s.budget_runs < 0:
        raise LaunchError(f"{path}: budget_runs: must be >= 0, got {s.budget_runs}")
    if s.budget_runs and not s.goals:
        raise LaunchError(
            f"{path}: budget_runs: {s.budget_runs} without goals caps nothing (the budget caps only the sequential "
            "phase, which runs only with goals; the scan, refine and seed phases train their fixed design "
            "whatever it says): add goals, or remove budget_runs"
        )
    if s.goals and s.budget_runs < scan_runs(s):
        raise LaunchError(
            f"{path}: budget_runs: {s.budget_runs} is fewer than the scan alone trains per variant "
            f"({scan_runs(s)}: {len(s.base_lrs_log2)} LRs at L0 + {s.window} LRs x {len(s.presets)} presets x "
            f"{len(s.depths) - 1} deeper depths); the scan, refine and seed phases run whatever the budget, "
            f"which caps only the sequential phase: give at least {scan_runs(s)}"
        )
    if s.seed_step < 1 or s.bootstrap < 1:
        raise LaunchError(f"{path}: seed_step and bootstrap must be >= 1, got {s.seed_step} and {s.bootstrap}")
    if s.run_overhead_layers < 0:
        raise LaunchError(f"{path}: run_overhead_layers: must be >= 0, got {s.run_overhead_layers}")
    if s.diagnostics_interval < 0:
        raise LaunchError(f"{path}: diagnostics_interval: must be >= 0, got {s.diagnostics_interval}")
    if not 0 <= s.warmup < s.steps:
        raise LaunchError(f"{path}: warmup: must be in [0, steps={s.steps}), got {s.warmup}")
    if s.vocab_size < MIN_VOCAB_SIZE:
        raise LaunchError(
            f"{path}: vocab_size: must be >= {MIN_VOCAB_SIZE} (the smallest tokenizer data_prep trains), "
            f"got {s.vocab_size}"
        )
    if s.hidden_size % s.heads:
        raise LaunchError(f"{path}: hidden_size {s.hidden_size} is not divisible by heads {s.heads}")
    _check_gpu_keys(path, s)


def _check_lr_grid(path: Path, s: Study) -> None:
    """The base grid is distinct points on the ``step_log2`` lattice (the planner tells a grid
    point from a refinement point by that lattice), and every depth can try enough LRs for the
    quadratic fit of ``fit_window`` (else every deeper optimum is an edge point: a bound)."""
    grid = s.base_lrs_log2
    if len(set(grid)) != len(grid):
        raise LaunchError(f"{path}: base_lrs_log2: an LR listed twice in {list(grid)}")
    off = [x for x in grid if abs((x - grid[0]) / s.step_log2 - round((x - grid[0]) / s.step_log2)) > 1e-6]
    if off:
        raise LaunchError(
            f"{path}: base_lrs_log2: {off} not a whole number of step_log2 ({s.step_log2}) octaves from {grid[0]}; "
            "the planner takes such points for refinement points (refine_log2)"
        )
    fit_points = 2 * s.fit_window + 1
    refine = 2 if s.refine_log2 > 0 else 0
    for key, planned in (("base_lrs_log2", len(grid)), ("window", s.window)):
        if s.fit_window >= 1 and planned + s.max_widen + refine < fit_points:
            where = "the base depth" if key == "base_lrs_log2" else "each deeper depth"
            raise LaunchError(
                f"{path}: {key}: {planned} LR(s) at {where}, + max_widen {s.max_widen} + {refine} refinement "
                f"point(s) (refine_log2 {s.refine_log2}), is fewer than the {fit_points} a quadratic fit with "
                f"fit_window {s.fit_window} needs: every optimum there would be a grid point (a bound, not an "
                f"estimate); give more LRs, max_widen or refine_log2, or a smaller fit_window"
            )


def _check_eval_at(path: Path, s: Study) -> None:
    """Points the analysis can tell apart: each a distinct step of the run (the trainer evaluates
    at step round(f * steps) and keeps one fraction per step), and the end, whose loss the
    planner walks on."""
    at = s.eval_at
    if any(not 0.0 < f <= 1.0 for f in at) or list(at) != sorted(set(at)):
        raise LaunchError(f"{path}: eval_at: fractions must be in (0, 1] and strictly increasing, got {list(at)}")
    if at[-1] != 1.0:
        raise LaunchError(
            f"{path}: eval_at: must end with 1.0 (the end of training, whose loss the planner walks on), got {list(at)}"
        )
    steps = [max(1, round(f * s.steps)) for f in at]
    if len(set(steps)) != len(steps):
        raise LaunchError(
            f"{path}: eval_at: {list(at)} of steps={s.steps} fall on steps {steps}; two fractions on one step "
            "are one evaluation: give fractions at least one step apart"
        )


def _check_gpu_keys(path: Path, s: Study) -> None:
    if s.device not in DEVICES:
        raise LaunchError(f"{path}: device: must be one of {list(DEVICES)}, got {s.device!r}")
    if s.precision not in PRECISIONS:
        raise LaunchError(f"{path}: precision: must be one of {list(PRECISIONS)}, got {s.precision!r}")
    if s.precision == "bf16" and s.device != "cuda":
        raise LaunchError(f"{path}: precision: bf16 needs device: cuda (the CPU path trains in fp32)")
    if s.micro_batch < 0 or (s.micro_batch and s.batch % s.micro_batch):
        raise LaunchError(f"{path}: micro_batch: must be 0 (= batch) or divide batch {s.batch}, got {s.micro_batch}")
    if s.runs_per_gpu < 1:
        raise LaunchError(f"{path}: runs_per_gpu: must be >= 1, got {s.runs_per_gpu}")
    if s.checkpoint_interval < 0:
        raise LaunchError(
            f"{path}: checkpoint_interval: must be >= 0 (0: max(50, steps // 4)), got {s.checkpoint_interval}"
        )

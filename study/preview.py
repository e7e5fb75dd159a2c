"""What a study will train, before it trains: every run config checked, and the planner's fixed
design played out on a planted answer (``python -m launch demo --plan``).

The run configs of every (variant, preset, depth) are built and checked as the sweep will build
them, so a variant key the trainer refuses, or a layout that does not fit, stops the study
before its data is prepared. The fixed design (scan, refine and seed phases) depends on the
losses only through where each depth's optimum lies, so a planted answer gives its run count:
each preset's loss is a parabola in log2 LR whose optimum moves with log2 depth by
:data:`PLANTED_SLOPES`. The sequential phase that follows (a study with goals) adds seeds until
the goals are met or ``budget_runs`` is spent: that depends on the noise of real runs, and is
stated as its bound.
"""

from __future__ import annotations

import math
import random
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple, Optional

import yaml

from launch.errors import LaunchError
from study.data import base_config
from study.planner import Planner, Point
from study.spec import Study, scan_runs

PLANTED_SLOPES = {"sp": -0.3, "depth_mup": 0.0, "ode": 0.2}  # octaves of optimal LR per doubling of depth


def fixed_design(s: Study, seed: int = 0) -> list[Point]:
    """Every point of the scan, refine and seed phases, on the planted answer (0.1 nats per
    octave squared around the optimum, seed noise 0.02 nats)."""
    planner, rng = Planner(replace(s, goals={}, budget_runs=0)), random.Random(seed)
    centre = s.base_lrs_log2[len(s.base_lrs_log2) // 2]
    results: dict[Point, float] = {}
    while True:
        points = planner.next_points(results)
        if not points:
            return list(results)
        for p in points:
            optimum = centre + PLANTED_SLOPES.get(p.preset, 0.0) * math.log2(p.depth / s.depths[0])
            results[p] = 4.0 + 0.1 * (p.log2_lr - optimum) ** 2 + rng.gauss(0.0, 0.02)


class ConfigCheck(NamedTuple):
    checked: int  # run configs built and checked (variant x preset x depth)
    memory: list[str]  # a GPU study's memory estimate per (variant, preset) at the deepest depth


def check_run_configs(s: Study, data_dir: Path) -> ConfigCheck:
    """Build the run config of every (variant, preset, depth) at the first base LR, as the sweep
    will, and check its layout on the study's device, and a GPU study's memory at its deepest
    depth against this machine's GPU (:func:`check_gpu_memory`). Raises :class:`LaunchError`
    naming the study, variant, preset and depth."""
    from launch.commands import format_override
    from launch.run_configs import load_run_config
    from runconfig.validate import validate_layout

    with tempfile.TemporaryDirectory(prefix="study_plan_") as tmp:
        base = Path(tmp) / "base.yaml"
        base.write_text(yaml.safe_dump(base_config(s, data_dir), sort_keys=False))
        checked, deepest = 0, {}
        for variant, overrides in s.variants.items():
            for preset in s.presets:
                for depth in s.depths:
                    where = f"study {s.name!r}: " + (f"variants.{variant}, " if variant else "")
                    where += f"preset {preset}, L={depth}: "
                    args = [f"model.num_layers={depth}"]
                    args += [format_override(k, v) for k, v in s.arm_values(preset).items() if v is not None]
                    args += [format_override(k, v) for k, v in overrides.items()]
                    cfg = load_run_config(base, args, where=where)
                    try:
                        validate_layout(cfg, 1)
                    except ValueError as exc:
                        raise LaunchError(f"{where}{exc}") from None
                    checked += 1
                    deepest[variant, preset] = (where, cfg)  # depths ascend: the last is the largest
    memory = check_gpu_memory(s, list(deepest.values())) if s.device == "cuda" else []
    return ConfigCheck(checked, memory)


def local_cuda_devices() -> int:
    """CUDA devices this machine has: ``nvidia-smi``'s list, else (no ``nvidia-smi`` on the PATH, as
    in some containers) torch's count, asked in a child so that this process never starts CUDA
    (the executor forks its runs' server from a clean process, launch/warm_start.py)."""
    import subprocess
    import sys

    from launch.gpu_share import nvidia_smi_gpus

    gpus = nvidia_smi_gpus()
    if gpus:
        return len(gpus)
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


def check_local_gpu(s: Study, executor: str) -> None:
    """A study of ``device: cuda`` run here (the local executor) on a machine without a CUDA
    device: :class:`LaunchError` before its data is prepared. Every run would exit 2 at its start
    and the study would read that as an LR grid that trains nothing at the base depth. Under
    ``--executor slurm`` the runs go to the cluster's GPU nodes and a login node has none."""
    if executor == "local" and s.device == "cuda" and local_cuda_devices() == 0:
        raise LaunchError(
            f"study {s.name!r}: device: cuda, but this machine has no CUDA device: run it on a GPU node, "
            "or with --executor slurm (--plan prints what it will train; a CPU copy of the study file "
            "needs device: cpu and precision: auto)"
        )


def gpu_memory_lines(s: Study, deepest: list[tuple[str, object]], total_mib: Optional[int]) -> list[str]:
    """The memory estimate of each (variant, preset) at the deepest depth (a run's memory grows
    with depth), against ``total_mib`` when the GPU is known; :class:`LaunchError` naming the
    study's keys when one run alone does not fit. The study's vocabulary is taken as the
    tokenizer's full ``vocab_size`` (the corpus is not tokenized yet): an upper bound."""
    from launch.gpu_share import PACKING_MARGIN, run_memory

    lines = []
    for where, cfg in deepest:
        mem = run_memory(replace(cfg, model=replace(cfg.model, vocab_size=s.vocab_size)), 1)  # type: ignore[type-var]
        if total_mib is not None and mem.exceeds(total_mib):
            raise LaunchError(
                f"{where}{mem.note()} is more than the GPU has ({total_mib} MiB): lower the study file's "
                f"micro_batch ({s.micro_batch}) or set model.recompute in a variant"
            )
        packed = (
            f"; {s.runs_per_gpu} per GPU (runs_per_gpu) need {s.runs_per_gpu * mem.need_mib} MiB ({mem.need_mib} each: "
            f"model states + activations x {PACKING_MARGIN:g} + CUDA context, the free memory a packed run waits for)"
            if s.runs_per_gpu > 1
            else ""
        )
        lines.append(f"{where}{mem.note()}{packed}")
    return lines


def check_gpu_memory(s: Study, deepest: list[tuple[str, object]]) -> list[str]:
    """Refuse, before any data is prepared, a GPU study whose deepest run alone exceeds the
    smallest GPU ``nvidia-smi`` lists here; where it lists none (a login node) the estimates are
    only reported: the executor checks each run again before it starts (``launch.executor_local``)."""
    from launch.gpu_share import nvidia_smi_gpus

    gpus = nvidia_smi_gpus()
    total = min(g.total_mib for g in gpus) if gpus else None
    lines = gpu_memory_lines(s, deepest, total)
    seen = f"against the smallest GPU here ({total} MiB)" if total else "not checked: nvidia-smi lists no GPU here"
    return [f"GPU memory per run at the deepest depth ({seen}):", *lines]


def arm_text(s: Study, arm: str) -> str:
    """An arm as ``--plan`` names it: a fixed preset, or a custom arm with its alpha and gamma."""
    custom = s.custom_presets.get(arm)
    return f"{arm} (custom: alpha {custom['alpha']:g}, gamma {custom['gamma']:g})" if custom else arm


def plan_lines(s: Study) -> list[str]:
    """What ``launch demo --plan`` prints: runs per variant, preset and depth of the fixed design,
    their cost in layer-runs, and the sequential phase's bound."""
    points = fixed_design(s)
    lines = [
        f"study {s.name}: presets {', '.join(arm_text(s, p) for p in s.presets)}; depths {list(s.depths)} (L0 = {s.depths[0]}); "
        f"width {s.hidden_size}, sequence {s.seq_length}, batch {s.batch}, {s.steps} steps, evaluated at "
        f"{', '.join(f'{f:g}' for f in s.eval_at)} of training; corpus {s.corpus}",
        f"fixed design (scan, refine, seeds) on a planted answer: {len(points)} runs (the scan alone: "
        f"{scan_runs(s)} per variant); an optimum on the edge of the LRs tried adds LRs and their seeds",
    ]
    for variant in s.variants:
        mine = [p for p in points if p.variant == variant]
        label = f"  {variant}: " if variant else "  "
        for preset in s.presets:
            counts = Counter(p.depth for p in mine if p.preset == preset)
            if counts:
                cells = ", ".join(f"L={d}: {counts[d]}" for d in s.depths if counts[d])
                lines.append(f"{label}{preset}: {sum(counts.values())} runs ({cells})")
    layers = sum(p.depth + s.run_overhead_layers for p in points)
    lines.append(
        f"cost: {layers:g} layer-runs (each run counts its depth + run_overhead_layers {s.run_overhead_layers:g}); "
        f"each run trains {s.steps * s.batch * s.seq_length:,} tokens"
    )
    if s.goals:
        goals = ", ".join(f"{k} <= {v:g}" for k, v in s.goals.items())
        lines.append(
            f"then the sequential phase adds seeds until every goal is met ({goals}) or the budget is spent: "
            f"at most {s.budget_runs} runs per variant, {s.run_budget} in all"
        )
    else:
        lines.append("no goals: the study ends after the fixed design")
    return lines

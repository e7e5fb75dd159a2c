"""Cost of training-time diagnostics (``logging.diagnostics_interval``) per training step.

    python benchmarks/diagnostics_overhead.py [--steps 60] [--rounds 3] [--interval 10]

Trains the same model with diagnostics off and on (every ``--interval`` steps: a parameter
copy, the update and weight RMS of every parameter, one probe forward) in one process, one
thread (as the demo's runs), alternating the order each round; prints the median time per
step of each and their ratio, for the tiny config's shape and the demo study's shape at
depths 8 and 32.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = {
    "tiny (L=4, n=64, seq 64, batch 8)": ["model.num_layers=4"],
    "demo L=8 (n=64, seq 64, batch 16)": ["model.num_layers=8", "training.micro_batch_size=16",
                                          "training.global_batch_size=16"],
    "demo L=32 (n=64, seq 64, batch 16)": ["model.num_layers=32", "training.micro_batch_size=16",
                                           "training.global_batch_size=16"],
}  # fmt: skip


def time_steps(overrides: list[str], steps: int, interval: int) -> float:
    """Seconds per step over ``steps`` steps (after 3 warm-up steps)."""
    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.diagnostics import Diagnostics
    from training.model import build_model, resolve
    from training.optim import CpuOptimizer

    cfg = load_config(RunConfig, REPO / "configs" / "tiny_cpu.yaml", overrides)
    torch.manual_seed(0)
    resolved = resolve(cfg)
    model = build_model(cfg, cfg.model.vocab_size, resolved=resolved)
    opt = CpuOptimizer(cfg, [model], resolved)
    b, seq = cfg.training.micro_batch_size, cfg.model.seq_length
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.model.vocab_size, (b, seq + 1), generator=gen)
    positions = torch.arange(seq).unsqueeze(0).expand(b, seq)
    probe = {"tokens": tokens[:2, :-1], "position_ids": positions[:2]}  # the trainer's probe: 2 sequences
    diagnostics = Diagnostics(model, interval, probe)
    t0 = 0.0
    for step in range(1, steps + 4):
        if step == 4:
            t0 = time.perf_counter()
        loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        opt.zero_grad()
        loss.backward()
        diagnostics.before_step(step)
        opt.step()
        diagnostics.after_step(step)
    return (time.perf_counter() - t0) / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from training.distributed import single_process

    with single_process():
        for name, overrides in SHAPES.items():
            times: dict[str, list[float]] = {"off": [], "on": []}
            for r in range(args.rounds):
                for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
                    times[mode].append(time_steps(overrides, args.steps, args.interval if mode == "on" else 0))
            off, on = statistics.median(times["off"]), statistics.median(times["on"])
            print(f"{name}: off {off * 1e3:.1f} ms/step, on (every {args.interval}) {on * 1e3:.1f} ms/step, "
                  f"ratio {on / off:.3f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

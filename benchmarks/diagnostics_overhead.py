"""Cost of training-time diagnostics (``logging.diagnostics_interval``) per training step.

    python benchmarks/diagnostics_overhead.py [--cycles 20] [--rounds 3] [--interval 10]

Trains each shape with diagnostics on (every ``--interval`` steps: a parameter copy, the
update and weight RMS of every parameter, one probe forward) in one process, one thread (as
the demo's runs), timing every step. Diagnostics do nothing on the other steps, so the cost
is the extra time of a logged step over an unlogged one, both from the same run:
``ratio = 1 + (median logged - median unlogged) / (interval * median unlogged)``. Whole-run
A/B timings on this shared machine moved by more than the effect (1.16 and 0.96 in one run),
so the paired estimate is the number quoted; an off run's median step is printed beside it
to show that unlogged steps cost what steps without diagnostics cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from rundir.contract import ExitCode  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = {
    "tiny (L=4, n=64, seq 64, batch 8 as 2 micro-batches of 4)": [],
    "demo L=8 (n=64, seq 64, batch 16)": ["model.num_layers=8", "training.micro_batch_size=16",
                                          "training.global_batch_size=16"],
    "demo L=32 (n=64, seq 64, batch 16)": ["model.num_layers=32", "training.micro_batch_size=16",
                                           "training.global_batch_size=16"],
}  # fmt: skip


def step_times(overrides: list[str], steps: int, interval: int) -> list[float]:
    """Seconds of each of ``steps`` steps (after 3 warm-up steps), diagnostics included."""
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
    micro = cfg.training.global_batch_size // b  # gradient accumulation, as the trainer steps
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, cfg.model.vocab_size, (micro * b, seq + 1), generator=gen)
    positions = torch.arange(seq).unsqueeze(0).expand(b, seq)
    probe = {"tokens": tokens[:2, :-1], "position_ids": positions[:2]}  # the trainer's probe: 2 sequences
    diagnostics = Diagnostics(model, interval, probe)
    times = []
    for step in range(1, steps + 4):
        t0 = time.perf_counter()
        opt.zero_grad()
        for chunk in tokens.split(b):
            loss = model(chunk[:, :-1], positions, None, labels=chunk[:, 1:]).float().mean() / micro
            loss.backward()
        diagnostics.before_step(step)
        opt.step()
        diagnostics.after_step(step)
        if step > 3:
            times.append(time.perf_counter() - t0)
    return times


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20, help="logged steps per run")
    parser.add_argument("--rounds", type=int, default=3, help="runs per shape (medians over all)")
    parser.add_argument("--interval", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from training.distributed import single_process

    n = args.interval
    with single_process():
        for name, overrides in SHAPES.items():
            logged, unlogged, off = [], [], []
            for _ in range(args.rounds):
                times = step_times(overrides, n * args.cycles, n)
                logged += [t for i, t in enumerate(times, start=4) if i % n == 0]
                unlogged += [t for i, t in enumerate(times, start=4) if i % n != 0]
                off += step_times(overrides, n * args.cycles // 4, 0)
            on_step, plain_step = statistics.median(logged), statistics.median(unlogged)
            ratio = 1 + (on_step - plain_step) / (n * plain_step)
            print(f"{name}: logged step {on_step * 1e3:.1f} ms, unlogged {plain_step * 1e3:.1f} ms "
                  f"(off run {statistics.median(off) * 1e3:.1f} ms), ratio at every {n}: {ratio:.3f}",
                  flush=True)  # fmt: skip
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

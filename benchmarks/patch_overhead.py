"""Step time of the patched model over the unpatched one, measured in one run.

    python benchmarks/patch_overhead.py                 # CPU (always), GPU too when one is present
    python benchmarks/patch_overhead.py --device cpu --rounds 12

Both models have the same shape and run the same training step of the toolkit's backend
(forward, backward, clipping, optimizer step): the unpatched one is stock megatron-core
(no spec patch, no hooks, megatron's default parameter groups); the patched one is
depth-muP + width muP with every multiplier active (branch multiplier != 1, logit and
embedding multipliers != 1, per-role LR groups). Rounds alternate A/B so drift in machine
load hits both; the ratio of medians is printed. On CPU the clock is the process's CPU time,
so a busy machine does not bias the ratio. Goal: <= 1.02 on CPU, <= 1.01 on GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from runconfig import load_config  # noqa: E402
from runconfig.schema import RunConfig  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402

SHAPES = {
    "cpu": [
        "model.num_layers=8",
        "model.hidden_size=256",
        "model.num_attention_heads=8",
        "model.seq_length=256",
        "model.vocab_size=4096",
        "training.micro_batch_size=4",
        "training.global_batch_size=4",
    ],
    "cuda": [
        "model.num_layers=12",
        "model.hidden_size=768",
        "model.num_attention_heads=12",
        "model.seq_length=2048",
        "model.vocab_size=50304",
        "training.micro_batch_size=8",
        "training.global_batch_size=8",
    ],
}
PATCHED = [
    "parametrization.preset=depth_mup",
    "parametrization.base_num_layers=2",
    "parametrization.base_hidden_size=128",
    "parametrization.output_multiplier=2.0",
    "parametrization.embedding_multiplier=1.5",
]


def backend(cfg: RunConfig, device: str, patched: bool):
    from training.backends import CpuBackend, GpuBackend
    from training.distributed import seed_everything
    from training.model import Placement, build_model, resolve

    seed_everything(0, device, cfg.model.cuda_graphs)  # same init for both; on CUDA megatron's RNG tracker too
    placement = Placement(device=device, bf16=device == "cuda")
    model = build_model(cfg, cfg.model.vocab_size, placement, patched=patched)
    resolved = resolve(cfg) if patched else None
    if device == "cuda":
        return GpuBackend(cfg, model, resolved, bf16=True)
    return CpuBackend(cfg, model, resolved)


def batches(cfg: RunConfig) -> list[dict[str, torch.Tensor]]:
    """One step's micro-batches of random tokens (global / micro batch size of them)."""
    g = torch.Generator().manual_seed(0)
    b, s, v = cfg.training.micro_batch_size, cfg.model.seq_length, cfg.model.vocab_size
    out = []
    for _ in range(cfg.training.global_batch_size // b):
        tokens = torch.randint(0, v, (b, s + 1), generator=g)
        out.append(
            {
                "tokens": tokens[:, :-1],
                "labels": tokens[:, 1:],
                "loss_mask": torch.ones(b, s),
                "position_ids": torch.arange(s).unsqueeze(0).expand(b, s),
            }
        )
    return out


def timed(step, data, n: int, device: str) -> float:
    """Seconds per step. CPU: this process's CPU time (all its threads), which other
    processes' load does not inflate; GPU: wall time between synchronizations."""
    clock = time.perf_counter if device == "cuda" else time.process_time
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = clock()
    for _ in range(n):
        step(data)
    if device == "cuda":
        torch.cuda.synchronize()
    return (clock() - t0) / n


def measure(device: str, rounds: int, steps: int, warmup: int) -> tuple[float, float, float]:
    from training.distributed import init_distributed, shutdown

    init_distributed(device)
    if device == "cpu":
        torch.set_flush_denormal(True)  # as train_gpt.py's CPU path does
    try:
        cfg = load_config(RunConfig, None, [*SHAPES[device], "data.mock=true", "optimizer.lr=1e-4", *PATCHED])
        runs = {"unpatched": backend(cfg, device, False), "patched": backend(cfg, device, True)}
        data = batches(cfg)
        for b in runs.values():
            timed(b.train_step, data, warmup, device)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for r in range(rounds):
            order = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for key in order:
                times[key].append(timed(runs[key].train_step, data, steps, device))
        med = {k: statistics.median(v) for k, v in times.items()}
        return med["unpatched"], med["patched"], med["patched"] / med["unpatched"]
    finally:
        shutdown()


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=1, help="steps per timed block")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads (1 by default: OpenMP spin-waits inflate CPU time unevenly with more)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    if "cuda" in devices and not torch.cuda.is_available():
        if args.device == "cuda":
            print("error: no CUDA device", file=sys.stderr)
            return ExitCode.USAGE
        devices.remove("cuda")
    goals = {"cpu": 1.02, "cuda": 1.01}
    for device in devices:
        base, patched, ratio = measure(device, args.rounds, args.steps, args.warmup)
        name = torch.cuda.get_device_name() if device == "cuda" else f"cpu x{torch.get_num_threads()} threads"
        verdict = "meets" if ratio <= goals[device] else "MISSES"
        print(
            f"{device} ({name}): unpatched {base * 1e3:.2f} ms/step, patched {patched * 1e3:.2f} ms/step, "
            f"ratio {ratio:.4f} ({verdict} the {goals[device]} goal)"
        )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

"""Where one training step's GPU time goes, by kernel family, for any run config.

    python benchmarks/step_profile.py --config configs/gpt_100m_gpu.yaml data.mock=true model.vocab_size=50304
    python benchmarks/step_profile.py --config configs/tiny_cpu.yaml --device cpu   # smoke run

Builds the trainer's backend (megatron DDP, optimizer and schedules on GPU), runs warm-up
steps on random tokens, then profiles ``--steps`` steps with ``torch.profiler`` and prints
the device time per kernel family (matrix products, attention, cross-entropy, normalization,
element-wise, optimizer, communication), the top kernels, and the measured step time with
its model FLOP rate and MFU. Use it before a change that is meant to speed a step up: it
says which family the change should shrink. ``--copies N`` lists the N costliest
data-movement ops (copies, concatenations, fills) with the chain of ops that issued them and
the toolkit/megatron source line, including copies made inside another op (an attention
kernel's layout changes), which benchmarks/copy_sources.py cannot see.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from rundir.contract import ExitCode  # noqa: E402

# Kernel-name patterns, first match wins (names as CUDA and PyTorch report them).
FAMILIES = [
    ("fused_triton", r"^triton_"),  # torch.compile'd fusions (megatron's fused cross-entropy)
    ("attention", r"flash|fmha|attention|sdpa|efficient_attention"),
    ("matmul", r"gemm|cutlass|sm90_xmma|nvjet|matmul|cublas|addmm|\bmm\b"),
    ("communication", r"nccl|all_reduce|allreduce|reduce_scatter|all_gather"),
    ("cross_entropy", r"log_softmax|softmax|cross_entropy|nll_loss|logsumexp|max_kernel|reduce_kernel"),
    ("normalization", r"layer_norm|rms_norm|layernorm|rmsnorm"),
    ("optimizer", r"adam|multi_tensor|foreach|sgd|l2norm|_amp_"),
    ("copy_cast", r"copy|cast|convert|fill|memset|memcpy|cat|index"),
    ("elementwise", r"elementwise|vectorized|unrolled|gelu|silu|mul|add|pow|exp|triton"),
]


COPY_OPS = re.compile(r"^aten::(copy_|cat|fill_|zero_|stack|index|slice_backward|select_backward|repeat)")


def _ours(frame: str) -> bool:
    return any(k in frame for k in ("megatron/", "training/", "patches/")) and "step_profile" not in frame


def copy_sources(events: list, cuda: bool) -> list[tuple[str, str, int, float]]:
    """(op chain, source, count, self time in us) per distinct chain of the data-movement ops
    that ran kernels (device time on CUDA, CPU time on CPU), costliest first. The chain is the op
    and the ATen ops / autograd nodes above it; the source the innermost megatron/toolkit frame
    of the Python stack above it (none for backward ops: their chain names the autograd node)."""
    rows: dict[tuple[str, str], list] = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.device_type == torch.autograd.DeviceType.CUDA or not COPY_OPS.search(e.name):
            continue
        us = e.self_device_time_total if cuda else e.self_cpu_time_total
        if us <= 0:
            continue
        chain, source, parent = [e.name], next((f for f in e.stack or [] if _ours(f)), ""), e.cpu_parent
        while parent is not None:
            name = parent.name
            if ".py(" in name:  # a Python function event (with_stack)
                if not source and _ours(name):
                    source = name.split("site-packages/")[-1]
            elif name.startswith(("aten::", "autograd::")) or name.endswith("Backward0"):
                chain.append(name.replace("autograd::engine::evaluate_function: ", ""))
            parent = parent.cpu_parent
        key = (" < ".join(dict.fromkeys(chain[:4])), source)
        rows[key][0] += 1
        rows[key][1] += us
    return sorted(((c, s, n, us) for (c, s), (n, us) in rows.items()), key=lambda r: -r[3])


HEADER = re.compile(
    r"^(?P<where>.+): (?:un)?patched step (?P<step_ms>[\d.]+) ms(?:, [\d.]+ TFLOP/s)?(?:, MFU (?P<mfu>[\d.]+))?;"
)
FAMILY_LINE = re.compile(r"^  (?P<family>\w+) +(?P<ms>[\d.]+) ms +(?P<share>[\d.]+)%$")


def read_profile(text: str) -> dict | None:
    """The step time, MFU and per-family time of what ``main`` printed (None: no profile in it,
    e.g. a run cut before it printed): {"step_ms", "mfu" (None on CPU), "families": {name: (ms per
    step, share)}}. The one reader of this format, beside its writer."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        head = HEADER.match(line)
        if head:
            families = {}
            for follow in lines[i + 1 :]:
                m = FAMILY_LINE.match(follow)
                if not m:
                    break
                families[m["family"]] = (float(m["ms"]), float(m["share"]) / 100)
            mfu = head["mfu"]
            return {"step_ms": float(head["step_ms"]), "mfu": float(mfu) if mfu else None, "families": families}
    return None


def family(name: str) -> str:
    low = name.lower()
    for fam, pattern in FAMILIES:
        if re.search(pattern, low):
            return fam
    return "other"


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--steps", type=int, default=3, help="profiled steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--top", type=int, default=15, help="kernels listed")
    parser.add_argument(
        "--ops", type=int, default=0, help="also list the N PyTorch ops (with shapes) costing most device time"
    )
    parser.add_argument(
        "--copies", type=int, default=0, help="also list the N costliest copy/concat/fill ops with who issued them"
    )
    parser.add_argument("--unpatched", action="store_true", help="stock megatron-core, for comparison")
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args()

    from benchmarks.patch_overhead import backend as make_backend
    from benchmarks.patch_overhead import batches
    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.distributed import init_distributed, shutdown
    from training.flops import peak_flops, train_flops_per_step

    cuda = args.device == "cuda"
    cfg = load_config(RunConfig, args.config, [*args.overrides, f"parallel.device={args.device}"])
    init_distributed(args.device)
    try:
        backend = make_backend(cfg, args.device, patched=not args.unpatched)  # the trainer's, seeded
        data = batches(cfg)

        def sync() -> None:
            if cuda:
                torch.cuda.synchronize()

        for _ in range(args.warmup):
            backend.train_step(data)
        sync()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            backend.train_step(data)
        sync()
        step_s = (time.perf_counter() - t0) / args.steps

        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(
            activities=activities, record_shapes=args.ops > 0, with_stack=args.copies > 0
        ) as prof:
            for _ in range(args.steps):
                backend.train_step(data)
            sync()
        events = [e for e in prof.key_averages() if (e.device_type == torch.autograd.DeviceType.CUDA) == cuda]
        attr = "self_device_time_total" if cuda else "self_cpu_time_total"
        by_family: dict[str, float] = defaultdict(float)
        for e in events:
            by_family[family(e.key)] += getattr(e, attr)
        total = sum(by_family.values()) or 1.0

        flops = train_flops_per_step(cfg, cfg.model.vocab_size) if cuda else None
        peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
        where = torch.cuda.get_device_name() if cuda else "cpu"
        print(f"{where}: {'unpatched' if args.unpatched else 'patched'} step {step_s * 1e3:.1f} ms", end="")
        if flops:
            tflops = flops / step_s / 1e12
            print(f", {tflops:.0f} TFLOP/s" + (f", MFU {tflops * 1e12 / peak:.3f}" if peak else ""), end="")
        print(f"; profiled {args.steps} steps, {'device' if cuda else 'CPU'} time per step by family:")
        for fam, us in sorted(by_family.items(), key=lambda kv: -kv[1]):
            print(f"  {fam:14s} {us / args.steps / 1e3:9.2f} ms  {us / total:6.1%}")
        print(f"top {args.top} kernels:")
        for e in sorted(events, key=lambda e: -getattr(e, attr))[: args.top]:
            us = getattr(e, attr)
            print(
                f"  {us / args.steps / 1e3:8.2f} ms {us / total:6.1%} x{e.count // args.steps:<5d} {family(e.key):13s} {e.key[:90]}"
            )
        if args.ops:
            print(f"top {args.ops} PyTorch ops by their kernels' own device time (input shapes):")
            ops = [
                e
                for e in prof.key_averages(group_by_input_shape=True)
                if e.device_type != torch.autograd.DeviceType.CUDA
            ]
            for e in sorted(ops, key=lambda e: -getattr(e, attr))[: args.ops]:
                us = getattr(e, attr)
                print(
                    f"  {us / args.steps / 1e3:8.2f} ms x{e.count // args.steps:<5d} {e.key[:40]:40s} {str(e.input_shapes)[:110]}"
                )
        if args.copies:
            print(f"top {args.copies} data-movement ops per step (op < the ops that called it; source):")
            for chain, source, n, us in copy_sources(prof.events(), cuda)[: args.copies]:
                print(f"  {us / args.steps / 1e3:8.2f} ms x{n // args.steps:<5d} {chain[:110]}  [{source[:90]}]")
    finally:
        shutdown()
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

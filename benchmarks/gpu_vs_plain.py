"""The toolkit's GPT against a plain-PyTorch GPT of the same shape and batch, on one device.

    python benchmarks/gpu_vs_plain.py                                    # 124m, 350m, 1b on the GPU
    python benchmarks/gpu_vs_plain.py --sizes 124m --rounds 10 --patch-rounds 10
    python benchmarks/gpu_vs_plain.py --sizes 124m --variant rope_megatron:model.rope_impl=megatron
    python benchmarks/gpu_vs_plain.py --device cpu --tiny --json out.json   # the harness on CPU (tests)

For each size (``SIZES``: the run config it is read from, with mock data and vocabulary 50304)
it builds, in one process:

* the toolkit's patched model through the trainer's own calls (``patch_overhead.backend``:
  ``build_model`` with the config's parametrization, ``GpuBackend``: bf16 ``Float16Module``,
  megatron DDP, megatron's optimizer, schedules and fused cross-entropy), fed the CPU
  micro-batches the trainer feeds it;
* ``benchmarks/plain_gpt.py``'s model of the same shape: bf16 autocast, ``torch.compile``,
  fused AdamW with the same betas, epsilon, weight decay and clipping, pinned micro-batches
  copied asynchronously (what a careful plain loop does);

and times ``--steps`` optimizer steps of each per round, alternating which goes first, for
``--rounds`` rounds. It prints each one's tokens/s and MFU (``training.flops``' count, the full
attention matrix for both models, against the device's dense bf16 peak) and the per-round ratio
toolkit/plain with its min/median/max. Both models' forward FLOPs per token are also counted
by ``torch.utils.flop_counter`` on one sequence and compared with the formula. Then the plain
model is freed and the unpatched (stock megatron-core) model alternates with the patched one
for ``--patch-rounds`` rounds (``patch_overhead``'s timing).

``--variant NAME:key=value,...`` adds a toolkit model built with those config overrides to the
alternation (a lever's before/after in one call); ``bench.device_batches=true`` feeds it
micro-batches already on the device. ``--json`` writes every number. An out-of-memory size is
reported and skipped. ``--time-limit S``: rounds stop when the next one (and the patched/unpatched
rounds after them) would pass S seconds from the start, a size is not started after it; the
rounds that ran are printed and recorded (``rounds``). The toolkit and plain models are set up
first; a variant's set-up (a first compile, a graph capture: no bound of their own) is cut at S
and the variant left out, so the rounds of the others still run. SIGTERM (the stage's
``timeout``) ends the rounds: the ones that finished are reported and written to ``--json``
(``stopped``), a size stopped before its first round is recorded with an ``error``; exit 75.
On CPU the clock is the process's CPU time and MFU is not printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from benchmarks.deadline import Deadline, Rounds, Stopped, TimeLimit, add_time_limit, stop_on_sigterm  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SIZES = {
    "124m": "configs/gpt_100m_gpu.yaml",
    "350m": "configs/gpt_350m_gpu.yaml",
    "1b": "configs/gpt_1b_gpu.yaml",
}
GPU_VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128, as the configs' smoke runs use
TINY = [
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.num_attention_heads=4",
    "model.seq_length=64",
    "model.vocab_size=256",
    "model.ffn_hidden_size=null",
    "model.num_query_groups=null",
    "model.kv_channels=null",
    "parametrization.base_hidden_size=64",
    "parametrization.base_num_layers=1",
    "parametrization.base_head_dim=null",
    "training.micro_batch_size=2",
    "training.global_batch_size=4",
    "optimizer.lr=0.01",
]


@dataclass(eq=False)  # identity: runners are found in lists by identity
class Runner:
    name: str
    step: Callable[[Any], Any]  # one optimizer step on ``data``; returns the loss (float or tensor)
    data: Any
    losses: list = field(default_factory=list)
    times: list = field(default_factory=list)  # seconds per step, one entry per round
    backend: Any = None  # the toolkit's backend (None for the plain model)
    transient: float = 0.0  # CUDA: most bytes a timed block allocated above what was resident before it


def parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, overrides = text.partition(":")
    if not name or not overrides:
        raise SystemExit(f"error: --variant {text!r}: expected NAME:key=value[,key=value...]")
    return name, [o for o in overrides.split(",") if o]


def load(size: str, device: str, tiny: bool, overrides: list[str]) -> Any:
    from runconfig import load_config
    from runconfig.schema import RunConfig

    cuda = device == "cuda"
    base = [
        "data.mock=true",
        f"model.vocab_size={GPU_VOCAB}",
        f"parallel.device={device}",
        f"training.precision={'bf16' if cuda else 'fp32'}",
    ]
    return load_config(RunConfig, REPO / SIZES[size], [*base, *(TINY if tiny else []), *overrides])


def toolkit_runner(name: str, cfg: Any, device: str, patched: bool, device_batches: bool = False) -> Runner:
    """The trainer's model and backend (``patch_overhead.backend``), groups at their peak LR."""
    from benchmarks.patch_overhead import backend, batches

    b = backend(cfg, device, patched=patched)
    for group in b.param_groups:
        group["lr"] = group.get("max_lr", group["lr"])
    data = batches(cfg)
    if device_batches:
        data = [{k: v.to(device) for k, v in mb.items()} for mb in data]
    return Runner(name, lambda d: b.train_step(d).loss, data, backend=b)


def plain_runner(cfg: Any, device: str, compile_model: bool) -> tuple[Runner, torch.nn.Module]:
    """benchmarks/plain_gpt.py's model with a plain training step; returns it and its eager module."""
    from benchmarks.patch_overhead import batches
    from benchmarks.plain_gpt import PlainGPT, param_groups, shape_of

    cuda = device == "cuda"
    torch.manual_seed(0)
    eager = PlainGPT(shape_of(cfg, cfg.model.vocab_size)).to(device)
    model = torch.compile(eager) if compile_model else eager
    o = cfg.optimizer
    opt = torch.optim.AdamW(
        param_groups(eager, o.weight_decay),
        lr=o.lr,
        betas=(o.adam_beta1, o.adam_beta2),
        eps=o.adam_eps,
        fused=cuda,
    )
    params = [p for p in eager.parameters()]
    data = [{k: (v.pin_memory() if cuda else v) for k, v in mb.items()} for mb in batches(cfg)]
    tokens = sum(int(mb["loss_mask"].sum()) for mb in data)

    def step(micro: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for mb in micro:
            x = mb["tokens"].to(device, non_blocking=True)
            y = mb["labels"].to(device, non_blocking=True)
            with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=cuda):
                loss = model(x, y)
            (loss / tokens).backward()
            total += loss.detach()
        if o.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(params, o.clip_grad, foreach=True)
        opt.step()
        return total / tokens

    return Runner("plain", step, data), eager


def forward_flops_per_token(forward: Callable[[torch.Tensor], Any], seq: int, vocab: int, device: str) -> float:
    """Matmul FLOPs of one forward (logits included) per token, counted by torch's FlopCounterMode,
    attention through PyTorch's math kernel so it is counted as matmuls on every device."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    tokens = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(0)).to(device)
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), counter:
        forward(tokens)
    return counter.get_total_flops() / seq


def alternate(
    runners: list[Runner],
    rounds: int,
    steps: int,
    device: str,
    may_fail: tuple = (),
    failed: dict | None = None,
    deadline: Deadline | None = None,
    reserve: Callable[[], float] = lambda: 0.0,
) -> Rounds:
    """Up to ``rounds`` rounds of ``steps`` steps of each runner, the order rotating each round,
    while the next round and ``reserve`` fit ``deadline``. A runner in ``may_fail`` that raises
    leaves the rounds (recorded in ``failed``); any other raises. ``Stopped`` (SIGTERM) ends the
    rounds: the round it cut is dropped from every runner, the rounds before it are kept."""
    from benchmarks.patch_overhead import timed

    plan = Rounds(rounds, deadline or Deadline(None), reserve)
    try:
        for r in plan:
            order = runners[r % len(runners) :] + runners[: r % len(runners)]
            for runner in order:

                def step(data: Any, runner: Runner = runner) -> None:
                    runner.losses.append(runner.step(data))

                if device == "cuda":
                    torch.cuda.reset_peak_memory_stats()
                    resident = torch.cuda.memory_allocated()
                try:
                    runner.times.append(timed(step, runner.data, steps, device))
                except Exception as exc:  # noqa: BLE001 - an unmeasured variant's failure is its result
                    if runner not in may_fail or failed is None:
                        raise
                    failed[runner.name] = f"round {r}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                    print(f"  variant {runner.name} failed, left out: {failed[runner.name]}")
                    runners.remove(runner)
                    continue
                if device == "cuda":
                    runner.transient = max(runner.transient, torch.cuda.max_memory_allocated() - resident)
    except Stopped as exc:
        plan.stop(str(exc))
        for runner in runners:
            del runner.times[plan.done :]
    if plan.note():
        print(f"  {plan.note()}")
    return plan


def spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def to_float(x: Any) -> float:
    return float(x.detach().float().cpu()) if isinstance(x, torch.Tensor) else float(x)


def run_size(size: str, args: argparse.Namespace, variants: list[tuple[str, list[str]]]) -> dict:
    from benchmarks.plain_gpt import shape_of
    from training.flops import forward_flops_per_token as formula
    from training.flops import peak_flops, train_flops_per_step

    device, cuda = args.device, args.device == "cuda"
    cfg = load(size, device, args.tiny, args.override)
    vocab, seq = cfg.model.vocab_size, cfg.model.seq_length
    tokens_per_step = cfg.training.global_batch_size * seq
    flops_per_step = train_flops_per_step(cfg, vocab)
    peak = peak_flops(torch.cuda.get_device_name()) if cuda else None
    label = f"{size}{' (tiny shape)' if args.tiny else ''}"
    out: dict[str, Any] = {
        "size": size,
        "tiny": args.tiny,
        "shape": vars(shape_of(cfg, vocab)),
        "micro_batch": cfg.training.micro_batch_size,
        "global_batch": cfg.training.global_batch_size,
        "tokens_per_step": tokens_per_step,
        "train_flops_per_step": flops_per_step,
        "peak_flops": peak,
    }
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    toolkit = toolkit_runner("toolkit", cfg, device, patched=True)
    toolkit_build_s = time.perf_counter() - t0
    # the plain model next: the comparison every stage is for is set up before the optional variants
    plain, eager = plain_runner(cfg, device, args.compile if args.compile is not None else cuda)
    runners = [toolkit, plain]

    toolkit_model = toolkit.backend.model
    positions = torch.arange(seq, device=device).unsqueeze(0)
    out["forward_flops_per_token"] = {
        "formula": formula(cfg, vocab),
        "toolkit_counted": forward_flops_per_token(lambda t: toolkit_model(t, positions, None), seq, vocab, device),
        "plain_counted": forward_flops_per_token(eager, seq, vocab, device),
    }
    out["params"] = {
        "toolkit": sum(p.numel() for p in toolkit_model.parameters()),
        "plain": sum(p.numel() for p in eager.parameters()),
    }
    for runner in runners:  # warm-up (each variant's below): compilation, allocator, cuDNN plans
        for _ in range(args.warmup):
            runner.losses.append(runner.step(runner.data))
    failed: dict[str, str] = {}
    for name, overrides in variants:
        device_batches = "bench.device_batches=true" in overrides
        if args.deadline.left() <= 0:  # a compiled or captured variant's set-up can take minutes
            failed[name] = f"not built: the time limit ({args.time_limit:.0f} s) had passed"
            print(f"  variant {name} left out: {failed[name]}")
            continue
        try:
            # a variant's set-up (a first compile, a graph capture) has no bound of its own: the
            # time limit cuts it, so the rounds of the models built before it still run
            with args.deadline.bounded():
                vcfg = load(
                    size, device, args.tiny, [*args.override, *(o for o in overrides if not o.startswith("bench."))]
                )
                if vcfg.training.global_batch_size != cfg.training.global_batch_size or vcfg.model.seq_length != seq:
                    raise ValueError(f"tokens per step must stay {tokens_per_step} (change micro-batch, not global)")
                variant = toolkit_runner(name, vcfg, device, patched=True, device_batches=device_batches)
                for _ in range(args.warmup):  # an unmeasured switch may fail here: reported, not fatal
                    variant.losses.append(variant.step(variant.data))
            runners.append(variant)
        except (Exception, TimeLimit) as exc:  # noqa: BLE001 - any failure of a variant is its result
            if isinstance(exc, TimeLimit):
                failed[name] = f"not built: {exc} during its set-up"
            else:
                failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            print(f"  variant {name} failed, left out: {failed[name]}")
            variant = None
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    out["failed_variants"] = failed
    if cuda:
        torch.cuda.synchronize()
        out["resident_gib"] = torch.cuda.memory_allocated() / 2**30  # every model's weights and optimizer state
    out["setup_s"] = time.perf_counter() - t0
    toolkit_times = toolkit.times  # (the closure must not see `toolkit`, deleted below)

    def patch_reserve() -> float:  # the unpatched model's build and warm-up, and its rounds with the patched one
        step_s = statistics.median(toolkit_times)
        return toolkit_build_s + args.warmup * step_s + args.patch_rounds * 2 * args.steps * step_s

    t0 = time.perf_counter()
    plan = alternate(
        runners, args.rounds, args.steps, device, tuple(runners[2:]), failed, args.deadline,
        patch_reserve if args.patch_rounds else lambda: 0.0,
    )  # fmt: skip
    out["timed_s"] = time.perf_counter() - t0
    if plan.stopped_by and not plan.done:
        raise Stopped(plan.stopped_by)
    out["rounds"] = plan.done
    if plan.stopped_by:
        out["stopped"] = plan.note()
    if cuda:  # the most allocated at once during the timed rounds: every model resident + one step's
        out["peak_memory_gib"] = out["resident_gib"] + max(r.transient for r in runners) / 2**30

    def report(runner: Runner) -> dict:
        tps = [tokens_per_step / t for t in runner.times]
        mfu = [flops_per_step / t / peak for t in runner.times] if peak else None
        losses = [to_float(x) for x in runner.losses]
        return {
            "step_s": list(runner.times),
            "tokens_per_s": spread(tps),
            "mfu": spread(mfu) if mfu else None,
            "loss_first": losses[0],
            "loss_last": losses[-1],
            "step_transient_gib": runner.transient / 2**30 if cuda else None,
        }

    out["models"] = {r.name: report(r) for r in runners}
    out["ratio_toolkit_over_plain"] = spread([p / t for t, p in zip(toolkit.times, plain.times)])
    for r in runners[2:]:
        out.setdefault("ratio_variant_over_toolkit", {})[r.name] = spread(
            [t / v for t, v in zip(toolkit.times, r.times)]
        )
    print(f"== {label}: {out['params']['toolkit'] / 1e6:.1f}M parameters, micro-batch {out['micro_batch']}, "
          f"{tokens_per_step} tokens/step, {plan.done} rounds x {args.steps} steps "
          f"(setup {out['setup_s']:.0f} s, timed {out['timed_s']:.0f} s"
          + (f", resident {out['resident_gib']:.1f} GiB, peak {out['peak_memory_gib']:.1f} GiB)" if cuda else ")"))  # fmt: skip
    for name, rep in out["models"].items():
        t = rep["tokens_per_s"]
        line = f"  {name:16s} tokens/s {t['median']:12,.0f} [{t['min']:,.0f} .. {t['max']:,.0f}]"
        if rep["mfu"]:
            line += f"  MFU {rep['mfu']['median']:.3f} [{rep['mfu']['min']:.3f} .. {rep['mfu']['max']:.3f}]"
        if rep["step_transient_gib"] is not None:
            line += f"  step +{rep['step_transient_gib']:.1f} GiB"
        print(line + f"  loss {rep['loss_first']:.3f} -> {rep['loss_last']:.3f}")
    r = out["ratio_toolkit_over_plain"]
    print(f"  toolkit/plain tokens/s: median {r['median']:.3f} [min {r['min']:.3f}, max {r['max']:.3f}]")
    for name, r in out.get("ratio_variant_over_toolkit", {}).items():
        print(f"  {name}/toolkit tokens/s: median {r['median']:.3f} [min {r['min']:.3f}, max {r['max']:.3f}]")
    f = out["forward_flops_per_token"]
    print(f"  forward FLOPs/token: formula {f['formula']:.4g}, counted toolkit {f['toolkit_counted']:.4g}, "
          f"plain {f['plain_counted']:.4g}")  # fmt: skip

    # the plain model goes; the unpatched model alternates with the patched one
    del runners[1:], plain, eager
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    if args.patch_rounds and plan.stopped_by:
        print(f"  patched/unpatched: not run ({plan.stopped_by})")
    elif args.patch_rounds:
        patched = Runner("patched", toolkit.step, toolkit.data)
        try:
            unpatched = toolkit_runner("unpatched", cfg, device, patched=False)
            for _ in range(args.warmup):
                unpatched.step(unpatched.data)
            patch_plan = alternate([patched, unpatched], args.patch_rounds, args.steps, device, deadline=args.deadline)
        except Stopped as exc:  # the size's numbers above are kept
            patch_plan = Rounds(args.patch_rounds, args.deadline)
            patch_plan.stop(f"{exc}, in the unpatched model's set-up")
            print(f"  patched/unpatched: {patch_plan.note()}")
        if patch_plan.stopped_by:
            out["stopped"] = f"patched/unpatched: {patch_plan.note()}"
    if args.patch_rounds and not plan.stopped_by and patch_plan.done:
        ratios = [p / u for p, u in zip(patched.times, unpatched.times)]
        out["patched_over_unpatched"] = {
            "rounds": patch_plan.done,
            "step_s_patched": patched.times,
            "step_s_unpatched": unpatched.times,
            "ratio_of_medians": statistics.median(patched.times) / statistics.median(unpatched.times),
            "per_round": spread(ratios),
        }
        p = out["patched_over_unpatched"]
        print(f"  patched/unpatched step time over {patch_plan.done} rounds: ratio of medians "
              f"{p['ratio_of_medians']:.4f}, per round median {p['per_round']['median']:.4f} "
              f"[{p['per_round']['min']:.4f} .. {p['per_round']['max']:.4f}]")  # fmt: skip
        del unpatched, patched
    del toolkit
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return out


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--sizes", default="124m,350m,1b", help=f"comma-separated, of {', '.join(SIZES)}")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer width-64 shape (CPU tests of the harness)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=2, help="optimizer steps per model per round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--patch-rounds", type=int, default=10, help="patched/unpatched rounds (0: skip)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the plain model (default: on for cuda, off for cpu)")  # fmt: skip
    parser.add_argument("--variant", action="append", default=[], help="NAME:key=value,... another toolkit model")
    parser.add_argument("--override", action="append", default=[], help="key=value for every model of every size")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads")
    parser.add_argument("--json", type=Path, help="write every number here")
    add_time_limit(parser)
    args = parser.parse_args(argv)
    args.deadline = Deadline(args.time_limit)
    sizes = [s for s in args.sizes.split(",") if s]
    unknown = [s for s in sizes if s not in SIZES]
    if unknown:
        print(f"error: --sizes: unknown {unknown}; known {list(SIZES)}", file=sys.stderr)
        return ExitCode.USAGE
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device (use --device cpu --tiny)", file=sys.stderr)
        return ExitCode.USAGE
    variants = [parse_variant(v) for v in args.variant]
    torch.set_num_threads(args.threads)

    from training.distributed import init_distributed, shutdown

    init_distributed(args.device)
    if args.device == "cpu":
        torch.set_flush_denormal(True)  # as train_gpt.py's CPU path does
    results = {"device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "sizes": []}
    print(f"device: {results['device']}, torch {torch.__version__}")
    code = ExitCode.OK
    try:
        with stop_on_sigterm():  # the stage's `timeout`: what was measured is written before the exit
            for size in sizes:
                try:
                    if args.deadline.left() <= 0:
                        print(f"== {size}: not started, the time limit ({args.time_limit:.0f} s) has passed")
                        results["sizes"].append({"size": size, "error": "time limit"})
                    else:
                        results["sizes"].append(run_size(size, args, variants))
                        if "stopped" in results["sizes"][-1]:  # by SIGTERM: no time for another size
                            code = ExitCode.RESUMABLE
                except torch.cuda.OutOfMemoryError as exc:
                    print(f"== {size}: out of GPU memory ({str(exc).splitlines()[0][:160]}); skipped")
                    results["sizes"].append({"size": size, "error": "out of memory"})
                    gc.collect()
                    torch.cuda.empty_cache()
                except Stopped as exc:  # in a set-up or a first round: nothing of this size to report
                    print(f"== {size}: stopped by {exc} before a round of it ended")
                    results["sizes"].append({"size": size, "error": f"stopped by {exc} before a round ended"})
                    code = ExitCode.RESUMABLE
                if args.json:  # after each size: a time limit that stops a later one keeps these
                    args.json.write_text(json.dumps(results, indent=1) + "\n")
                if code != ExitCode.OK:
                    break
    finally:
        shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())

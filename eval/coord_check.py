"""Coordinate check across depth (and width): does the residual stream stay O(1)?

For each depth (and width), build the patched model from a run config, record the RMS of
every layer's output (the residual stream) on a fixed batch at initialization, take K
optimizer steps on random tokens with the run's real parameter groups and constant LR,
and record after each step the RMS of the stream and the RMS of its change from
initialization. Under a correct depth parametrization both stay flat as depth grows;
under SP, Megatron's ``1/sqrt(2L)`` output init keeps the stream flat at init but the
change after a few Adam steps grows with depth. The slope of log2(metric) against
log2(depth) summarizes it; the CLI exits non-zero when a slope exceeds a threshold.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from eval.outputs import write_json
from runconfig import ConfigError, load_config
from runconfig.schema import RunConfig
from rundir.contract import ExitCode

if TYPE_CHECKING:
    import torch

HELP = "activation / update RMS against depth (and width) after K steps; exits 1 when a slope exceeds a bound"


@dataclasses.dataclass
class CoordRecord:
    num_layers: int
    hidden_size: int
    step: int
    layer_rms: list[float]  # RMS of each layer's output on the fixed batch
    layer_delta_rms: list[float]  # RMS of (output - output at init)

    @property
    def last_rms(self) -> float:
        return self.layer_rms[-1]

    @property
    def last_delta_rms(self) -> float:
        return self.layer_delta_rms[-1]


def _with(cfg: RunConfig, num_layers: int, hidden_size: int | None) -> RunConfig:
    model = dataclasses.replace(cfg.model, num_layers=num_layers)
    if hidden_size is not None:
        model = dataclasses.replace(model, hidden_size=hidden_size, ffn_hidden_size=None)
    return dataclasses.replace(cfg, model=model)


def layer_outputs(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """Every transformer layer's output for ``tokens`` (``[s, b, h]`` each, fp32, detached)."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer

    outputs: list[torch.Tensor] = []
    hooks = [
        m.register_forward_hook(lambda _m, _a, out: outputs.append(out[0].detach().float()))
        for m in model.modules()
        if isinstance(m, TransformerLayer)
    ]
    try:
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        model(tokens, positions, None)
    finally:
        for h in hooks:
            h.remove()
    return outputs


def _rms(t: torch.Tensor) -> float:
    return float(t.pow(2).mean().sqrt())


def measure(
    cfg: RunConfig,
    num_layers: int,
    hidden_size: int | None = None,
    steps: int = 5,
    batch_size: int = 8,
    seed: int = 0,
    lr: float | None = None,
    fixed_batch: bool = False,
) -> list[CoordRecord]:
    """Records at step 0..steps for one shape (needs an initialized megatron parallel state).

    ``fixed_batch``: every step trains on the measured batch itself (full-batch gradient
    descent on it, the setting of NTK/dNTK theory) instead of fresh random tokens.
    """
    import torch

    from training.model import build_model, resolve
    from training.optim import CpuOptimizer

    run = _with(cfg, num_layers, hidden_size)
    if lr is not None:
        run = dataclasses.replace(run, optimizer=dataclasses.replace(run.optimizer, lr=lr))
    vocab = run.model.vocab_size or 256
    seq = run.model.seq_length
    data_gen = torch.Generator().manual_seed(10_000 + seed)  # same tokens for every shape
    fixed_seq = torch.randint(0, vocab, (batch_size, seq + (1 if fixed_batch else 0)), generator=data_gen)
    fixed = fixed_seq[:, :seq]
    torch.manual_seed(seed)
    resolved = resolve(run)
    model = build_model(run, vocab, resolved=resolved)
    optimizer = CpuOptimizer(run, [model], resolved)
    for group in optimizer.param_groups:  # constant LR: each group's peak LR, no schedule
        group["lr"] = group["max_lr"]
        group["weight_decay"] = run.optimizer.weight_decay * group.get("wd_mult", 1.0)

    def snapshot(step: int, init: list[torch.Tensor] | None) -> tuple[CoordRecord, list[torch.Tensor]]:
        model.eval()
        with torch.no_grad():
            outs = layer_outputs(model, fixed)
        model.train()
        base = init if init is not None else outs
        rec = CoordRecord(
            num_layers,
            run.model.hidden_size,
            step,
            [_rms(o) for o in outs],
            [_rms(o - b) for o, b in zip(outs, base)],
        )
        return rec, outs

    record, init_outputs = snapshot(0, None)
    records = [record]
    positions = torch.arange(seq).unsqueeze(0).expand(batch_size, seq)
    for step in range(1, steps + 1):
        tokens = fixed_seq if fixed_batch else torch.randint(0, vocab, (batch_size, seq + 1), generator=data_gen)
        loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        records.append(snapshot(step, init_outputs)[0])
    return records


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log2(y) against log2(x)."""
    lx, ly = np.log2(np.asarray(xs, float)), np.log2(np.maximum(np.asarray(ys, float), 1e-30))
    return float(np.polyfit(lx, ly, 1)[0])


def run_check(
    cfg: RunConfig, depths: list[int], widths: list[int] | None, steps: int, seed: int = 0, progress: bool = True
) -> dict[str, Any]:
    """All shapes in a one-process group; returns records and depth slopes per width."""
    from tqdm import tqdm

    from training.distributed import single_process

    shapes = [(d, w) for w in (widths or [None]) for d in depths]
    results: dict[str, Any] = {"depths": depths, "widths": widths, "steps": steps, "shapes": [], "slopes": {}}
    with single_process():
        for depth, width in tqdm(shapes, desc="coord-check", disable=not progress):
            recs = measure(cfg, depth, width, steps=steps, seed=seed)
            results["shapes"].append(
                {
                    "num_layers": depth,
                    "hidden_size": recs[0].hidden_size,
                    "records": [dataclasses.asdict(r) for r in recs],
                }
            )
    for width in widths or [None]:
        rows = [s for s in results["shapes"] if width is None or s["hidden_size"] == width]
        key = str(rows[0]["hidden_size"])
        ds = [s["num_layers"] for s in rows]
        results["slopes"][key] = {
            "init_rms": slope(ds, [s["records"][0]["layer_rms"][-1] for s in rows]),
            "final_rms": slope(ds, [s["records"][-1]["layer_rms"][-1] for s in rows]),
            "delta_rms": slope(ds, [s["records"][-1]["layer_delta_rms"][-1] for s in rows]),
        }
    return results


def _log_span(ax, values: list[float], min_ratio: float = 16.0) -> None:
    """Give a log axis at least ``min_ratio`` of range so flat data looks flat."""
    lo, hi = min(values), max(values)
    mid = (lo * hi) ** 0.5
    half = max((hi / lo) ** 0.5, min_ratio**0.5) * 1.15
    ax.set_ylim(mid / half, mid * half)


def plot(results: dict[str, Any], path: Path, title: str) -> None:
    """Per width: stream RMS vs depth (a line per step), change vs depth, per-layer profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import LogFormatterSciNotation

    widths = list(results["slopes"])
    steps = results["steps"]
    fig, axes = plt.subplots(len(widths), 3, figsize=(14, 4.2 * len(widths)), squeeze=False)
    step_colors = plt.cm.viridis([i / max(steps, 1) for i in range(steps + 1)])
    for row, width_key in zip(axes, widths):
        shapes = [s for s in results["shapes"] if str(s["hidden_size"]) == width_key]
        depths = [s["num_layers"] for s in shapes]
        slopes = results["slopes"][width_key]
        depth_colors = plt.cm.plasma([i / max(len(shapes) - 1, 1) * 0.85 for i in range(len(shapes))])
        for t in range(steps + 1):
            panels = ((row[0], "layer_rms"), (row[1], "layer_delta_rms")) if t else ((row[0], "layer_rms"),)
            for ax, metric in panels:
                ys = [s["records"][t][metric][-1] for s in shapes]
                ax.plot(depths, ys, marker="o", ms=3, color=step_colors[t], label=f"step {t}")
        for shape, color in zip(shapes, depth_colors):
            deltas = shape["records"][-1]["layer_delta_rms"]
            rel = [(i + 1) / len(deltas) for i in range(len(deltas))]
            row[2].plot(rel, deltas, color=color, label=f"L={shape['num_layers']}")
        row[0].set_title(
            f"last residual stream RMS (slope {slopes['init_rms']:+.2f} at init, "
            f"{slopes['final_rms']:+.2f} at step {steps})",
            fontsize=9,
        )
        row[1].set_title(f"RMS of change from init (slope {slopes['delta_rms']:+.2f} at step {steps})", fontsize=9)
        row[2].set_title(f"change from init per layer at step {steps}", fontsize=9)
        for ax in row[:2]:
            ax.set_xscale("log", base=2)
            ax.set_xticks(depths, [str(d) for d in depths])
            ax.set_xlabel("depth L (layers)")
        row[2].set_xlabel("layer index / L")
        for ax in row:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(LogFormatterSciNotation())
            ax.grid(alpha=0.3, which="both")
            ax.set_ylabel(f"RMS (width {width_key})")
            vals = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
            if vals:
                _log_span(ax, vals)
        row[0].legend(fontsize=7, ncol=2)
        row[2].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="run config YAML (model, parametrization, optimizer)")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument("--widths", type=int, nargs="*", default=None, help="hidden sizes (default: the config's)")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps K")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="directory for coord_check.json and coord_check.png")
    parser.add_argument(
        "--max-slope",
        type=float,
        default=0.25,
        help="fail (exit 1) when |slope of log2 RMS vs log2 depth| exceeds this for any metric",
    )
    parser.add_argument(
        "--yaida-s", type=float, nargs="+", default=None, metavar="S",
        help="check Yaida's family instead (eval/coord_check_yaida.py): feature change vs --widths at the "
        "first --depths, per s; exits 1 when a slope is off -(1-s) by more than --max-slope-error",
    )  # fmt: skip
    parser.add_argument("--seeds", type=int, default=2, help="--yaida-s: seeds averaged per width")
    parser.add_argument("--max-slope-error", type=float, default=0.15, help="--yaida-s: tolerance on each slope")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides of the run config")


def run(args: argparse.Namespace) -> ExitCode:
    try:
        cfg = load_config(RunConfig, args.config, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.yaida_s is not None:
        return _run_yaida(cfg, args)
    results = run_check(cfg, args.depths, args.widths, args.steps, args.seed)
    worst = max(abs(v) for s in results["slopes"].values() for v in s.values())
    results["max_slope"] = args.max_slope
    for width, s in results["slopes"].items():
        print(
            f"width {width}: slope vs depth  init {s['init_rms']:+.3f}  after {args.steps} steps "
            f"{s['final_rms']:+.3f}  change {s['delta_rms']:+.3f}"
        )
    return _verdict(
        results, args.out, lambda png: plot(results, png, f"coordinate check: {cfg.parametrization.preset}"),
        worst, args.max_slope, f"max |slope| {worst:.3f} (threshold {args.max_slope})",
    )  # fmt: skip


def _verdict(results: dict[str, Any], out: str | None, draw: Any, worst: float, bound: float, summary: str) -> ExitCode:
    """Record pass/fail, write coord_check.json and .png under ``out`` (``draw(png_path)``),
    print the verdict; exit code 0 pass, 1 fail."""
    results["passed"] = bool(worst <= bound)
    if out:
        out_dir = Path(out)
        write_json(out_dir / "coord_check.json", results)
        draw(out_dir / "coord_check.png")
        print(f"wrote {out_dir / 'coord_check.json'} and {out_dir / 'coord_check.png'}")
    print(("PASS" if results["passed"] else "FAIL") + f": {summary}")
    return ExitCode.OK if results["passed"] else ExitCode.FAILED


def _run_yaida(cfg: RunConfig, args: argparse.Namespace) -> ExitCode:
    from eval.coord_check_yaida import plot_yaida, run_yaida_check

    bad = [s for s in args.yaida_s if not 0.0 <= s <= 1.0]
    if bad or not args.widths or len(args.widths) < 2 or args.seeds < 1:
        why = f"--yaida-s: {bad} outside [0, 1]" if bad else "--widths: give at least two widths (--seeds >= 1)"
        print(f"error: {why}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        results = run_yaida_check(cfg, args.yaida_s, args.widths, args.depths[0], args.steps, args.seeds)
    except ValueError as exc:  # e.g. optimizer adamw: the family has no Adam rule
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    worst = max(abs(r["slope"] - r["expected_slope"]) for r in results["s_axis"])
    results["max_slope_error"] = args.max_slope_error
    for r in results["s_axis"]:
        print(
            f"s={r['s']:g}: slope of feature change vs width {r['slope']:+.3f} (theory {r['expected_slope']:+.3f}); "
            f"change {', '.join(f'{v:.3g}' for v in r['feature_change'])} at n={r['widths']}"
        )
    return _verdict(
        results, args.out, lambda png: plot_yaida(results, png, args.max_slope_error),
        worst, args.max_slope_error, f"max |slope - theory| {worst:.3f} (tolerance {args.max_slope_error})",
    )  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser(prog="python -m eval.coord_check")
    add_arguments(p)
    sys.exit(run(p.parse_args()))

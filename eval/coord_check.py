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
    logits_rms: float = 0.0  # RMS of the output logits (after the logit multiplier)
    logits_delta_rms: float = 0.0  # RMS of (logits - logits at init)
    attn_logits_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: RMS of scale*q.k (causal)
    attn_logits_delta_rms: list[float] = dataclasses.field(default_factory=list)  # per layer: change from init

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
    return coordinates(model, tokens)[0]


def attention_logits(query: torch.Tensor, key: torch.Tensor, scale: float) -> torch.Tensor:
    """The pre-softmax attention logits ``scale * q.k`` at the causal entries (key position <=
    query position), flattened; ``query`` ``[s, b, heads, d]``, ``key`` ``[s, b, groups, d]``."""
    import torch

    q, k = query.detach().float(), key.detach().float()
    if k.shape[2] != q.shape[2]:  # grouped-query attention: each key group serves heads / groups heads
        k = k.repeat_interleave(q.shape[2] // k.shape[2], dim=2)
    logits = torch.einsum("sbhd,tbhd->bhst", q, k) * scale
    causal = torch.ones(q.shape[0], k.shape[0], dtype=torch.bool).tril()
    return logits[..., causal]


def coordinates(
    model: torch.nn.Module, tokens: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor, list[torch.Tensor]]:
    """One forward pass on ``tokens``: every transformer layer's output (``[s, b, h]``, fp32,
    detached), the output logits (after the logit multiplier) and, per layer, the attention
    logits (:func:`attention_logits`; none when the core attention is not the toolkit's
    ``SDPAttention``)."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from training.attention import SDPAttention

    outputs: list[torch.Tensor] = []
    attn: list[torch.Tensor] = []

    def on_attention(module: SDPAttention, args: tuple, kwargs: dict) -> None:
        query = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs["key"]
        attn.append(attention_logits(query, key, module.softmax_scale))

    hooks = [
        m.register_forward_hook(lambda _m, _a, out: outputs.append(out[0].detach().float()))
        for m in model.modules()
        if isinstance(m, TransformerLayer)
    ]
    hooks += [
        m.register_forward_pre_hook(on_attention, with_kwargs=True)
        for m in model.modules()
        if isinstance(m, SDPAttention)
    ]
    try:
        positions = torch.arange(tokens.shape[1]).unsqueeze(0).expand_as(tokens)
        logits = model(tokens, positions, None)
    finally:
        for h in hooks:
            h.remove()
    return outputs, logits.detach().float(), attn


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

    def snapshot(step: int, init: Any) -> tuple[CoordRecord, Any]:
        model.eval()
        with torch.no_grad():
            outs, logits, attn = coordinates(model, fixed)
        model.train()
        base, base_logits, base_attn = init if init is not None else (outs, logits, attn)
        rec = CoordRecord(
            num_layers,
            run.model.hidden_size,
            step,
            [_rms(o) for o in outs],
            [_rms(o - b) for o, b in zip(outs, base)],
            _rms(logits),
            _rms(logits - base_logits),
            [_rms(a) for a in attn],
            [_rms(a - b) for a, b in zip(attn, base_attn)],
        )
        return rec, (outs, logits, attn)

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


# Slopes of log2 RMS against log2 depth (per width): (step index, record field); any |slope|
# above --max-slope fails.
DEPTH_METRICS: dict[str, tuple[int, str]] = {
    "init_rms": (0, "layer_rms"),
    "final_rms": (-1, "layer_rms"),
    "delta_rms": (-1, "layer_delta_rms"),
}

# Slopes of log2 RMS against log2 width (per depth): (step index, record field, rule). "flat":
# |slope| <= --max-slope (the residual stream and its change are Theta(1) in width under muP);
# "no_growth": slope <= --max-slope (muP lets these shrink with width: the logits and the
# attention logits carry a 1/sqrt(n) part from the random init, and the muP attention scale
# sqrt(d0)/d makes scale*q.k ~ d^-1/2 until q and k correlate; a blow-up is what fails);
# "reported": not in the verdict (the logits at init are ~ n^-1/2 under muP by design).
WIDTH_METRICS: dict[str, tuple[int, str, str]] = {
    "init_rms": (0, "layer_rms", "flat"),
    "final_rms": (-1, "layer_rms", "flat"),
    "delta_rms": (-1, "layer_delta_rms", "flat"),
    "logits_init_rms": (0, "logits_rms", "reported"),
    "logits_delta_rms": (-1, "logits_delta_rms", "no_growth"),
    "attn_logits_rms": (-1, "attn_logits_rms", "no_growth"),
}


def _value(record: dict[str, Any], field: str) -> float | None:
    """A record's metric: the last layer's for per-layer lists (None when the list is empty)."""
    value = record[field]
    if isinstance(value, list):
        return value[-1] if value else None
    return value


def width_slopes(shapes: list[dict[str, Any]], num_layers: int) -> dict[str, float]:
    """Per :data:`WIDTH_METRICS`, the slope of log2 RMS against log2 width at ``num_layers``."""
    rows = sorted((s for s in shapes if s["num_layers"] == num_layers), key=lambda s: s["hidden_size"])
    widths = [s["hidden_size"] for s in rows]
    out = {}
    for name, (step, field, _rule) in WIDTH_METRICS.items():
        values = [_value(s["records"][step], field) for s in rows]
        if all(v is not None for v in values):
            out[name] = slope(widths, values)
    return out


def depth_slopes(shapes: list[dict[str, Any]], hidden_size: int) -> dict[str, float]:
    """Per :data:`DEPTH_METRICS`, the slope of log2 RMS against log2 depth at ``hidden_size``."""
    rows = sorted((s for s in shapes if s["hidden_size"] == hidden_size), key=lambda s: s["num_layers"])
    depths = [s["num_layers"] for s in rows]
    return {
        name: slope(depths, [_value(s["records"][step], field) for s in rows])
        for name, (step, field) in DEPTH_METRICS.items()
    }


def violations(results: dict[str, Any], bound: float) -> list[str]:
    """One line per slope that breaks its rule (empty: the check passes)."""
    out = []
    for width, slopes in results["slopes"].items():
        for name, value in slopes.items():
            if abs(value) > bound:
                out.append(f"width {width}: {name} slope vs depth {value:+.3f}, |slope| > {bound}")
    for depth, slopes in results["width_slopes"].items():
        for name, value in slopes.items():
            rule = WIDTH_METRICS[name][2]
            if (rule == "flat" and abs(value) > bound) or (rule == "no_growth" and value > bound):
                limit = f"|slope| > {bound}" if rule == "flat" else f"slope > {bound}"
                out.append(f"depth {depth}: {name} slope vs width {value:+.3f}, {limit}")
    return out


def check_axes(depths: list[int], widths: list[int] | None) -> str | None:
    """Why the shapes give no slope to check (None when they give one)."""
    for flag, values in (("--depths", depths), ("--widths", widths or [])):
        if any(v <= 0 for v in values):
            return f"{flag}: every value must be a positive integer, got {values}"
        if len(set(values)) != len(values):
            return f"{flag}: {values} repeats a value"
    if len(depths) < 2 and len(widths or []) < 2:
        return (
            f"--depths {depths} --widths {widths or '(the config width)'}: a slope needs two points; "
            "give at least two --depths (depth check) or two --widths (width check)"
        )
    return None


def prepare(cfg: RunConfig, depths: list[int], widths: list[int] | None) -> RunConfig:
    """The config every shape is built from; raises ValueError naming the flag and value when
    the shapes give no slope or a shape cannot be built (e.g. a width the heads do not divide)."""
    from runconfig.schema import resolve

    why = check_axes(depths, widths)
    if why:
        raise ValueError(why)
    if len(widths or []) >= 2 and cfg.parametrization.base_hidden_size is None:
        # Unset, every width would be its own base (m_d = 1: muP is SP at each width).
        par = dataclasses.replace(cfg.parametrization, base_hidden_size=min(widths))
        cfg = dataclasses.replace(cfg, parametrization=par)
    for width in widths or [None]:
        for depth in depths:
            try:
                resolve(_with(cfg, depth, width))
            except ValueError as exc:
                shape = f"--depths {depth}" + (f" --widths {width}" if width is not None else "")
                raise ValueError(f"{shape}: {exc}") from None
    return cfg


def run_check(
    cfg: RunConfig, depths: list[int], widths: list[int] | None, steps: int, seed: int = 0, progress: bool = True
) -> dict[str, Any]:
    """All shapes in a one-process group; returns records, slopes against depth per width
    (``slopes``, with two depths or more) and against width per depth (``width_slopes``, with
    two widths or more)."""
    from tqdm import tqdm

    from training.distributed import single_process

    cfg = prepare(cfg, depths, widths)
    shapes = [(d, w) for w in (widths or [None]) for d in depths]
    results: dict[str, Any] = {
        "depths": depths, "widths": widths, "steps": steps, "shapes": [], "slopes": {}, "width_slopes": {},
        "base_hidden_size": cfg.parametrization.base_hidden_size,
    }  # fmt: skip
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
    hidden_sizes = sorted({s["hidden_size"] for s in results["shapes"]})
    if len(depths) >= 2:
        results["slopes"] = {str(n): depth_slopes(results["shapes"], n) for n in hidden_sizes}
    if len(hidden_sizes) >= 2:
        results["width_slopes"] = {str(d): width_slopes(results["shapes"], d) for d in depths}
    return results


def _log_span(ax, values: list[float], min_ratio: float = 16.0) -> None:
    """Give a log axis at least ``min_ratio`` of range so flat data looks flat."""
    lo, hi = min(values), max(values)
    mid = (lo * hi) ** 0.5
    half = max((hi / lo) ** 0.5, min_ratio**0.5) * 1.15
    ax.set_ylim(mid / half, mid * half)


def _log_rms_axis(ax: Any, ylabel: str) -> None:
    """Log y axis for RMS values, grid, label, and at least 16x of range (flat data looks flat)."""
    from matplotlib.ticker import LogFormatterSciNotation

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatterSciNotation())
    ax.grid(alpha=0.3, which="both")
    ax.set_ylabel(ylabel)
    vals = [y for line in ax.get_lines() for y in line.get_ydata() if y > 0]
    if vals:
        _log_span(ax, vals)


def plot(results: dict[str, Any], path: Path, title: str) -> None:
    """Per width: stream RMS vs depth (a line per step), change vs depth, per-layer profile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
            _log_rms_axis(ax, f"RMS (width {width_key})")
        row[0].legend(fontsize=7, ncol=2)
        row[2].legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


_WIDTH_PANELS = (
    ("layer_rms", "last residual stream", "init_rms", "final_rms"),
    ("layer_delta_rms", "change of the last residual stream from init", None, "delta_rms"),
    ("logits_delta_rms", "change of the output logits from init", "logits_init_rms", "logits_delta_rms"),
    ("attn_logits_rms", "attention logits scale*q.k (last layer)", None, "attn_logits_rms"),
)


def plot_width(results: dict[str, Any], path: Path, title: str) -> None:
    """Per depth, microsoft/mup's coord-check picture: each quantity's RMS against width, a
    line per step (flat lines: width-stable coordinates; rising lines: a blow-up)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    depths = list(results["width_slopes"])
    steps = results["steps"]
    fig, axes = plt.subplots(len(depths), len(_WIDTH_PANELS), figsize=(18, 4.2 * len(depths)), squeeze=False)
    step_colors = plt.cm.viridis([i / max(steps, 1) for i in range(steps + 1)])
    for row, depth_key in zip(axes, depths):
        shapes = sorted(
            (s for s in results["shapes"] if str(s["num_layers"]) == depth_key), key=lambda s: s["hidden_size"]
        )
        widths = [s["hidden_size"] for s in shapes]
        slopes = results["width_slopes"][depth_key]
        for ax, (field, label, init_key, final_key) in zip(row, _WIDTH_PANELS):
            for t in range(0 if field in ("layer_rms", "attn_logits_rms") else 1, steps + 1):
                ys = [_value(s["records"][t], field) for s in shapes]
                if all(y is not None and y > 0 for y in ys):
                    ax.plot(widths, ys, marker="o", ms=3, color=step_colors[t], label=f"step {t}")
            if field == "logits_delta_rms":  # the logits themselves at init, for reference
                ys = [s["records"][0]["logits_rms"] for s in shapes]
                ax.plot(widths, ys, ls="--", color="grey", label="logits at init")
            parts = [f"{k.replace('_rms', '')} slope {slopes[k]:+.2f}" for k in (init_key, final_key) if k in slopes]
            ax.set_title(f"{label}\n" + ", ".join(parts), fontsize=9)
            ax.set_xscale("log", base=2)
            ax.set_xticks(widths, [str(w) for w in widths])
            ax.set_xlabel("width n (hidden size)")
            _log_rms_axis(ax, f"RMS (depth {depth_key})")
            ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="run config YAML (model, parametrization, optimizer)")
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 4, 8, 16, 32, 64])
    parser.add_argument(
        "--widths", type=int, nargs="*", default=None,
        help="hidden sizes (default: the config's); two or more add the width check (slopes vs width per depth)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps K")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default=None,
        help="directory for coord_check.json, coord_check.png (depth axis) and coord_check_width.png (width axis)",
    )  # fmt: skip
    parser.add_argument(
        "--max-slope",
        type=float,
        default=0.25,
        help="fail (exit 1) when |slope of log2 RMS vs log2 depth| exceeds this for any metric, or a slope vs "
        "log2 width does: |slope| for the residual stream and its change, slope (growth) for the logits' change "
        "and the attention logits",
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
    try:
        prepare(cfg, args.depths, args.widths)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    results = run_check(cfg, args.depths, args.widths, args.steps, args.seed)
    results["max_slope"] = args.max_slope
    for width, s in results["slopes"].items():
        print(
            f"width {width}: slope vs depth  init {s['init_rms']:+.3f}  after {args.steps} steps "
            f"{s['final_rms']:+.3f}  change {s['delta_rms']:+.3f}"
        )
    for depth, s in results["width_slopes"].items():
        attn = f"  attention logits {s['attn_logits_rms']:+.3f}" if "attn_logits_rms" in s else ""
        print(
            f"depth {depth}: slope vs width  stream init {s['init_rms']:+.3f}  after {args.steps} steps "
            f"{s['final_rms']:+.3f}  change {s['delta_rms']:+.3f} | logits change {s['logits_delta_rms']:+.3f} "
            f"(logits at init {s['logits_init_rms']:+.3f}, not judged){attn}"
        )
    failures = violations(results, args.max_slope)
    results["violations"] = failures
    for line in failures:
        print(f"  {line}")
    title = f"coordinate check: {cfg.parametrization.preset}"

    def draw(out_dir: Path) -> list[Path]:
        written = []
        if results["slopes"]:
            plot(results, out_dir / "coord_check.png", title)
            written.append(out_dir / "coord_check.png")
        if results["width_slopes"]:
            plot_width(results, out_dir / "coord_check_width.png", title)
            written.append(out_dir / "coord_check_width.png")
        return written

    rules = f"threshold {args.max_slope}: |slope| vs depth; vs width |slope| for the stream, slope for the logits"
    return _verdict(results, args.out, draw, not failures, f"{len(failures)} slope(s) out of bounds ({rules})")


def _verdict(results: dict[str, Any], out: str | None, draw: Any, passed: bool, summary: str) -> ExitCode:
    """Record pass/fail, write coord_check.json and the figures under ``out`` (``draw(out_dir)``
    returns the figure paths), print the verdict; exit code 0 pass, 1 fail."""
    results["passed"] = bool(passed)
    if out:
        out_dir = Path(out)
        write_json(out_dir / "coord_check.json", results)
        figures = draw(out_dir)
        print(f"wrote {', '.join(str(p) for p in [out_dir / 'coord_check.json', *figures])}")
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

    def draw(out_dir: Path) -> list[Path]:
        plot_yaida(results, out_dir / "coord_check.png", args.max_slope_error)
        return [out_dir / "coord_check.png"]

    return _verdict(
        results, args.out, draw, worst <= args.max_slope_error,
        f"max |slope - theory| {worst:.3f} (tolerance {args.max_slope_error})",
    )  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser(prog="python -m eval.coord_check")
    add_arguments(p)
    sys.exit(run(p.parse_args()))

"""``python -m eval diversity``: the feature diversity exponent kappa (TP-VI Definition 7.6).

Runs the toolkit's own patched model on a fixed batch, records the residual stream
``h_0 .. h_L`` (``h_0`` = the input of block 1, ``h_l`` = the output of block ``l``) and
fits ``D(eps) = RMS(h_{floor((lambda+eps)L)} - h_{floor(lambda L)})`` against ``eps`` on
log-log (:mod:`eval.diversity_fit`); ``kappa = 1 - slope``. Depth-muP's Brownian-like
path gives ``kappa = 1/2``; a smooth (ODE-like) path ``kappa = 0``.

Two sources: ``--config`` builds the model at initialization at every ``--depths``;
``--run-dir`` loads the run's latest (or ``--step``) checkpoint, CPU ``model_tp0_pp0.pt``
or GPU ``dist/`` (megatron dist_checkpointing, resharded to TP=PP=1 on load).
With several depths it also reports how ``D`` at a fixed ``--eps-ref`` scales with depth.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval import diversity_fit as fit
from eval.outputs import atomic_write_bytes, write_json
from runconfig import ConfigError, load_config
from runconfig.schema import RunConfig

if TYPE_CHECKING:
    import torch

HELP = "feature diversity exponent kappa (TP-VI Def. 7.6) from residual-stream distances, at init or a checkpoint"

DEFAULT_DEPTHS = [16, 32, 64]


class InputError(ValueError):
    """Bad input (a file, an option); the message names it. Exit code 2."""


@dataclass
class Checkpoint:
    """A checkpoint folder of a run directory and how its model state is stored."""

    run_dir: Path
    path: Path
    step: int
    format: str  # "cpu" (model_tp0_pp0.pt) | "dist" (dist/ folder)


# ----------------------------------------------------------------------------- inputs
def find_checkpoint(run_dir: Path, step: int | None = None) -> Checkpoint:
    """The latest checkpoint of ``run_dir`` (or ``step``); InputError naming what is missing."""
    from training.checkpoint import latest_checkpoint, step_dir_name

    if not run_dir.is_dir():
        raise InputError(f"--run-dir: {run_dir} does not exist or is not a directory")
    root = run_dir / "checkpoints"
    if step is None:
        try:
            path = latest_checkpoint(root)
        except ValueError as exc:
            raise InputError(f"--run-dir: {exc}") from exc
        if path is None:
            raise InputError(f"--run-dir: no checkpoint in {root} (no '{root / 'latest'}' file)")
    else:
        path = root / step_dir_name(step)
        if not (path / "common.json").is_file():
            raise InputError(f"--step: {path} is not a complete checkpoint (no common.json)")
    try:
        common = json.loads((path / "common.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"--run-dir: cannot read {path / 'common.json'}: {exc}") from exc
    if (path / "dist").is_dir():
        return Checkpoint(run_dir, path, int(common.get("step", -1)), "dist")
    layout = common.get("layout") or {}
    if layout.get("tp", 1) != 1 or layout.get("pp", 1) != 1:
        raise InputError(
            f"--run-dir: {path} is a CPU checkpoint written with tp={layout.get('tp')} pp={layout.get('pp')}; "
            "only TP=PP=1 CPU checkpoints (or GPU dist/ checkpoints, which reshard) can be read"
        )
    if not (path / "model_tp0_pp0.pt").is_file():
        raise InputError(f"--run-dir: {path} has neither model_tp0_pp0.pt nor a dist/ folder")
    return Checkpoint(run_dir, path, int(common.get("step", -1)), "cpu")


def run_config(path: Path, overrides: list[str] | None = None) -> RunConfig:
    """The run config, with one model process (TP=PP=1) whatever the run used."""
    try:
        cfg = load_config(RunConfig, path, overrides or [])
    except ConfigError as exc:
        raise InputError(str(exc)) from exc
    if cfg.model.transformer_impl != "local":
        raise InputError(
            f"{path}: model.transformer_impl={cfg.model.transformer_impl!r}; only the local spec can be rebuilt "
            "on CPU (Transformer Engine's parameter names differ)"
        )
    par = dataclasses.replace(
        cfg.parallel, tensor_model_parallel_size=1, pipeline_model_parallel_size=1, sequence_parallel=False
    )
    return dataclasses.replace(cfg, parallel=par)


def with_depth(cfg: RunConfig, num_layers: int) -> RunConfig:
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, num_layers=num_layers))


def token_range(cfg: RunConfig, fallback: int | None = None) -> int:
    """The tokenizer's vocabulary (random tokens are drawn below it), else ``fallback``."""
    from training.data import tokenizer_info

    if cfg.model.vocab_size:
        return cfg.model.vocab_size
    try:
        return tokenizer_info(cfg).vocab_size
    except (ValueError, OSError) as exc:
        if fallback is None:
            raise InputError(f"model.vocab_size: not set and the data's tokenizer is unavailable ({exc})") from exc
        return fallback


def random_tokens(vocab: int, batch_size: int, seq_length: int, seed: int) -> torch.Tensor:
    """The same tokens for every depth and every checkpoint of a given seed."""
    import torch

    gen = torch.Generator().manual_seed(10_000 + seed)
    return torch.randint(0, vocab, (batch_size, seq_length), generator=gen)


def valid_tokens(cfg: RunConfig, run_dir: Path, batch_size: int, seq_length: int) -> torch.Tensor:
    """The first sequences of the run's validation split (the data the run was evaluated on)."""
    from training.data import build_datasets, collate

    try:
        data = build_datasets(cfg, cfg.data.cache_dir or str(run_dir / ".index_cache"))
    except (ValueError, OSError) as exc:
        raise InputError(f"--data valid: cannot build the validation data of {run_dir / 'config.yaml'}: {exc}") from exc
    if len(data.valid) < batch_size:
        raise InputError(f"--batch-size: the validation split has only {len(data.valid)} sequences")
    return collate(data.valid, range(batch_size))["tokens"][:, :seq_length]


# ----------------------------------------------------------------------------- models
def init_model(cfg: RunConfig, seed: int) -> torch.nn.Module:
    """The patched model at initialization (needs megatron parallel state)."""
    import torch

    from training.model import build_model, padded_vocab_size

    torch.manual_seed(seed)
    return build_model(cfg, padded_vocab_size(token_range(cfg), 1)).eval()


def _vocab_in(ckpt: Checkpoint, state: dict[str, Any] | None) -> int:
    """The (padded) vocabulary the checkpoint was trained with, read from its embedding."""
    key = "embedding.word_embeddings.weight"
    if state is not None:
        if key not in state:
            raise InputError(f"--run-dir: {ckpt.path / 'model_tp0_pp0.pt'} has no {key}")
        return int(state[key].shape[0])
    from megatron.core import dist_checkpointing

    meta = dist_checkpointing.load_tensors_metadata(str(ckpt.path / "dist"))
    if key not in meta:
        raise InputError(f"--run-dir: {ckpt.path / 'dist'} has no {key}")
    return int(meta[key].global_shape[0])


def checkpoint_model(cfg: RunConfig, ckpt: Checkpoint) -> torch.nn.Module:
    """The run's model with the checkpoint's weights, in fp32 on CPU (needs megatron parallel state)."""
    import torch

    from training.model import Placement, build_model

    skip_init = Placement(initialize=False)
    if ckpt.format == "cpu":
        file = ckpt.path / "model_tp0_pp0.pt"
        try:
            state = torch.load(file, map_location="cpu", weights_only=False, mmap=True)["model"]
        except Exception as exc:  # a truncated or foreign file: say which
            raise InputError(f"--run-dir: cannot read {file}: {type(exc).__name__}: {exc}") from exc
        model = build_model(cfg, _vocab_in(ckpt, state), skip_init)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise InputError(f"--run-dir: {file} does not fit {ckpt.run_dir / 'config.yaml'}: {exc}") from exc
        return model.eval()
    from megatron.core import dist_checkpointing

    model = build_model(cfg, _vocab_in(ckpt, None), skip_init)
    try:  # only the model's keys are requested; the optimizer's in the folder are left unread
        state = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(ckpt.path / "dist"))
        model.load_state_dict(state["model"], strict=True)
    except Exception as exc:
        raise InputError(
            f"--run-dir: cannot load {ckpt.path / 'dist'} into {ckpt.run_dir / 'config.yaml'}'s model: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return model.float().eval()


def residual_streams(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """``[h_0, h_1, .., h_L]``, each ``[s, b, h]``: the input of block 1, then every block's output."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from eval.coord_check import _layer_outputs

    first = next(m for m in model.modules() if isinstance(m, TransformerLayer))
    inputs: list[torch.Tensor] = []

    def grab(_module, args, kwargs):
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        inputs.append(hidden.detach().float())

    hook = first.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            outputs = _layer_outputs(model, tokens)
    finally:
        hook.remove()
    return inputs + outputs


# ----------------------------------------------------------------------------- analysis
@dataclass(frozen=True)
class Grid:
    """Which separations to measure: ``lambdas``, an explicit ``eps`` list or a log grid, ``eps_ref``."""

    lambdas: list[float]
    eps: list[float] | None
    num_eps: int
    eps_max: float
    eps_ref: float


def measure(model: torch.nn.Module, tokens: torch.Tensor, grid: Grid) -> dict[str, Any]:
    """One model: per lambda the distances, the fit, and ``D`` at exactly ``eps_ref``; the stream RMS."""
    streams = [h.numpy() for h in residual_streams(model, tokens)]
    num_layers = len(streams) - 1
    eps = grid.eps if grid.eps is not None else fit.default_eps(num_layers, grid.num_eps, grid.eps_max)
    rows = fit.diversity(streams, grid.lambdas, eps)
    for row in rows:
        pairs = fit.layer_pairs(num_layers, row["lambda"], [grid.eps_ref])
        row["eps_ref"] = None
        if pairs:
            p = pairs[0]
            row["eps_ref"] = {
                "eps_effective": p.eps_effective,
                "layer_to": p.layer_to,
                "distance": fit.rms_distance(streams[p.layer_to], streams[p.layer_from]),
            }
    return {
        "num_layers": num_layers,
        "eps_grid": eps,
        "lambdas": rows,
        "kappa_mean": fit.mean_kappa(rows),
        "stream_rms": [fit.rms_distance(h, 0.0) for h in streams],
    }


def depth_scaling(depths: list[dict[str, Any]], lambdas: list[float]) -> list[dict[str, Any]]:
    """Per lambda: ``D(eps_ref)`` at each depth and the log-log slope against depth."""
    rows = []
    for i, lam in enumerate(lambdas):
        values = {d["num_layers"]: d["lambdas"][i]["eps_ref"]["distance"] for d in depths if d["lambdas"][i]["eps_ref"]}
        scaling = fit.depth_scaling(list(values), list(values.values())) if len(values) >= 2 else None
        rows.append(
            {
                "lambda": lam,
                "distance": {str(k): v for k, v in values.items()},
                "exponent": scaling["slope"] if scaling else None,
                "exponent_stderr": scaling["stderr"] if scaling else None,
                "intercept": scaling["intercept"] if scaling else None,
            }
        )
    return rows


def _warnings(depths: list[dict[str, Any]], grid: Grid) -> list[str]:
    out = []
    for d in depths:
        for row in d["lambdas"]:
            where = f"L={d['num_layers']} lambda={row['lambda']:g}"
            if row["kappa"] is None:
                out.append(f"{where}: {row['n_points']} usable eps (need 2 distinct layer offsets); kappa not fitted")
            elif row["n_points"] < 4:
                out.append(f"{where}: only {row['n_points']} usable eps; kappa is a rough estimate")
            if row["eps_ref"] is None:
                out.append(f"{where}: --eps-ref {grid.eps_ref:g} gives no layer pair (offset 0 or lambda+eps > 1)")
    return out


def analyse(models: Iterable[torch.nn.Module], tokens: torch.Tensor, grid: Grid) -> dict[str, Any]:
    """Measure every model (a generator builds one at a time) and summarize; the deepest gives kappa."""
    depths = [measure(model, tokens, grid) for model in models]
    deepest = max(depths, key=lambda d: d["num_layers"])
    return {
        "lambdas": grid.lambdas,
        "eps": grid.eps,
        "num_eps": grid.num_eps,
        "eps_max": grid.eps_max,
        "eps_ref": grid.eps_ref,
        "depths": depths,
        "kappa": {
            "num_layers": deepest["num_layers"],
            "mean": deepest["kappa_mean"],
            "per_lambda": {f"{r['lambda']:g}": r["kappa"] for r in deepest["lambdas"]},
        },
        "depth_scaling": depth_scaling(depths, grid.lambdas) if len(depths) >= 2 else None,
        "warnings": _warnings(depths, grid),
    }


# ----------------------------------------------------------------------------- figure
def _decimal_log_ticks(axis: Any, lo: float, hi: float) -> None:
    """Ticks at 1, 2, 5 x 10^k inside [lo, hi] written as decimals; no crowded minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = [
        m * 10.0**k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1) for m in (1, 2, 5)
    ]
    ticks = [t for t in ticks if lo / 1.05 <= t <= hi * 1.05]
    if len(ticks) < 3:  # a narrow range (a shallow model): label the ends and the middle instead
        ticks = sorted({lo, math.sqrt(lo * hi), hi})
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:.3g}"))
    axis.set_minor_formatter(NullFormatter())


def plot(results: dict[str, Any], stem: Path, dpi: int = 150) -> list[Path]:
    """``stem.png`` and ``stem.pdf``: D vs eps (log-log) per depth and lambda with the fits and the
    eps^(1/2) / eps^1 references; with several depths also D(eps_ref) vs depth."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    depths = sorted(results["depths"], key=lambda d: d["num_layers"])
    scaling = [r for r in results["depth_scaling"] or [] if len(r["distance"]) >= 2]
    fig, axes = plt.subplots(1, 2 if scaling else 1, figsize=(12.5 if scaling else 7.0, 5.2), squeeze=False)
    ax = axes[0][0]
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, len(depths)))
    markers = "osD^vP*Xph"
    xs_all, ys_all = [], []
    for depth, color in zip(depths, colors):
        for j, row in enumerate(depth["lambdas"]):
            x = np.array([p["eps_effective"] for p in row["points"]])
            y = np.array([p["distance"] for p in row["points"]])
            if not len(x):
                continue
            xs_all += list(x)
            ys_all += list(y)
            marker = markers[j % len(markers)]
            if row["slope"] is None:
                ax.plot(x, y, marker, color=color, ms=5, label=f"L={depth['num_layers']}, λ={row['lambda']:g}: no fit")
                continue
            label = f"L={depth['num_layers']}, λ={row['lambda']:g}: slope {row['slope']:.2f} → κ={row['kappa']:.2f}"
            ax.plot(x, y, marker, color=color, ms=5, mfc="none" if j % 2 else color, label=label)
            line = np.geomspace(x.min(), x.max(), 50)
            ax.plot(line, np.exp(row["intercept"]) * line ** row["slope"], "-", color=color, lw=1.1, alpha=0.8)
    if xs_all:  # references fanning out from just above the data's right end, so they never hide it
        x1 = max(xs_all)
        y1 = 1.6 * max(y for x, y in zip(xs_all, ys_all) if x == x1)
        span = np.geomspace(min(xs_all), x1, 50)
        ax.plot(
            span, y1 * (span / x1) ** 0.5, "--", color="0.45", lw=1.3, label=r"$\propto\varepsilon^{1/2}$ (κ = 1/2)"
        )
        ax.plot(span, y1 * (span / x1), ":", color="0.2", lw=1.5, label=r"$\propto\varepsilon$ (κ = 0)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if xs_all:
        _decimal_log_ticks(ax.xaxis, min(xs_all), max(xs_all))
    ax.set_xlabel(r"$\varepsilon$ = (layer offset) / L")
    ax.set_ylabel(r"$D(\varepsilon)$ = RMS$(h_{\lfloor(\lambda+\varepsilon)L\rfloor} - h_{\lfloor\lambda L\rfloor})$")
    ax.set_title("feature distance vs layer separation", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, loc="lower right")
    if scaling:
        ax2 = axes[0][1]
        for j, row in enumerate(scaling):
            ls = np.array([int(k) for k in row["distance"]])
            ds = np.array(list(row["distance"].values()))
            color = plt.cm.tab10(j % 10)
            label = f"λ={row['lambda']:g}: exponent {row['exponent']:+.2f}"
            ax2.plot(ls, ds, markers[j % len(markers)], color=color, ms=6, label=label)
            line = np.geomspace(ls.min(), ls.max(), 50)
            ax2.plot(line, np.exp(row["intercept"]) * line ** row["exponent"], "-", color=color, lw=1.1)
        all_l = [int(k) for r in scaling for k in r["distance"]]
        all_d = [v for r in scaling for v in r["distance"].values()]
        l0, d0 = min(all_l), 1.4 * max(all_d)  # references from above the shallowest point
        span = np.geomspace(l0, max(all_l), 50)
        ax2.plot(span, d0 * np.ones_like(span), "--", color="0.45", lw=1.3, label=r"$\propto L^0$ (depth limit exists)")
        ax2.plot(span, d0 * (span / l0) ** -0.5, ":", color="0.2", lw=1.5, label=r"$\propto L^{-1/2}$ (blocks vanish)")
        ax2.set_xscale("log", base=2)
        ax2.set_yscale("log")
        ax2.set_xticks(sorted(set(all_l)), [str(v) for v in sorted(set(all_l))])
        ax2.set_xlabel("depth L (blocks)")
        ax2.set_ylabel(rf"$D(\varepsilon_{{ref}}={results['eps_ref']:g})$")
        ax2.set_title("distance at a fixed separation vs depth", fontsize=10)
        ax2.grid(alpha=0.3, which="both")
        ax2.legend(fontsize=7)
        lo, hi = min(all_d), 1.4 * max(all_d)  # at least a factor 8 of range, so flat looks flat
        mid, half = math.sqrt(lo * hi), max(math.sqrt(hi / lo), math.sqrt(8.0)) * 1.15
        ax2.set_ylim(mid / half, mid * half)
    fig.suptitle(results["title"], fontsize=11)
    fig.tight_layout()
    written = []
    for ext in ("png", "pdf"):
        buf = io.BytesIO()
        fig.savefig(buf, format=ext, dpi=dpi)
        path = stem.with_suffix(f".{ext}")
        atomic_write_bytes(path, buf.getvalue())
        written.append(path)
    plt.close(fig)
    return written


# ----------------------------------------------------------------------------- CLI
def add_arguments(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="run config YAML: measure the model at initialization at each --depths")
    src.add_argument("--run-dir", help="a run directory: measure its latest checkpoint (config.yaml + checkpoints/)")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides of --config")
    parser.add_argument(
        "--depths", type=int, nargs="+", default=None, help=f"depths to build at init (default {DEFAULT_DEPTHS})"
    )
    parser.add_argument("--step", type=int, default=None, help="with --run-dir: this step's checkpoint, not the latest")
    parser.add_argument("--lambdas", type=float, nargs="+", default=[0.25, 0.5], help="start fractions, in (0, 1)")
    parser.add_argument("--eps", type=float, nargs="+", default=None, help="eps grid, in (0, 1] (default: log grid)")
    parser.add_argument("--num-eps", type=int, default=12, help="points of the default log grid 1/L .. --eps-max")
    parser.add_argument("--eps-max", type=float, default=0.5, help="top of the default log grid")
    parser.add_argument("--eps-ref", type=float, default=0.25, help="fixed eps for D-vs-depth (several depths)")
    parser.add_argument("--batch-size", type=int, default=4, help="sequences in the fixed batch")
    parser.add_argument("--seq-length", type=int, default=None, help="tokens per sequence (default: the model's)")
    parser.add_argument(
        "--data",
        choices=("random", "valid"),
        default="random",
        help="random tokens from a fixed generator, or (with --run-dir) the run's validation split",
    )
    parser.add_argument("--seed", type=int, default=0, help="init seed of the model and seed of the random tokens")
    parser.add_argument("--out", default=None, help="directory for diversity.json, diversity.png, diversity.pdf")
    parser.add_argument("--dpi", type=int, default=150)
    parser.add_argument("--no-figures", action="store_true", help="diversity.json only")


def _check_options(args: argparse.Namespace) -> Grid:
    for lam in args.lambdas:
        if not 0.0 < lam < 1.0:
            raise InputError(f"--lambdas: {lam:g} is outside (0, 1)")
    for e in args.eps or []:
        if not 0.0 < e <= 1.0:
            raise InputError(f"--eps: {e:g} is outside (0, 1]")
    if args.num_eps < 2:
        raise InputError(f"--num-eps: need at least 2 points, got {args.num_eps}")
    if not 0.0 < args.eps_max <= 1.0:
        raise InputError(f"--eps-max: {args.eps_max:g} is outside (0, 1]")
    if not 0.0 < args.eps_ref < 1.0:
        raise InputError(f"--eps-ref: {args.eps_ref:g} is outside (0, 1)")
    if args.batch_size < 1:
        raise InputError(f"--batch-size: must be >= 1, got {args.batch_size}")
    if args.seq_length is not None and args.seq_length < 1:
        raise InputError(f"--seq-length: must be >= 1, got {args.seq_length}")
    if any(d < 1 for d in args.depths or []):
        raise InputError(f"--depths: every depth must be >= 1, got {args.depths}")
    if args.run_dir is not None:
        if args.depths:
            raise InputError("--depths: applies to --config (models at init); --run-dir measures the run's own depth")
        if args.overrides:
            raise InputError(f"overrides {args.overrides}: apply to --config only; a checkpoint fixes its config")
    elif args.data == "valid":
        raise InputError("--data valid: needs --run-dir (a run whose validation data can be rebuilt)")
    if args.step is not None and args.run_dir is None:
        raise InputError("--step: applies to --run-dir only")
    return Grid(list(args.lambdas), args.eps, args.num_eps, args.eps_max, args.eps_ref)


def _seq_length(args: argparse.Namespace, cfg: RunConfig) -> int:
    seq = args.seq_length or cfg.model.seq_length
    if seq > cfg.model.seq_length:
        raise InputError(f"--seq-length: {seq} exceeds the model's model.seq_length={cfg.model.seq_length}")
    return seq


def compute(args: argparse.Namespace) -> dict[str, Any]:
    """Everything in diversity.json (without the file list); InputError on bad input."""
    from training.distributed import single_process

    grid = _check_options(args)
    if args.run_dir is not None:
        run_dir = Path(args.run_dir)
        ckpt = find_checkpoint(run_dir, args.step)
        cfg = run_config(run_dir / "config.yaml")
        source = {
            "kind": "checkpoint",
            "run_dir": str(run_dir),
            "checkpoint": str(ckpt.path),
            "step": ckpt.step,
            "format": ckpt.format,
        }
    else:
        cfg = run_config(Path(args.config), args.overrides)
        ckpt, source = None, {"kind": "init", "config": str(args.config), "overrides": list(args.overrides)}
    seq = _seq_length(args, cfg)
    with single_process():
        if ckpt is not None:
            model = checkpoint_model(cfg, ckpt)
            vocab = token_range(cfg, fallback=model.embedding.word_embeddings.weight.shape[0])
            if args.data == "valid":
                tokens = valid_tokens(cfg, ckpt.run_dir, args.batch_size, seq)
            else:
                tokens = random_tokens(vocab, args.batch_size, seq, args.seed)
            models: Iterator[Any] = iter([model])
        else:
            tokens = random_tokens(token_range(cfg), args.batch_size, seq, args.seed)
            models = (init_model(with_depth(cfg, d), args.seed) for d in (args.depths or DEFAULT_DEPTHS))
        results = analyse(models, tokens, grid)
    par = cfg.parametrization
    where = f"checkpoint step {ckpt.step}" if ckpt is not None else "at initialization"
    results = {
        "command": "diversity",
        "title": f"feature diversity: {par.preset} (α={par.resolved_alpha:g}), n={cfg.model.hidden_size}, {where}",
        "source": source,
        "preset": par.preset,
        "alpha": par.resolved_alpha,
        "hidden_size": cfg.model.hidden_size,
        "seed": args.seed,
        "batch_size": int(tokens.shape[0]),
        "seq_length": int(tokens.shape[1]),
        "data": args.data,
        **results,
    }
    if all(d["kappa_mean"] is None for d in results["depths"]):
        raise InputError(
            "--lambdas/--eps: no lambda has two distinct usable layer offsets at "
            f"L={[d['num_layers'] for d in results['depths']]}; use a smaller lambda or more eps"
        )
    return results


def _print(results: dict[str, Any]) -> None:
    print(results["title"])
    for d in results["depths"]:
        for r in d["lambdas"]:
            k = "n/a" if r["kappa"] is None else f"{r['kappa']:.3f} (slope {r['slope']:.3f} ± {r['slope_stderr']:.3f})"
            print(f"  L={d['num_layers']:<4d} lambda={r['lambda']:<5g} kappa {k}  [{r['n_points']} eps]")
        if d["kappa_mean"] is not None:
            print(f"  L={d['num_layers']:<4d} mean kappa {d['kappa_mean']:.3f}")
    for r in results["depth_scaling"] or []:
        if r["exponent"] is not None:
            print(
                f"  D(eps_ref={results['eps_ref']:g}) vs depth, lambda={r['lambda']:g}: exponent {r['exponent']:+.3f}"
            )
    for w in results["warnings"]:
        print(f"warning: {w}")


def run(args: argparse.Namespace) -> int:
    try:
        results = compute(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _print(results)
    if args.out:
        out = Path(args.out)
        results["files"] = ["diversity.json"]
        if not args.no_figures:
            results["files"] += [p.name for p in plot(results, out / "diversity", args.dpi)]
        write_json(out / "diversity.json", results)
        print(f"wrote {', '.join(str(out / f) for f in results['files'])}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser(prog="python -m eval.diversity")
    add_arguments(p)
    sys.exit(run(p.parse_args()))

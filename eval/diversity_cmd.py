"""``python -m eval diversity``: kappa from a config at initialization or from a checkpoint.

``--config`` builds the model at initialization at every ``--depths``; ``--run-dir`` loads
the run's latest (or ``--step``) checkpoint, CPU ``model_tp0_pp0.pt`` or GPU ``dist/``
(megatron dist_checkpointing, resharded to TP=PP=1 on load). The analysis is
:mod:`eval.diversity`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eval.diversity import Grid, analyse
from eval.diversity_inputs import (
    InputError,
    checkpoint_model,
    find_checkpoint,
    init_model,
    random_tokens,
    run_config,
    token_range,
    valid_tokens,
    with_depth,
)
from eval.diversity_plots import plot
from eval.outputs import write_json
from runconfig.schema import RunConfig
from rundir.contract import ExitCode
from rundir.files import CONFIG_FILE

HELP = "feature diversity exponent kappa (TP-VI Def. 7.6) from residual-stream distances, at init or a checkpoint"

DEFAULT_DEPTHS = [16, 32, 64]


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
        cfg = run_config(run_dir / CONFIG_FILE)
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


def run(args: argparse.Namespace) -> ExitCode:
    try:
        results = compute(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    _print(results)
    if args.out:
        out = Path(args.out)
        results["files"] = ["diversity.json"]
        if not args.no_figures:
            results["files"] += [p.name for p in plot(results, out / "diversity", args.dpi)]
        write_json(out / "diversity.json", results)
        print(f"wrote {', '.join(str(out / f) for f in results['files'])}")
    return ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    p = argparse.ArgumentParser(prog="python -m eval.diversity_cmd")
    add_arguments(p)
    sys.exit(run(p.parse_args()))

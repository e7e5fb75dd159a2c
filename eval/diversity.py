"""The feature diversity exponent kappa (TP-VI Definition 7.6): the analysis.

Runs the toolkit's own patched model on a fixed batch, records the residual stream
``h_0 .. h_L`` (``h_0`` = the input of block 1, ``h_l`` = the output of block ``l``) and
fits ``D(eps) = RMS(h_{floor((lambda+eps)L)} - h_{floor(lambda L)})`` against ``eps`` on
log-log (:mod:`eval.diversity_fit`); ``kappa = 1 - slope``. Depth-muP's Brownian-like
path gives ``kappa = 1/2``; a smooth (ODE-like) path ``kappa = 0``. With several depths it
also reports how ``D`` at a fixed ``eps_ref`` scales with depth.

The command is :mod:`eval.diversity_cmd`, its inputs (config, models, tokens)
:mod:`eval.diversity_inputs`, its figure :mod:`eval.diversity_plots`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eval import diversity_fit as fit

if TYPE_CHECKING:
    import torch


def residual_streams(model: torch.nn.Module, tokens: torch.Tensor) -> list[torch.Tensor]:
    """``[h_0, h_1, .., h_L]``, each ``[s, b, h]``: the input of block 1, then every block's output."""
    import torch
    from megatron.core.transformer.transformer_layer import TransformerLayer

    from eval.coord_check import layer_outputs

    first = next(m for m in model.modules() if isinstance(m, TransformerLayer))
    inputs: list[torch.Tensor] = []

    def grab(_module, args, kwargs):
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        inputs.append(hidden.detach().float())

    hook = first.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        with torch.no_grad():
            outputs = layer_outputs(model, tokens)
    finally:
        hook.remove()
    return inputs + outputs


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

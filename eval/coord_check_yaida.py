"""Coordinate check along Yaida's metaparameter s: does feature learning scale like L / n^(1-s)?

Yaida (2022, equation 46) finds that the leading-order change of the neural tangent kernel,
hence the degree of representation learning, is controlled by gamma = L / n^(1-s). The
kernel change is second order in the feature change (``(1/n) sum_i dh_i dh'_i``), so the
measured quantity is the *squared* relative change of the last layer's output,
``(RMS(h_K - h_0) / RMS(h_0))^2``, after K SGD steps on the measured batch itself (full-batch
gradient descent, the setting of the theory). At fixed depth its slope against log2 width
should be -(1 - s): -1 at s = 0 (neural tangent), 0 at s = 1 (muP). The per-coordinate change
itself scales like sqrt(gamma).

Settings forced by the check: ``parametrization.width=yaida`` with each s, SGD (the family
has no Adam rule), no gradient clipping (a global norm clip rescales the update by a
width-dependent factor, which no per-role rule can undo), ``base_hidden_size`` = the
smallest width unless the config sets it (``base_head_dim``, unless set, is that width's head
size: :func:`patches.rules.base_head_dim`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from runconfig.schema import RunConfig


def yaida_config(cfg: RunConfig, s: float, base_hidden_size: int) -> RunConfig:
    """``cfg`` under the yaida width rule with metaparameter ``s`` and no gradient clipping."""
    par = cfg.parametrization
    par = dataclasses.replace(
        par, width="yaida", yaida_s=s, base_hidden_size=par.base_hidden_size or base_hidden_size
    )  # base_head_dim unset: the base model's, patches.rules.base_head_dim
    optimizer = dataclasses.replace(cfg.optimizer, clip_grad=0.0)
    return dataclasses.replace(cfg, parametrization=par, optimizer=optimizer)


def prepare_yaida(cfg: RunConfig, s_values: list[float], widths: list[int], num_layers: int) -> None:
    """Raise ValueError naming the flags of the first (s, width) the check cannot build, with
    the reason (an Adam optimizer: the family has no Adam rule; a width the heads do not divide)."""
    from eval.coord_check import _with
    from runconfig.schema import resolve

    base = cfg.parametrization.base_hidden_size or min(widths)
    for s in s_values:
        for width in widths:
            try:
                resolve(_with(yaida_config(cfg, s, base), num_layers, width))
            except ValueError as exc:
                raise ValueError(f"--yaida-s {s:g} --widths {width} --depths {num_layers}: {exc}") from None


def feature_change(cfg: RunConfig, num_layers: int, width: int, steps: int, seed: int) -> float:
    """Squared relative change of the last layer's output after ``steps`` full-batch SGD steps."""
    from eval.coord_check import measure

    records = measure(cfg, num_layers, width, steps=steps, seed=seed, fixed_batch=True)
    return (records[-1].last_delta_rms / records[0].last_rms) ** 2


def run_yaida_check(
    cfg: RunConfig,
    s_values: list[float],
    widths: list[int],
    num_layers: int,
    steps: int,
    seeds: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Per s: the mean feature change at each width over ``seeds`` and its log-log slope."""
    from tqdm import tqdm

    from eval.coord_check_rules import slope
    from training.distributed import single_process

    if len(widths) < 2:
        raise ValueError("--widths: the s-axis check needs at least two widths")
    base = cfg.parametrization.base_hidden_size or min(widths)
    rows = []
    jobs = [(s, w, seed) for s in s_values for w in widths for seed in range(seeds)]
    values: dict[tuple[float, int], list[float]] = {}
    with single_process():
        for s, width, seed in tqdm(jobs, desc="coord-check s axis", disable=not progress):
            run = yaida_config(cfg, s, base)
            values.setdefault((s, width), []).append(feature_change(run, num_layers, width, steps, seed))
    for s in s_values:
        change = [float(np.mean(values[(s, w)])) for w in widths]
        measured = slope(widths, change)
        rows.append(
            {
                "s": s,
                "widths": widths,
                "feature_change": change,
                "per_seed": [values[(s, w)] for w in widths],
                "slope": measured,
                "expected_slope": -(1.0 - s),
                "emergent_scale": [num_layers / w ** (1.0 - s) for w in widths],
            }
        )
    return {
        "num_layers": num_layers,
        "steps": steps,
        "seeds": seeds,
        "base_hidden_size": base,
        "lr": cfg.optimizer.lr,
        "metric": "(RMS(h_K - h_0) / RMS(h_0))^2 of the last layer, full-batch SGD on the measured batch",
        "s_axis": rows,
    }


def plot_yaida(results: dict[str, Any], path: Path, tolerance: float) -> None:
    """Left: feature change against width per s, with the predicted slopes; right: measured
    slope against s, with -(1 - s) and the tolerance band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = results["s_axis"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12.5, 4.8))
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, len(rows)))
    for row, color in zip(rows, colors):
        w = np.asarray(row["widths"], float)
        y = np.asarray(row["feature_change"], float)
        ax.plot(
            w,
            y,
            "o-",
            color=color,
            label=f"s={row['s']:g}: slope {row['slope']:+.2f} (theory {row['expected_slope']:+.2f})",
        )
        ax.plot(w, y[0] * (w / w[0]) ** row["expected_slope"], "--", color=color, lw=1, alpha=0.7)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(rows[0]["widths"], [str(v) for v in rows[0]["widths"]])
    ax.set_xlabel("width n")
    ax.set_ylabel(r"$(\mathrm{RMS}(h_K-h_0)/\mathrm{RMS}(h_0))^2$, last layer")
    ax.set_title(
        f"feature change after {results['steps']} SGD steps, L={results['num_layers']} (dashed: n^-(1-s))", fontsize=9
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    s = np.array([r["s"] for r in rows])
    grid = np.linspace(0.0, 1.0, 50)
    ax2.fill_between(grid, -(1 - grid) - tolerance, -(1 - grid) + tolerance, color="0.85", label=f"±{tolerance:g}")
    ax2.plot(grid, -(1 - grid), "--", color="0.3", label="theory: -(1-s)")
    ax2.plot(s, [r["slope"] for r in rows], "o", color="C3", ms=7, label="measured")
    ax2.set_xlabel("Yaida's metaparameter s")
    ax2.set_ylabel("slope of log2 feature change vs log2 width")
    ax2.set_title("emergent scale gamma = L / n^(1-s)", fontsize=9)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    plt.close(fig)

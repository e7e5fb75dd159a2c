"""The figure of ``eval diversity``: D against eps per depth and lambda, and D(eps_ref) against depth."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from eval.plots import save_figure


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
    written = save_figure(fig, stem.parent, stem.name, dpi)
    plt.close(fig)
    return written

"""How often ``eval transfer``'s 95% intervals cover the planted slope and the planted optimum of
a depth trained with one seed per LR, when the other depths have three (docs/eval.md, "Bootstrap
CIs": such a depth borrows the seed noise pooled over its family's other depths).

    python benchmarks/one_seed_depth_coverage.py [--reps 30] [--bootstrap 500]

Planted sweeps (an independent audit's design): depths 2-32, presets depth_mup (optimal log2 LR
-7 at every depth) and sp (-7 - log2(L/2): slope -1), loss = c(preset, L) + 0.1 (log2 lr -
optimum)^2 (+0.3 at mid-training) + seed noise 0.05 nats; LRs one octave apart from 2.5 octaves
below each depth's optimum (a random phase of up to 1/4 octave) to 2.5 above it or 2^-6, whichever
is higher; 3 seeds per LR at L = 2-16 and one at L = 32; 3-point quadratic fits. Prints the coverage of the slope's interval and of L=32's
optimum interval over (repetition, preset, fraction), and the mean widths.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.results import read_results  # noqa: E402
from eval.transfer import analyze  # noqa: E402

HEADER = [
    "run_id", "parametrization.preset", "model.num_layers", "optimizer.lr", "run.seed",
    "parametrization.block_multiplier", "parametrization.base_num_layers", "model.hidden_size",
    "status", "step", "fraction", "val_loss",
]  # fmt: skip
DEPTHS = (2, 4, 8, 16, 32)
SLOPES = {"depth_mup": 0.0, "sp": -1.0}
X0, CURVATURE, NOISE, STEP, HALF = -7.0, 0.1, 0.05, 1.0, 2.5


def optimum(preset: str, depth: int) -> float:
    return X0 + SLOPES[preset] * (math.log2(depth) - 1)


def write(path: Path, rng: np.random.Generator) -> None:
    rows = []
    for preset in SLOPES:
        c_step = -0.02 if preset == "depth_mup" else 0.075
        for depth in DEPTHS:
            centre = optimum(preset, depth) + rng.uniform(-0.25, 0.25)
            lo = round(centre / STEP) * STEP - HALF
            hi = max(round(centre / STEP) * STEP + HALF, optimum(preset, DEPTHS[0]) + 1.0)
            for x in (float(v) for v in np.arange(lo, hi + 1e-9, STEP)):
                for seed in range(1 if depth == 32 else 3):
                    run_id = f"L{depth}-{preset}-lr{x:g}-s{seed}"
                    for fraction, step in ((0.5, 60), (1.0, 120)):
                        loss = (
                            4.0
                            + c_step * (math.log2(depth) - 1)
                            + (0.3 if fraction == 0.5 else 0.0)
                            + CURVATURE * (x - optimum(preset, depth)) ** 2
                            + NOISE * rng.standard_normal()
                        )
                        rows.append([run_id, preset, depth, repr(2.0**x), seed, 1.0, 2, 64, "completed", step,
                                     fraction, repr(float(loss))])  # fmt: skip
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(HEADER)
        writer.writerows(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--bootstrap", type=int, default=500)
    args = parser.parse_args()
    slope_hits, opt_hits, slope_widths, opt_widths = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            path = Path(tmp) / f"r{rep}.csv"
            write(path, np.random.default_rng(500 + rep))
            analysis = analyze(read_results(path), window=1, n_boot=args.bootstrap, boot_seed=rep)
            for r in analysis.results:
                s, deep = r.slope, next(d for d in r.depths if d.depth == 32)
                planted = SLOPES[r.family.preset]
                slope_hits.append(s.ci_available and s.ci_low <= planted <= s.ci_high)
                slope_widths.append(s.ci_high - s.ci_low)
                ci = deep.opt_ci or (math.nan, math.nan)
                opt_hits.append(ci[0] <= optimum(r.family.preset, 32) <= ci[1])
                opt_widths.append(ci[1] - ci[0])
    n = len(slope_hits)
    print(f"slope CI covers the planted slope: {sum(slope_hits)}/{n} = {sum(slope_hits) / n:.3f} "
          f"(mean half-width {np.mean(slope_widths) / 2:.3f})")  # fmt: skip
    print(f"L=32 optimum CI covers the planted optimum: {sum(opt_hits)}/{n} = {sum(opt_hits) / n:.3f} "
          f"(mean width {np.mean(opt_widths):.2f} octave)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

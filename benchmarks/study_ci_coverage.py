"""How often the study's 95% CIs of the optimal LR cover a planted optimum.

    python benchmarks/study_ci_coverage.py [--reps 40] [--windows 1 2]

The planner of the default study (seeds 3, half-octave refinement, depths 2..32) is run
against planted quadratic loss curves with seed noise (tests/test_planner.py: curvature 0.1
nats per octave^2, noise 0.02 nats, sp's optimum falling 0.5 octave per depth doubling,
depth_mup's fixed), then ``eval transfer`` fits the optima. Prints, per quadratic fit window,
the coverage over all (repetition, preset, depth) cells, the optimum's error and CI width.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.results import read_results  # noqa: E402
from eval.transfer import analyze  # noqa: E402
from tests.test_eval_transfer import write_sweep  # noqa: E402
from tests.test_planner import planted_opt, rows_of, simulate, study  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    s = study()
    with tempfile.TemporaryDirectory() as tmp:
        for window in args.windows:
            errors, widths, covered, runs = [], [], 0, []
            for rep in range(args.reps):
                results = simulate(s, np.random.default_rng(1000 + rep))
                runs.append(len(results))
                sweep = write_sweep(Path(tmp) / f"w{window}-{rep}", rows_of(results, s.presets))
                analysis = analyze(read_results(sweep), n_boot=300, boot_seed=rep, window=window)
                for r in analysis.results:
                    for d in r.depths:
                        truth = planted_opt(r.family.preset, d.depth)
                        lo, hi = d.opt_ci
                        covered += lo <= truth <= hi
                        errors.append(abs(d.optimum.log2_lr - truth))
                        widths.append(hi - lo)
            print(
                f"fit window {window}: coverage {covered}/{len(errors)} = {covered / len(errors):.3f}; "
                f"|optimum error| median {np.median(errors):.3f}, max {max(errors):.3f} octaves; "
                f"CI width mean {np.mean(widths):.3f}; runs per study {np.mean(runs):.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

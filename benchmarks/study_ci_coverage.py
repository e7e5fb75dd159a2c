"""How often the study's 95% CIs of the optimal LR cover a planted optimum.

    python benchmarks/study_ci_coverage.py [--reps 40] [--windows 1 2] [--seed-models additive independent]
        [--seed-offsets 0 0.05]

The planner of the default study (seeds 3, half-octave refinement, depths 2..32) is run
against planted quadratic loss curves with seed noise (tests/test_planner.py: curvature 0.1
nats per octave^2, noise 0.02 nats, sp's optimum falling 0.5 octave per depth doubling,
depth_mup's fixed; optionally an offset per seed shared by all LRs of a curve), then
``eval transfer`` fits the optima with each seed model. Prints, per seed offset, fit window
and seed model, the coverage over all (repetition, preset, depth) cells, the optimum's error and CI width.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.results import read_results  # noqa: E402
from eval.seed_model import SEED_MODELS  # noqa: E402
from eval.transfer import analyze  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402
from tests.test_eval_transfer import write_sweep  # noqa: E402
from tests.test_planner import planted_opt, rows_of, simulate, study  # noqa: E402


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed-models", nargs="+", default=list(SEED_MODELS), choices=SEED_MODELS)
    parser.add_argument("--seed-offsets", type=float, nargs="+", default=[0.0, 0.05],
                        help="std of each seed's offset shared by all LRs of a curve (nats)")  # fmt: skip
    args = parser.parse_args()
    s = study()
    with tempfile.TemporaryDirectory() as tmp:
        for offset in args.seed_offsets:
            for window in args.windows:
                sims = [simulate(s, np.random.default_rng(1000 + rep), seed_offset=offset) for rep in range(args.reps)]
                for model in args.seed_models:
                    errors, widths, covered = [], [], 0
                    for rep, results in enumerate(sims):
                        sweep = write_sweep(
                            Path(tmp) / f"o{offset}-w{window}-{model}-{rep}", rows_of(results, s.presets)
                        )
                        analysis = analyze(
                            read_results(sweep), n_boot=300, boot_seed=rep, window=window, seed_model=model
                        )
                        for r in analysis.results:
                            for d in r.depths:
                                truth = planted_opt(r.family.preset, d.depth)
                                lo, hi = d.opt_ci
                                covered += lo <= truth <= hi
                                errors.append(abs(d.optimum.log2_lr - truth))
                                widths.append(hi - lo)
                    print(
                        f"seed offset {offset:.3f}, fit window {window}, seed model {model}: "
                        f"coverage {covered}/{len(errors)} = {covered / len(errors):.3f}; "
                        f"|optimum error| median {np.median(errors):.3f}, max {max(errors):.3f} octaves; "
                        f"CI width mean {np.mean(widths):.3f}; runs per study {np.mean([len(x) for x in sims]):.1f}",
                        flush=True,
                    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

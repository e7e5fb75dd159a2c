"""How often the study's 95% CIs cover a planted optimum and slope, for the fixed design and
under the sequential design's stopping rule.

    python benchmarks/study_ci_coverage.py [--reps 40] [--windows 1 2] [--seed-models additive independent]
        [--seed-offsets 0 0.05]
    python benchmarks/study_ci_coverage.py --design sequential [--reps 100] [--noise flat noisy-base noisy-deep]
        [--diverge none near far] [--bootstrap 300]
    python benchmarks/study_ci_coverage.py --design target [--reps 100] [--bootstrap 300]

The planner of the default study (seeds 3, 10 at the base depth, half-octave refinement,
depths 2..32) is run against planted quadratic loss curves with seed noise
(tests/test_planner.py: curvature 0.1 nats per octave^2, sp's optimum falling 0.5 octave per
depth doubling, depth_mup's fixed; optionally an offset per seed shared by all LRs of a
curve), then ``eval transfer`` fits the optima with each seed model.

``--design fixed`` (the default) prints, per seed offset, fit window and seed model, the
coverage of the per-depth optima over all (repetition, preset, depth) cells, the optimum's
error and CI width (noise 0.02 nats everywhere).

``--design target`` plants sweeps of depths 2-16 (tests/test_eval_transfer.py's grid, 3 seeds,
noise 0.03 nats) and prints how often the 95% interval of ``eval transfer --target-depth``
covers the planted optimum at L = 16 (swept), 32 and 64 (one and two doublings past the sweep).

``--design sequential`` runs the default study's goals (slope CI half-width <= 0.15,
deepest-depth optimum CI <= 1 octave) with its stopping rule and prints, per noise profile,
the coverage of the slope, of the deepest depth's optimum and of every depth's optimum, with
the runs spent and why each study stopped. Noise profiles (seed std in nats): ``flat`` 0.02
everywhere; ``noisy-base`` 0.15 at the base depth, 0.03 deeper (as measured on KJV);
``noisy-deep`` 0.02 at the base depth, 0.08 deeper. ``--diverge near|far``: every run above
the planted optimum diverges with probability rising from 0 at 0.75 (near) or 1.5 (far)
octaves above it to 1 at 1.5 (near) or 2.5 (far) octaves more; the truth stays the planted
loss optimum (``far``: divergence outside the fit window; ``near``: inside it, where counting
diverged seeds moves the optimum to the stable side on purpose: docs/eval.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.results import read_results  # noqa: E402
from eval.seed_model import SEED_MODELS  # noqa: E402
from eval.transfer import analyze  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402
from study.planner import Planner  # noqa: E402
from tests.test_eval_transfer import write_sweep  # noqa: E402
from tests.test_planner import DEPTHS, SLOPE, planted_opt, rows_of, simulate, study  # noqa: E402

NOISE = {
    "flat": lambda depth: 0.02,
    "noisy-base": lambda depth: 0.15 if depth == DEPTHS[0] else 0.03,
    "noisy-deep": lambda depth: 0.02 if depth == DEPTHS[0] else 0.08,
}
DIVERGE = {"none": None, "near": (0.75, 1.5), "far": (1.5, 2.5)}
GOALS = {"slope_ci_halfwidth": 0.15, "deepest_opt_ci_width": 1.0}


def divergence(kind: str):
    if DIVERGE[kind] is None:
        return None
    start, ramp = DIVERGE[kind]

    def p(preset: str, depth: int, log2_lr: float) -> float:
        return float(np.clip((log2_lr - planted_opt(preset, depth) - start) / ramp, 0.0, 1.0))

    return p


def fixed(args: argparse.Namespace) -> None:
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


def sequential(args: argparse.Namespace) -> None:
    for noise in args.noise:
        for diverge in args.diverge:
            s = study(base_seeds=10, goals=GOALS, budget_runs=args.budget, bootstrap=args.bootstrap)
            slope = deepest = cells = every = 0
            runs, reasons, slope_hw, errors = [], Counter(), [], []
            for rep in range(args.reps):
                planner = Planner(s)
                results = simulate(
                    s,
                    np.random.default_rng(5000 + rep),
                    noise=NOISE[noise],
                    diverge=divergence(diverge),
                    planner=planner,
                )
                runs.append(len(results))
                reasons[planner.stop(results).reason] += 1
                for r in planner.analysis(results).results:
                    truth_slope = -SLOPE[r.family.preset]
                    slope += r.slope.ci_low <= truth_slope <= r.slope.ci_high
                    slope_hw.append((r.slope.ci_high - r.slope.ci_low) / 2)
                    cells += 1
                    for d in r.depths:
                        truth = planted_opt(r.family.preset, d.depth)
                        lo, hi = d.opt_ci
                        every += lo <= truth <= hi
                        errors.append(d.optimum.log2_lr - truth)
                        if d.depth == DEPTHS[-1]:
                            deepest += lo <= truth <= hi
            n_opt = cells * len(DEPTHS)
            print(
                f"noise {noise}, divergence {diverge}: slope coverage {slope}/{cells} = {slope / cells:.3f}; "
                f"deepest optimum {deepest}/{cells} = {deepest / cells:.3f}; every optimum {every}/{n_opt} = "
                f"{every / n_opt:.3f}; optimum error median {np.median(errors):+.3f} (|error| "
                f"{np.median(np.abs(errors)):.3f}) octaves; slope CI half-width median "
                f"{np.median(slope_hw):.3f}; runs mean {np.mean(runs):.0f} (min {min(runs)}, max {max(runs)}); "
                f"stopped: {dict(reasons)}",
                flush=True,
            )


def target(args: argparse.Namespace) -> None:
    """Coverage of the optimum predicted at an unseen depth (eval transfer --target-depth)."""
    from eval.transfer import predict_at_depths
    from tests.test_eval_transfer import make_rows, planted_log2_opt

    grid = tuple(float(x) for x in np.arange(-11.0, -7.5 + 1e-9, 0.5))
    covered: Counter = Counter()
    total: Counter = Counter()
    widths: dict[int, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            rows = make_rows(depths=(2, 4, 8, 16), fractions=(1.0,), noise=0.03, grid=grid, diverge_gap=None,
                             rng_seed=rep)  # fmt: skip
            sweep = read_results(write_sweep(Path(tmp) / f"r{rep}", rows))
            analysis = analyze(sweep, n_boot=args.bootstrap, boot_seed=rep, window=2)
            for p in predict_at_depths(analysis, [16, 32, 64]):
                truth = planted_log2_opt(p.depth, 0.5 if p.family.preset == "sp" else 0.0)
                covered[p.depth] += p.ci[0] <= truth <= p.ci[1]
                total[p.depth] += 1
                widths.setdefault(p.depth, []).append(p.ci[1] - p.ci[0])
    for depth in sorted(total):
        print(
            f"target depth {depth} (sweep 2-16): coverage {covered[depth]}/{total[depth]} = "
            f"{covered[depth] / total[depth]:.3f}, interval width mean {np.mean(widths[depth]):.2f} octaves",
            flush=True,
        )


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--design", choices=("fixed", "sequential", "target"), default="fixed")
    parser.add_argument("--reps", type=int, default=40)
    parser.add_argument("--windows", type=int, nargs="+", default=[1, 2], help="fixed design: fit windows")
    parser.add_argument("--seed-models", nargs="+", default=list(SEED_MODELS), choices=SEED_MODELS)
    parser.add_argument("--seed-offsets", type=float, nargs="+", default=[0.0, 0.05],
                        help="fixed design: std of each seed's offset shared by all LRs of a curve (nats)")  # fmt: skip
    parser.add_argument("--noise", nargs="+", choices=sorted(NOISE), default=["noisy-base", "noisy-deep"])
    parser.add_argument("--diverge", nargs="+", choices=sorted(DIVERGE), default=["none"])
    parser.add_argument(
        "--budget", type=int, default=300, help="sequential design: the run budget (the default study's)"
    )
    parser.add_argument("--bootstrap", type=int, default=300, help="sequential design: bootstrap samples")
    args = parser.parse_args()
    {"fixed": fixed, "sequential": sequential, "target": target}[args.design](args)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

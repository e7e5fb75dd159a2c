"""The study planner (launch/planner.py) against planted loss curves, with no training.

A fake trainer answers every point the planner asks for from a known curve per depth,
``c(L) + K * (log2 lr - x*(L))^2`` plus seed noise; the analysis (``eval transfer``) then
has to find x*(L) and cover it with its bootstrap CI.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from eval.goals import check_goals
from eval.results import read_results
from eval.transfer import analyze
from study.planner import DIVERGED, PENDING, Planner, Point
from study.spec import load_study
from tests.test_eval_transfer import write_sweep

K = 0.1  # nats per octave^2 around the optimum
NOISE = 0.02  # seed-to-seed std of the end loss
DEPTHS = (2, 4, 8, 16, 32)
SLOPE = {"sp": 0.5, "depth_mup": 0.0}  # planted: optimal log2 LR falls 0.5 octave per doubling under sp


def planted_opt(preset: str, depth: int) -> float:
    return -7.7 - SLOPE[preset] * math.log2(depth / DEPTHS[0])


def study(**changes):
    """The default study's planner on the planted grid; the fixed design (no goals) unless
    ``goals`` (and ``budget_runs``) are given."""
    settings = {
        "depths": DEPTHS,
        "base_lrs_log2": (-10.0, -9.0, -8.0, -7.0, -6.0),
        "window": 3,
        "seeds": 3,
        "refine_log2": 0.5,
        "goals": {},
        "budget_runs": 0,
        **changes,
    }
    return replace(load_study("default"), **settings)


def simulate(
    s,
    rng: np.random.Generator,
    seed_offset: float = 0.0,
    noise=None,
    diverge=None,
    rounds: int = 400,
    planner: Planner | None = None,
) -> dict[Point, float]:
    """Run the planner to the end, answering each point from the planted curve plus noise:
    ``seed_offset`` is the std of an offset each seed adds at every LR of one (preset, depth)
    curve (a worse initialization is worse at all LRs), ``noise(depth)`` the std of the rest
    (default NOISE everywhere); ``diverge(preset, depth, log2_lr)`` is the probability that a
    run diverges (answered DIVERGED)."""
    planner = planner or Planner(s)
    results: dict[Point, float] = {}
    offsets: dict[tuple, float] = {}
    for _ in range(rounds):
        points = planner.next_points(results)
        if not points:
            return results
        for p in points:
            c = 3.0 + 1.0 / math.sqrt(p.depth)
            if seed_offset and (p.preset, p.depth, p.seed) not in offsets:  # no draw when 0: the old noise stream
                offsets[(p.preset, p.depth, p.seed)] = seed_offset * rng.standard_normal()
            offset = offsets.get((p.preset, p.depth, p.seed), 0.0)
            sigma = NOISE if noise is None else noise(p.depth)
            results[p] = (
                c + offset + K * (p.log2_lr - planted_opt(p.preset, p.depth)) ** 2 + sigma * rng.standard_normal()
            )
            if diverge is not None and rng.random() < diverge(p.preset, p.depth, p.log2_lr):
                results[p] = DIVERGED
    raise AssertionError(f"planner did not finish in {rounds} rounds")


def rows_of(results: dict[Point, float], presets) -> list[dict]:
    rows = []
    for p, loss in results.items():
        diverged = loss == DIVERGED
        for preset in presets if p.depth == DEPTHS[0] else [p.preset]:  # the shared base stands for both
            rows.append(
                {
                    "run_id": f"{preset}-L{p.depth}-lr{p.log2_lr:+.3f}-s{p.seed}",
                    "parametrization.preset": preset,
                    "model.num_layers": p.depth,
                    "optimizer.lr": 2.0**p.log2_lr,
                    "run.seed": p.seed,
                    "parametrization.block_multiplier": 1.0,
                    "parametrization.base_num_layers": DEPTHS[0],
                    "model.hidden_size": 128,
                    "status": "diverged" if diverged else "completed",
                    "step": "" if diverged else 200,
                    "fraction": 1.0,
                    "val_loss": "" if diverged else loss,
                }
            )
    return rows


def test_seeds_go_near_the_optimum_and_a_rerun_adds_nothing():
    s = study()
    results = simulate(s, np.random.default_rng(0))
    planner = Planner(s)
    assert planner.next_points(results) == []
    for preset in s.presets:
        for depth in DEPTHS:
            owner = planner.owner(preset, depth)
            cells: dict[float, set[int]] = {}
            for p in results:
                if p.preset == owner and p.depth == depth:
                    cells.setdefault(p.log2_lr, set()).add(p.seed)
            best = planner.best(preset, depth, results)
            n_seeds = max(s.seeds, s.base_seeds) if depth == DEPTHS[0] else s.seeds
            seeded = sorted(x for x, seeds in cells.items() if seeds == set(range(n_seeds)))
            assert best in seeded and {best - 0.5, best + 0.5} <= set(seeded)  # refinement, all seeds
            assert all(abs(x - best) <= s.step_log2 + s.refine_log2 for x in seeded)  # none on the far tails
            assert abs(best - planted_opt(preset, depth)) <= 0.75
    # the base depth is trained once, by the first preset
    assert not [p for p in results if p.depth == DEPTHS[0] and p.preset != s.presets[0]]


def test_base_seeds_seed_only_the_base_depth():
    s = study(base_seeds=6)
    results = simulate(s, np.random.default_rng(0))
    planner = Planner(s)
    for depth in DEPTHS:
        best = planner.best(s.presets[0], depth, results)
        seeds_at_best = {p.seed for p in results if p.depth == depth and p.log2_lr == best and p.preset == s.presets[0]}
        assert seeds_at_best == set(range(6 if depth == DEPTHS[0] else 3)), (depth, seeds_at_best)


def test_pending_runs_hold_their_depth_and_failures_end_a_chain():
    s = study(presets=("sp",))
    planner = Planner(s)
    first = planner.next_points({})
    assert sorted(p.log2_lr for p in first) == [-10.0, -9.0, -8.0, -7.0, -6.0] and {p.seed for p in first} == {0}
    pending = dict.fromkeys(first, PENDING)
    assert planner.next_points(pending) == []
    failed = dict.fromkeys(first, None)  # every base run diverged or failed: nothing to centre on
    assert planner.next_points(failed) == []


@pytest.mark.parametrize(
    ("seed_offset", "seed_model", "q99"),
    [(0.0, "independent", 0.25), (0.05, "independent", 0.35), (0.05, "additive", 0.25)],
)
def test_planted_optima_are_recovered_and_covered_by_the_ci(tmp_path, seed_offset, seed_model, q99):
    """Over repetitions with fresh seed noise, with and without an offset per seed shared by
    all LRs of a curve: 99% of the optima within ``q99`` octave of the planted one, and the 95%
    bootstrap CI covers the planted optimum in at least 90% of cells. Offsets cost the plain
    seed means accuracy (a one-seed cell carries its seed's offset), not coverage. Measured
    over 400 cells in docs/eval.md (benchmarks/study_ci_coverage.py); the per-cell
    bootstrap gave 0.75 coverage and the pooled one without the noise-level draw 0.89."""
    s = study(seed_model=seed_model)
    errors, covered, cells = [], 0, 0
    for rep in range(20):
        results = simulate(s, np.random.default_rng(100 + rep), seed_offset=seed_offset)
        analysis = analyze(
            read_results(write_sweep(tmp_path / f"rep{rep}", rows_of(results, s.presets))),
            n_boot=300,
            boot_seed=rep,
            window=2,
            seed_model=s.seed_model,
        )
        for r in analysis.results:
            for d in r.depths:
                truth = planted_opt(r.family.preset, d.depth)
                errors.append(abs(d.optimum.log2_lr - truth))
                lo, hi = d.opt_ci
                covered += lo <= truth <= hi
                cells += 1
    assert np.quantile(errors, 0.99) <= q99, sorted(errors)[-5:]
    assert covered / cells >= 0.90, (covered, cells)


def test_seed_offsets_widen_the_independent_model_not_the_additive_one(tmp_path):
    """With offsets of 0.05 nats per seed (noise 0.02), plain seed means carry the offsets of
    whichever seeds a cell has: their CIs are about twice as wide as the additive model's."""
    s = study()
    widths: dict[str, list[float]] = {"additive": [], "independent": []}
    for rep in range(6):
        results = simulate(s, np.random.default_rng(500 + rep), seed_offset=0.05)
        sweep = read_results(write_sweep(tmp_path / f"rep{rep}", rows_of(results, s.presets)))
        for model in widths:
            analysis = analyze(sweep, n_boot=200, boot_seed=rep, window=2, seed_model=model)
            widths[model] += [d.opt_ci[1] - d.opt_ci[0] for r in analysis.results for d in r.depths]
    assert np.mean(widths["additive"]) < 0.7 * np.mean(widths["independent"]), {
        k: float(np.mean(v)) for k, v in widths.items()
    }


def test_variants_walk_their_own_chains_with_their_own_shared_base():
    """Each (variant, preset) arm finds its planted optimum; each variant's base is trained once,
    by its first preset."""
    s = study(variants={"standard": {"model.block": "standard"}, "linear1": {"model.block": "linear1"}})
    shift = {"standard": 0.0, "linear1": 1.0}  # linear1's optima sit one octave higher
    planner = Planner(s)
    results: dict[Point, float] = {}
    rng = np.random.default_rng(0)
    for _ in range(200):
        points = planner.next_points(results)
        if not points:
            break
        for p in points:
            truth = planted_opt(p.preset, p.depth) + shift[p.variant]
            results[p] = 3.0 + K * (p.log2_lr - truth) ** 2 + NOISE * rng.standard_normal()
    assert planner.next_points(results) == []
    for variant in s.variants:
        assert {p.preset for p in results if p.variant == variant and p.depth == DEPTHS[0]} == {"sp"}
        for preset in s.presets:
            for depth in DEPTHS:
                best = planner.best(preset, depth, results, variant)
                assert abs(best - (planted_opt(preset, depth) + shift[variant])) <= 0.5 + 1e-9, (variant, preset, depth)


# ----------------------------------------------------------------- the sequential phase

GOALS = {"slope_ci_halfwidth": 0.15, "deepest_opt_ci_width": 1.0}


def noisy_base(depth: int) -> float:
    """Seed noise as on the real curves: the base depth several times noisier than the deep end."""
    return 0.15 if depth == DEPTHS[0] else 0.03


def _rounds(s, rng, noise, opt=planted_opt) -> list[tuple[dict[Point, float], list[Point]]]:
    """(results before the round, points the planner added) for every round to the end;
    ``opt(preset, depth)`` is the planted optimal log2 LR."""
    planner = Planner(s)
    results: dict[Point, float] = {}
    rounds = []
    for _ in range(400):
        points = planner.next_points(results)
        rounds.append((dict(results), points))
        if not points:
            return rounds
        for p in points:
            loss = 3.0 + 1.0 / math.sqrt(p.depth) + K * (p.log2_lr - opt(p.preset, p.depth)) ** 2
            results[p] = loss + noise(p.depth) * rng.standard_normal()
    raise AssertionError("planner did not finish")


def test_sequential_phase_stops_when_the_goals_are_met_and_not_before():
    """The fixed phases leave the slope interval over its goal (noisy base depth); the
    sequential phase adds seeds while a goal is unmet, and stops as soon as all are met."""

    s = study(base_seeds=10, goals=GOALS, budget_runs=1000, bootstrap=200)
    planner = Planner(s)
    rounds = _rounds(s, np.random.default_rng(0), noisy_base)
    sequential = [
        (before, pts) for before, pts in rounds if pts and all(p.seed >= planner.default_seeds(p.depth) for p in pts)
    ]
    assert sequential, "the planted noise should need the sequential phase"
    for before, _points in sequential:  # every batch was added while some goal was unmet
        checks = check_goals(planner.analysis(before), GOALS)
        assert not all(c.met for c in checks)
    final = rounds[-1][0]
    stop = planner.stop(final)
    assert stop.reason == "goals_met" and all(c["met"] for c in stop.checks), stop
    assert planner.next_points(final) == [] and Planner(s).next_points(final) == []  # a rerun adds nothing
    assert len(final) < s.budget_runs
    # the seeds went where the slope is widest: the noisy, cheap base depth
    added = [p for _, pts in sequential for p in pts]
    assert sum(p.depth == DEPTHS[0] for p in added) > len(added) / 2, [p.depth for p in added]


def test_sequential_phase_stops_at_the_budget():
    """Goals out of reach: the study spends exactly its run budget (the last batch cut to
    fit), says so, and a rerun adds nothing."""
    s = study(base_seeds=10, goals={"slope_ci_halfwidth": 0.01, "deepest_opt_ci_width": 0.05}, bootstrap=200)
    fixed = len(_rounds(replace(s, goals={}, budget_runs=0), np.random.default_rng(1), noisy_base)[-1][0])
    s = replace(s, budget_runs=fixed + 23)  # not a multiple of a batch
    final = _rounds(s, np.random.default_rng(1), noisy_base)[-1][0]
    planner = Planner(s)
    assert len(final) == s.budget_runs
    assert planner.stop(final).reason == "budget_spent"
    assert planner.next_points(final) == []


def test_the_run_budget_is_per_variant():
    """Two variants, goals out of reach: the study spends ``budget_runs`` for each variant, not
    in all (each variant has its own arms and base depth, as a one-variant study has)."""
    variants = {"standard": {"model.block": "standard"}, "linear1": {"model.block": "linear1"}}
    s = study(base_seeds=10, goals={"slope_ci_halfwidth": 0.01}, bootstrap=200, variants=variants)
    fixed = len(_rounds(replace(s, goals={}, budget_runs=0), np.random.default_rng(1), noisy_base)[-1][0])
    per_variant = fixed // 2 + 17  # above one variant's fixed phases, well below both variants'
    s = replace(s, budget_runs=per_variant)
    final = _rounds(s, np.random.default_rng(1), noisy_base)[-1][0]
    assert s.run_budget == 2 * per_variant and fixed < 2 * per_variant
    assert len(final) == 2 * per_variant and Planner(s).stop(final).reason == "budget_spent"


def test_sequential_seeds_never_move_a_window():
    """Phase 4 adds seeds past each depth's first seeds, at LRs already tried or (the edge
    rule) walking out from a depth's scanned range one step at a time: the scan, refine and
    seed phases see exactly what they saw before it started."""
    s = study(base_seeds=10, goals=GOALS, budget_runs=1000, bootstrap=200)
    planner = Planner(s)
    rounds = _rounds(s, np.random.default_rng(0), noisy_base)
    final = rounds[-1][0]
    first = next(before for before, pts in rounds if pts and all(p.seed >= planner.default_seeds(p.depth) for p in pts))
    tried = {(p.preset, p.depth, p.log2_lr) for p in first}
    extra = [p for p in final if p not in first]
    assert extra and all(p.seed >= planner.default_seeds(p.depth) for p in extra)
    assert planner._chains(final) == planner._chains(first)
    past: dict[tuple, set] = {}
    for p in extra:
        if (p.preset, p.depth, p.log2_lr) not in tried:
            past.setdefault((p.preset, p.depth), set()).add(p.log2_lr)
    for (preset, depth), lrs in past.items():
        scanned = [x for q, dq, x in tried if q == preset and dq == depth]
        up = sorted(x for x in lrs if x > max(scanned))
        down = sorted((x for x in lrs if x < min(scanned)), reverse=True)
        assert up == [max(scanned) + s.step_log2 * (k + 1) for k in range(len(up))], (preset, depth, lrs)
        assert down == [min(scanned) - s.step_log2 * (k + 1) for k in range(len(down))], (preset, depth, lrs)
        assert len(up) + len(down) == len(lrs), (preset, depth, lrs)


def jump_at_deepest(preset: str, depth: int) -> float:
    """depth_mup's optimum jumps 2.3 octaves at the deepest depth: past what the scan's one
    widening reaches (window centred near -8, widened once to -6), 0.6 octave beyond it."""
    return planted_opt(preset, depth) + (2.3 if preset == "depth_mup" and depth == DEPTHS[-1] else 0.0)


def test_an_interval_cut_by_the_tried_lrs_walks_past_them_until_bracketed():
    """The edge rule: the deepest depth's best point is the last LR the scan tried, so the
    bootstrap interval ends on it, narrow but cut short of the planted optimum (the goal must
    not count as met). Phase 4 walks one LR at a time past it (seeds beyond the first ones
    only: no window moves) until the interval is bracketed, and it covers the planted optimum."""
    s = study(refine_log2=0.0, goals={"deepest_opt_ci_width": 1.0}, budget_runs=1000, bootstrap=200)
    planner = Planner(s)
    rounds = _rounds(s, np.random.default_rng(0), lambda depth: NOISE, jump_at_deepest)
    final = rounds[-1][0]
    deep, planted = DEPTHS[-1], jump_at_deepest("depth_mup", DEPTHS[-1])
    at_deep = [p for p in final if p.preset == "depth_mup" and p.depth == deep]
    first = {p.log2_lr for p in at_deep if p.seed < s.seeds}
    later = sorted({p.log2_lr for p in at_deep} - first)
    assert later == [max(first) + s.step_log2 * (k + 1) for k in range(len(later))] and later, (first, later)
    assert all(p.seed >= s.seeds for p in at_deep if p.log2_lr in later)
    # before the walk, the interval ended on the last scanned LR, short of the planted optimum: not met
    before = next(b for b, pts in rounds if any(p.log2_lr == later[0] for p in pts))
    d = _deepest(planner.analysis(before))
    assert d.opt_ci[1] == max(first) < planted and d.open_ends == ("high",)
    check = next(c for c in check_goals(planner.analysis(before), s.goals) if c.family == "depth_mup")
    assert check.within_target and not check.met and check.open == (f"L={deep} high",)
    # after it: bracketed by a quadratic fit, and the interval covers the planted optimum
    d = _deepest(planner.analysis(final))
    assert d.optimum.method == "quadratic" and d.open_ends == ()
    assert d.opt_ci[0] <= planted <= d.opt_ci[1] < later[-1], d.opt_ci
    assert planner.stop(final).reason == "goals_met" and planner.next_points(final) == []
    # sp's curves are bracketed by the scan: nothing past its tried LRs
    sp_first = {(p.depth, p.log2_lr) for p in final if p.preset == "sp" and p.seed < planner.default_seeds(p.depth)}
    assert {(p.depth, p.log2_lr) for p in final if p.preset == "sp"} == sp_first


def _deepest(analysis):
    result = next(r for r in analysis.results if r.family.preset == "depth_mup" and r.fraction == 1.0)
    return next(d for d in result.depths if d.depth == DEPTHS[-1])


def test_an_arm_whose_walk_stops_short_of_the_deepest_depth_is_named():
    """Every run at a depth diverged: the planner cannot centre the next depth's window and the
    arm's walk ends there. The study used to say nothing of it and hand eval transfer its full
    depth list, which failed with "--depths [4] not in column 'model.num_layers'" (a flag the
    user never gave). Now the summary and the log name the arm, the depth, the LRs tried and
    the study key to change."""
    from types import SimpleNamespace

    from study.summary import unreached

    s = replace(load_study("quick"), depths=(2, 4, 8), base_lrs_log2=(3.0, 5.0))
    planner = Planner(s)
    sweep = SimpleNamespace(planner=planner)
    results = {p: DIVERGED for p in planner.next_points({})}  # the base grid, owned by sp, all diverged
    assert planner.next_points(results) == []  # nothing more to plan: the walk has ended
    lines = unreached(results, sweep, s)
    assert lines == [
        f"**{preset}: every run at L=2 diverged or failed** (LRs tried: 2^3, 2^5), so no LR window could be "
        f"centred at L=4: L=4 and deeper were not trained (study 'demo_quick': its base_lrs_log2 reach no LR "
        f"that trains at L=2)."
        for preset in ("sp", "depth_mup")
    ]
    # a deeper depth: depth_mup's L=4 window all diverged, sp's trained; only depth_mup is named
    results = {Point("sp", 2, x, seed): 4.0 + 0.1 * (x + 7) ** 2 for x in (-8.0, -6.0) for seed in (0, 1)}
    for preset in ("sp", "depth_mup"):
        for x in (-9.0, -7.0):
            results[Point(preset, 4, x, 0)] = DIVERGED if preset == "depth_mup" else 4.0
    lines = unreached(results, sweep, s)
    assert len(lines) == 1 and lines[0].startswith(
        "**depth_mup: every run at L=4 diverged or failed** (LRs tried: 2^-9, 2^-7)"
    )
    assert "L=8 and deeper were not trained" in lines[0] and "its window / step_log2" in lines[0]


def test_the_study_status_computes_the_unreached_lines_once(monkeypatch):
    """study_status is the one place the unreached lines are computed: the summary's lines end
    with them and the demo logs ``status.unreached`` (it used to call ``unreached`` again)."""
    from types import SimpleNamespace

    import study.demo
    import study.summary

    s = replace(load_study("quick"), depths=(2, 4, 8), base_lrs_log2=(3.0, 5.0))
    planner = Planner(s)
    results = {p: DIVERGED for p in planner.next_points({})}
    sweep = SimpleNamespace(planner=planner, results=lambda: results, run_seconds=lambda: 60.0)
    calls = []
    real = study.summary.unreached
    monkeypatch.setattr(study.summary, "unreached", lambda *a: calls.append(a) or real(*a))
    status = study.summary.study_status(sweep, s)
    assert len(calls) == 1 and len(status.unreached) == 2
    assert status.unreached[0].startswith("**sp: every run at L=2 diverged or failed** (LRs tried: 2^3, 2^5)")
    assert status.lines[-2:] == status.unreached and status.lines[0].startswith("**")
    assert status.used["runs"] == len(results) and status.used["run_core_minutes"] == 1.0
    assert "unreached" not in vars(study.demo)

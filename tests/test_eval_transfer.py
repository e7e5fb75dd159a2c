"""Planted-answer tests of ``python -m eval transfer``.

Every synthetic sweep follows docs/contracts.md (results.csv columns, statuses, empty cells
for eval points never reached) and plants

    val_loss = c(L, f) + k * (log2 lr - log2 lr*(L))^2 + seed noise,
    log2 lr*(L) = log2 lr0 - s * log2(L / L0),

so the per-depth optimum, the slope (-s), the drift (s * log2(Lmax/Lmin)) and the regret
(k * (s * log2(L / L0))^2) are known exactly.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from eval.__main__ import main
from eval.optimum import fit_optimum, loss_at
from eval.plots import plot_block_multiplier_heatmaps, plot_loss_vs_lr, plot_optimal_lr_vs_depth
from eval.results import ResultsError, read_results
from eval.transfer import AnalysisInputError, TransferAnalysis, analyze

HEADER = [
    "run_id",
    "parametrization.preset",
    "model.num_layers",
    "optimizer.lr",
    "run.seed",
    "parametrization.block_multiplier",
    "parametrization.base_num_layers",
    "model.hidden_size",
    "status",
    "step",
    "fraction",
    "val_loss",
]
STEPS = 400
LOG2_LR0 = -9.2  # deliberately between grid points
K = 0.1  # curvature per (log2 lr)^2
GRID = tuple(float(x) for x in np.round(np.arange(-13.0, -5.0 + 1e-9, 0.5), 6))  # log2 lr, step 0.5
DEPTHS = (2, 4, 8, 16)
L0 = 2


def planted_log2_opt(depth: int, slope: float, log2_lr0: float = LOG2_LR0) -> float:
    return log2_lr0 - slope * math.log2(depth / L0)


def planted_loss(depth: int, log2_lr: float, fraction: float, slope: float, k: float = K) -> float:
    c = 3.0 + 1.0 / math.sqrt(depth) + (0.4 if fraction < 1.0 else 0.0)
    return c + k * (log2_lr - planted_log2_opt(depth, slope)) ** 2


def make_rows(
    *,
    slopes: dict[str, float] | None = None,
    depths: tuple[int, ...] = DEPTHS,
    seeds: tuple[int, ...] = (0, 1, 2),
    grid: tuple[float, ...] = GRID,
    fractions: tuple[float, ...] = (0.5, 1.0),
    noise: float = 0.002,
    diverge_gap: float | None = 2.6,
    block_multipliers: tuple[float, ...] = (1.0,),
    base_num_layers: int = L0,
    rng_seed: int = 1234,
) -> list[dict]:
    """Contract rows for a planted sweep. Runs above ``log2 lr* + diverge_gap`` diverge right after the mid eval."""
    slopes = {"depth_mup": 0.0, "sp": 0.5} if slopes is None else slopes
    rng = np.random.default_rng(rng_seed)
    rows = []
    for preset, slope in slopes.items():
        for a in block_multipliers:
            for depth in depths:
                for x in grid:
                    for seed in seeds:
                        run_id = f"{preset}-a{a:g}-L{depth}-lr{x:+.2f}-s{seed}"
                        gap = x - planted_log2_opt(depth, slope)
                        diverged = diverge_gap is not None and gap > diverge_gap
                        for f in fractions:
                            loss = (
                                planted_loss(depth, x, f, slope)
                                + 0.05 * (a - 1.0) ** 2
                                + noise * float(rng.standard_normal())
                            )
                            reached = not diverged or f < 0.75
                            rows.append(
                                {
                                    "run_id": run_id,
                                    "parametrization.preset": preset,
                                    "model.num_layers": depth,
                                    "optimizer.lr": 2.0**x,
                                    "run.seed": seed,
                                    "parametrization.block_multiplier": a,
                                    "parametrization.base_num_layers": base_num_layers,
                                    "model.hidden_size": 128,
                                    "status": "diverged" if diverged else "completed",
                                    "step": int(round(f * STEPS)) if reached else "",
                                    "fraction": f,
                                    "val_loss": loss if reached else "",
                                }
                            )
    return rows


def write_sweep(directory: Path, rows: list[dict], header: list[str] = HEADER) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / "results.csv", "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([repr(v) if isinstance(v, float) else v for v in (row.get(h, "") for h in header)])
    return directory


def run_analysis(tmp_path: Path, rows: list[dict], **kwargs) -> TransferAnalysis:
    kwargs.setdefault("n_boot", 200)
    return analyze(read_results(write_sweep(tmp_path / "sweep", rows)), **kwargs)


def depth_result(analysis: TransferAnalysis, preset: str, fraction: float, depth: int):
    result = next(r for r in analysis.results if r.family.preset == preset and r.fraction == fraction)
    return result, next(d for d in result.depths if d.depth == depth)


def notes_text(analysis: TransferAnalysis) -> str:
    return "\n".join(str(n) for n in analysis.notes)


# ----------------------------------------------------------------- optimum fitting


def test_quadratic_vertex_is_exact_between_grid_points():
    x = np.array(GRID)
    y = 3.0 + K * (x - LOG2_LR0) ** 2
    opt = fit_optimum(x, y)
    assert opt.method == "quadratic" and opt.edge is None and opt.fallback is None
    assert opt.log2_lr == pytest.approx(LOG2_LR0, abs=1e-9)
    assert opt.loss == pytest.approx(3.0, abs=1e-12)
    assert opt.fit is not None and opt.fit.lo <= LOG2_LR0 <= opt.fit.hi


def test_non_convex_fit_falls_back_to_grid_point():
    x = np.arange(5.0)
    y = np.array([0.5, 2.0, 0.4, 2.0, 0.5])  # best point interior, but the 5-point parabola opens downwards
    opt = fit_optimum(x, y, window=2)
    assert opt.method == "grid" and opt.fallback == "not_convex"
    assert opt.log2_lr == 2.0 and "not convex" in opt.note


def test_edge_and_few_points_and_empty_curve():
    x = np.arange(6.0)
    low = fit_optimum(x, 1.0 + (x + 2.0) ** 2)  # true optimum below the grid
    assert (low.edge, low.edge_reason, low.method, low.log2_lr) == ("low", "grid", "grid", 0.0)
    y = 1.0 + (x - 2.2) ** 2
    y[3:] = np.nan
    diverged = np.array([0, 0, 0, 3, 3, 3])
    high = fit_optimum(x, y, n_diverged=diverged)  # best usable point is next to diverged LRs
    assert (high.edge, high.edge_reason, high.fallback) == ("high", "diverged", "edge")
    two = fit_optimum(x, np.array([np.nan, 2.0, 1.0, np.nan, np.nan, np.nan]))
    assert two.fallback == "few_points" and "needs 3" in two.note
    none = fit_optimum(x, np.full(6, np.nan))
    assert none.method == "none" and not none.found


def test_loss_at_uses_quadratic_inside_bracket_and_linear_outside():
    x = np.array(GRID)
    y = 2.0 + K * (x - LOG2_LR0) ** 2
    opt = fit_optimum(x, y)
    inside = loss_at(x, y, opt, -9.3)
    assert inside.method == "quadratic" and inside.loss == pytest.approx(2.0 + K * 0.1**2, abs=1e-12)
    outside = loss_at(x, y, opt, -11.2)
    assert outside.method == "linear" and 2.0 + K * 4.0 < outside.loss <= 2.0 + K * 4.0 + K * 0.25 / 4
    assert loss_at(x, y, opt, -20.0).status == "outside_grid"


# ----------------------------------------------------------------- planted recovery


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> TransferAnalysis:
    rows = make_rows(seeds=(0, 1, 2, 3))
    return analyze(read_results(write_sweep(tmp_path_factory.mktemp("planted"), rows)), n_boot=400)


@pytest.mark.parametrize("preset,slope", [("depth_mup", 0.0), ("sp", 0.5)])
@pytest.mark.parametrize("fraction", [0.5, 1.0])
def test_recovers_planted_optima_slope_and_ci(planted, preset, slope, fraction):
    result, _ = depth_result(planted, preset, fraction, L0)
    assert result.base_depth == L0 and result.base_source == "parametrization.base_num_layers"
    for d in result.depths:
        assert d.optimum.method == "quadratic", d.optimum.note
        assert d.optimum.log2_lr == pytest.approx(planted_log2_opt(d.depth, slope), abs=0.04)
        assert d.seed_counts == (4, 4)
        lo, hi = d.opt_ci
        assert lo <= d.optimum.log2_lr <= hi and 0.0 < hi - lo < 0.15
    assert result.slope.slope == pytest.approx(-slope, abs=0.02)
    assert result.slope.ci_low <= -slope <= result.slope.ci_high
    assert 0.0 < result.slope.ci_high - result.slope.ci_low < 0.1
    if slope:  # the CI has power: it excludes 0 when the optimum really moves
        assert result.slope.ci_high < 0.0
    assert result.drift == pytest.approx(slope * math.log2(max(DEPTHS) / min(DEPTHS)), abs=0.06)


@pytest.mark.parametrize("fraction", [0.5, 1.0])
def test_regret_zero_without_drift_and_planted_with_drift(planted, fraction):
    flat, _ = depth_result(planted, "depth_mup", fraction, L0)
    for d in flat.depths:
        assert d.regret_status == "ok"
        assert abs(d.regret) < 0.003
    moving, base = depth_result(planted, "sp", fraction, L0)
    grid_step = 0.5
    for d in moving.depths:
        assert d.regret_status == "ok"
        slack = K * grid_step**2 / 4 if d.regret_method == "linear" else 0.0  # a chord lies above the parabola
        planted_regret = K * (0.5 * math.log2(d.depth / L0)) ** 2
        assert planted_regret - 0.01 <= d.regret <= planted_regret + slack + 0.01, (d.depth, d.regret_method)
        # the same, at the base LR actually estimated: only the loss noise (std 0.002 / sqrt(4) per mean) is left
        at_estimate = K * (base.optimum.log2_lr - planted_log2_opt(d.depth, 0.5)) ** 2
        assert at_estimate - 0.004 <= d.regret <= at_estimate + slack + 0.004, (d.depth, d.regret_method)
    assert moving.max_regret == max(d.regret for d in moving.depths)
    assert K * 1.5**2 - 0.01 <= moving.max_regret <= K * 1.5**2 + K * grid_step**2 / 4 + 0.01


@pytest.mark.parametrize("fraction", [0.5, 1.0])
def test_regret_ci_covers_the_planted_regret(planted, fraction):
    moving, _ = depth_result(planted, "sp", fraction, L0)
    for d in moving.depths:
        lo, hi = d.regret_ci
        assert lo <= d.regret <= hi
        if not d.is_base:  # the planted regret K*(0.5*log2(L/L0))^2 > 0 is resolved from 0
            assert lo > 0.0
            assert lo - 0.01 <= K * (0.5 * math.log2(d.depth / L0)) ** 2 <= hi + K * 0.5**2 / 4 + 0.01
    flat, _ = depth_result(planted, "depth_mup", fraction, L0)
    deepest = flat.depths[-1]
    assert deepest.regret_ci[0] <= 0.003 and deepest.regret_ci[1] < 0.01  # no drift: regret ~ 0


def test_max_regret_says_where_the_base_lr_diverged(tmp_path, capsys):
    """sp's optimum falls one octave per doubling (2^-9.2 at L=2, -10.2 at L=4, -11.2 at L=8)
    and runs more than 1.5 octaves above it diverge: the base LR costs about K * 1^2 = 0.1
    nats at L=4 (read linearly between 2^-9.5, 0.1 * 0.7^2 = 0.049, and 2^-9, 0.1 * 1.2^2 =
    0.144: 0.106 at 2^-9.2) and diverges at L=8 and L=16. The max regret used to print that
    0.1, the largest regret that could be computed; it now says where the transfer diverged."""
    rows = make_rows(slopes={"sp": 1.0}, diverge_gap=1.5, seeds=(0, 1))
    sweep = write_sweep(tmp_path / "sweep", rows)
    assert main(["transfer", str(sweep), "--out", str(tmp_path / "out"), "--bootstrap", "50", "--no-figures"]) == 0
    stdout = capsys.readouterr().out
    assert stdout.count("max regret diverged at L=8, 16") == 2 and "max regret 0.1" not in stdout
    analysis = analyze(read_results(sweep), n_boot=0)
    for fraction in (0.5, 1.0):
        result, d4 = depth_result(analysis, "sp", fraction, 4)
        assert d4.regret_status == "ok" and d4.regret_method == "linear"
        assert d4.regret == pytest.approx(0.049 + 0.6 * (0.144 - 0.049), abs=0.01)
        assert result.regret_diverged_at == [8, 16] and math.isnan(result.max_regret)
        assert result.max_regret_text() == "diverged at L=8, 16"
    data = json.loads((tmp_path / "out" / "transfer.json").read_text())
    sp_end = next(r for r in data["results"] if r["preset"] == "sp" and r["fraction"] == 1.0)
    assert sp_end["max_regret"] is None and sp_end["regret_diverged_at"] == [8, 16]
    assert "| diverged at L=8, 16 |" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
    "ci,verdict",
    [
        ((-0.05, 0.08), "consistent with transfer"),
        ((-0.1, 0.1), "consistent with transfer"),  # the bound itself is inside
        ((0.02, 0.08), "consistent with transfer"),  # a drift detected, smaller than the tolerance
        ((-1.131, 0.159), "inconclusive"),  # contains 0, and slopes that would not transfer
        ((-0.05, 0.12), "inconclusive"),
        ((0.017, 0.536), "does not transfer"),
        ((-0.2, -0.15), "does not transfer"),
        ((math.nan, math.nan), None),
    ],
)
def test_transfer_verdict_reads_the_slope_ci_against_the_tolerance(ci, verdict):
    from eval.transfer import SlopeFit, transfer_verdict

    assert transfer_verdict(SlopeFit(slope=0.0, ci_low=ci[0], ci_high=ci[1]), 0.1) == verdict


def test_verdicts_on_planted_sweeps_and_the_tolerance_option(tmp_path, planted, capsys):
    """Planted (4 seeds, noise 0.002): depth_mup's flat optimum has a CI well inside +-0.1
    (consistent with transfer), sp's slope -0.5 excludes 0 (does not transfer). Two seeds with
    25 times the noise: depth_mup's CI contains 0 but reaches past +-0.1 (inconclusive, though
    `ci_contains_zero`); with --slope-tolerance 1 the same CI lies inside the bound."""
    for r in planted.results:
        assert r.verdict == {"depth_mup": "consistent with transfer", "sp": "does not transfer"}[r.family.preset]
        assert r.permitted_drift == pytest.approx(0.1 * 3)  # L = 2..16: three doublings
    sweep = write_sweep(tmp_path / "noisy", make_rows(slopes={"depth_mup": 0.0}, seeds=(0, 1), noise=0.05))
    assert main(["transfer", str(sweep), "--out", str(tmp_path / "a"), "--bootstrap", "300", "--no-figures"]) == 0
    stdout = capsys.readouterr().out
    data = json.loads((tmp_path / "a" / "transfer.json").read_text())
    assert data["settings"]["slope_tolerance"] == 0.1
    for result, head in zip(data["results"], data["headline"]):
        lo, hi = result["slope"]["ci_low"], result["slope"]["ci_high"]
        assert lo <= 0.0 <= hi and (lo < -0.1 or hi > 0.1), (lo, hi)
        assert result["slope"]["ci_contains_zero"] and not result["slope"]["ci_inside_tolerance"]
        assert result["slope"]["verdict"] == head["verdict"] == "inconclusive"
        assert result["slope"]["permitted_drift_octaves"] == pytest.approx(0.3)
        assert max(-lo, hi) < 1.0
    assert stdout.count("verdict (±0.1): inconclusive") == 2
    assert "| verdict (slope CI vs ±0.1) |" in (tmp_path / "a" / "report.md").read_text()
    argv = ["transfer", str(sweep), "--out", str(tmp_path / "b"), "--bootstrap", "300", "--no-figures"]
    assert main([*argv, "--slope-tolerance", "1"]) == 0
    assert capsys.readouterr().out.count("verdict (±1): consistent with transfer") == 2
    with pytest.raises(SystemExit):
        main([*argv, "--slope-tolerance", "0"])
    assert "--slope-tolerance: '0' must be a positive number" in capsys.readouterr().err


def test_loss_gap_between_presets_at_the_deepest_depth(tmp_path):
    rows = make_rows(seeds=(0, 1, 2))
    for r in rows:  # plant: sp is 0.03 nats worse at L=16 at every LR; equal elsewhere
        if r["parametrization.preset"] == "sp" and r["model.num_layers"] == 16 and r["val_loss"] != "":
            r["val_loss"] += 0.03
    analysis = run_analysis(tmp_path, rows)
    assert [(g.fraction, g.reference.preset, g.family.preset, g.depth) for g in analysis.gaps] == [
        (0.5, "depth_mup", "sp", 16),
        (1.0, "depth_mup", "sp", 16),
    ]
    for g in analysis.gaps:
        assert g.gap == pytest.approx(0.03, abs=0.005)
        assert 0.0 < g.ci[0] <= g.gap <= g.ci[1] and g.ci[1] - g.ci[0] < 0.02

    equal = run_analysis(tmp_path / "equal", make_rows(seeds=(0, 1, 2)))
    for g in equal.gaps:
        assert g.ci[0] <= 0.0 <= g.ci[1]


def _intervals(analysis: TransferAnalysis, preset: str) -> dict:
    """Every bootstrap number of one family: per fraction the slope, drift and max-regret CIs, and per depth
    the optimum, regret and loss draws, compared bit for bit."""
    from eval.transfer import predict_at_depths

    out = {}
    for r in (r for r in analysis.results if r.family.preset == preset):
        out[r.fraction] = (
            (r.slope.ci_low, r.slope.ci_high),
            r.drift_ci,
            [(d.depth, d.opt_ci, d.regret_ci, d.opt_draws.tobytes(), d.loss_draws.tobytes()) for d in r.depths],
        )
    preds = [p for p in predict_at_depths(analysis, [64, 32]) if p.family.preset == preset]
    out["predict"] = sorted((p.fraction, p.depth, p.ci, p.regret_ci) for p in preds)
    return out


def test_a_familys_intervals_do_not_depend_on_the_other_families_or_the_row_order(tmp_path):
    # the bootstrap RNG was drawn per (family index, fraction index): `--presets sp` moved sp's KJV mid slope CI
    # from [-0.261, -0.079] to [-0.257, -0.080]; it is now keyed on the family's columns and the fraction
    rows = make_rows(slopes={"depth_mup": 0.0, "ode": 0.2, "sp": 0.5}, depths=(2, 4, 8), noise=0.02)
    full = run_analysis(tmp_path / "full", rows)
    want = _intervals(full, "sp")
    assert want[1.0][0][0] < want[1.0][0][1]  # real intervals, not empty ones
    assert all(d[1] is not None for d in want[0.5][2]) and len(want["predict"]) == 4
    selected = run_analysis(tmp_path / "selected", rows, presets=["sp"])
    alone = run_analysis(tmp_path / "alone", [r for r in rows if r["parametrization.preset"] == "sp"])
    shuffled = list(rows)
    np.random.default_rng(5).shuffle(shuffled)
    renamed = [{**r, "parametrization.preset": {"depth_mup": "z_last"}.get(r["parametrization.preset"],
               r["parametrization.preset"])} for r in shuffled]  # fmt: skip
    reordered = run_analysis(tmp_path / "reordered", renamed)  # sp is now the second family of three, not the third
    assert [f.preset for f in reordered.families] == ["ode", "sp", "z_last"]
    # a custom arm adds alpha/gamma columns, empty for sp's rows (the planner's case: which arms exist)
    custom = [{**r, "parametrization.preset": "custom", "run_id": "c-" + r["run_id"], "parametrization.alpha": 0.75}
              for r in rows if r["parametrization.preset"] == "ode"]  # fmt: skip
    with_arm = analyze(
        read_results(
            write_sweep(tmp_path / "arm", rows + custom, [*HEADER[:-4], "parametrization.alpha", *HEADER[-4:]])
        ),
        n_boot=200,
    )
    assert [f.preset for f in with_arm.families] == ["custom", "depth_mup", "ode", "sp"]
    for other in (selected, alone, reordered, with_arm):
        assert _intervals(other, "sp") == want
    # the seed still matters
    assert _intervals(run_analysis(tmp_path / "seed1", rows, boot_seed=1), "sp") != want


def test_no_gap_ci_with_one_seed(tmp_path):
    analysis = run_analysis(tmp_path, make_rows(seeds=(0,)))
    assert analysis.gaps and all(g.ci is None and "no CI" in g.note for g in analysis.gaps)


def test_noise_free_regret_is_exact_inside_the_bracket(tmp_path):
    analysis = run_analysis(tmp_path, make_rows(noise=0.0, seeds=(0,)), n_boot=0)
    _, d4 = depth_result(analysis, "sp", 1.0, 4)
    assert d4.regret_method == "quadratic"  # base optimum -9.2 lies in L=4's bracket [-10, -9]
    assert d4.regret == pytest.approx(K * 0.5**2, abs=1e-9)
    _, d2 = depth_result(analysis, "sp", 1.0, 2)
    assert d2.regret == pytest.approx(0.0, abs=1e-12)


def test_single_seed_gives_no_ci_but_a_slope(tmp_path):
    analysis = run_analysis(tmp_path, make_rows(seeds=(0,)))
    result, _ = depth_result(analysis, "sp", 1.0, L0)
    assert result.slope.slope == pytest.approx(-0.5, abs=0.05)
    assert not result.slope.ci_available and "nothing to resample" in result.slope.ci_note
    assert "nothing to resample" in notes_text(analysis)


def test_a_depth_with_one_seed_per_lr_borrows_its_familys_seed_noise(tmp_path):
    """L=16 trained with one seed per LR, L=2-8 with three (noise 0.02): L=16's optimum used to
    get a zero-width interval (its curve has no residuals, and every draw repeated it), which
    narrowed the slope's and the gap's intervals and met a width goal at 0.000. It now draws
    from the residuals pooled over L=2, 4, 8 (17 LRs x 3 seeds each: 153 residuals, df 102),
    so its interval is about sqrt(3) = 1.73 times as wide as those of L=2-8 (same noise, a third
    of the seeds; 1.91 here, averaged over both presets and fractions)."""
    from eval.goals import check_goals

    rows = [r for r in make_rows(noise=0.02, diverge_gap=None) if r["model.num_layers"] != 16 or r["run.seed"] == 0]
    analysis = run_analysis(tmp_path, rows, window=2, n_boot=1000)
    widths = np.array([[d.opt_ci[1] - d.opt_ci[0] for d in result.depths] for result in analysis.results])
    ratio = widths[:, 3].mean() / widths[:, :3].mean()
    assert 1.4 < ratio < 2.4, ratio
    for result in analysis.results:
        d16 = result.depths[3]
        assert d16.depth == 16 and d16.seed_counts == (1, 1) and result.depths[2].seed_counts == (3, 3)
        planted = planted_log2_opt(16, {"depth_mup": 0.0, "sp": 0.5}[result.family.preset])
        assert d16.opt_ci[0] < planted < d16.opt_ci[1]
        assert d16.regret_ci[1] > d16.regret_ci[0]
        assert "borrowed" in result.slope.ci_note
    where = "depth_mup | end (f=1)"
    assert (
        f"[{where}] L=16 has no seed noise of its own (one usable seed at every LR); its noise in the CI is "
        "borrowed: the residuals pooled over this family's depths with several seeds (L=2, 4, 8; 153 residuals, "
        "df 102; seed SD "
    ) in notes_text(analysis)
    # the lenders' measured seed SDs, named so a reader can judge "alike across depths": planted 0.02 at each
    sds = re.search(rf"\[{re.escape(where)}\] L=16 .*seed SD ([0-9.]+) to ([0-9.]+) nats there", notes_text(analysis))
    assert sds and 0.013 < float(sds[1]) <= float(sds[2]) < 0.027, sds  # 0.02 within 3 SE (df 34 per depth)
    assert "pooled residuals of their curve" not in notes_text(analysis)  # L=16's curve has none
    for g in analysis.gaps:
        assert g.depth == 16 and g.ci[1] - g.ci[0] > 0.01
    check = check_goals(analysis, {"deepest_opt_ci_width": 1.0})[0]
    assert check.depth == 16 and check.achieved > 0.1


def test_without_seed_noise_anywhere_every_interval_is_not_measured(tmp_path):
    """One seed everywhere: no CI for optima, slope, regrets or the gap, and a goal on them is
    'not measured', never met."""
    from eval.goals import check_goals, goal_table

    analysis = run_analysis(tmp_path, make_rows(seeds=(0,)))
    for result in analysis.results:
        assert not result.slope.ci_available and result.drift_ci is None
        assert all(d.opt_ci is None and d.regret_ci is None for d in result.depths)
    assert all(g.ci is None for g in analysis.gaps)
    checks = [c.as_dict() for c in check_goals(analysis, {"deepest_opt_ci_width": 1.0, "slope_ci_halfwidth": 0.15})]
    assert all(c["achieved"] is None and not c["met"] and not c["measured"] for c in checks)
    _, cells = goal_table(checks)
    assert {row[-1] for row in cells} == {"not measured"} and {row[-2] for row in cells} == {"no interval"}


# ----------------------------------------------------------------- robustness


def test_edge_of_grid_optimum_is_flagged(tmp_path):
    grid = tuple(
        float(x) for x in np.round(np.arange(-10.0, -6.0 + 1e-9, 0.5), 6)
    )  # the L=16 optimum (-10.7) lies below it
    analysis = run_analysis(tmp_path, make_rows(slopes={"sp": 0.5}, grid=grid), fractions=[1.0])
    _, d16 = depth_result(analysis, "sp", 1.0, 16)
    assert (d16.optimum.edge, d16.optimum.edge_reason, d16.optimum.method) == ("low", "grid", "grid")
    assert d16.optimum.log2_lr == -10.0
    _, d4 = depth_result(analysis, "sp", 1.0, 4)
    assert d4.optimum.edge is None and d4.optimum.method == "quadratic"
    text = notes_text(analysis)
    assert "sp | end (f=1) | L=16] optimum at the low edge (grid)" in text
    assert "bounds, not estimates" in text


def test_headline_marks_numbers_that_rest_on_edge_optima_or_cut_intervals(tmp_path, capsys):
    """LRs tried 2^-10.5..2^-6: sp's L=16 optimum (planted 2^-10.7) lies below them, so its
    optimum is the edge point 2^-10.5 (a bound) and its interval ends there (cut). Every headline
    number that uses it (slope, the L=16 optimum, the regret there, the gap to depth_mup) is
    marked in the table itself, with the legend; depth_mup's own numbers (bracketed at 2^-9.2)
    are not, and no number changes. Seed noise 0.0005 nats: at 0.002 sp's L=8 optimum (planted
    2^-10.2) lands on 2^-10.5 in about 5% of draws, so its interval is cut too (the old
    position-keyed draws happened to put fewer than 2.5% there)."""
    grid = tuple(float(x) for x in np.round(np.arange(-10.5, -6.0 + 1e-9, 0.5), 6))
    rows = make_rows(slopes={"depth_mup": 0.0, "sp": 0.5}, grid=grid, noise=0.0005)
    sweep = write_sweep(tmp_path / "sweep", rows)
    out = tmp_path / "out"
    assert main(["transfer", str(sweep), "--out", str(out), "--bootstrap", "200", "--no-figures"]) == 0
    stdout = capsys.readouterr().out
    sp_line = next(line for line in stdout.splitlines() if line.startswith("sp") and "end (f=1)" in line)
    assert "] †‡  drift" in sp_line
    from eval.report import HEADLINE_LEGEND, _with_ci, headline_rows, headline_table

    assert HEADLINE_LEGEND.replace("`", "") in stdout
    analysis = analyze(read_results(sweep), n_boot=200)
    rows = {(h["family"], h["fraction"]): h for h in headline_rows(analysis)}
    sp, dm = rows[("sp", 1.0)], rows[("depth_mup", 1.0)]
    assert sp["deepest_depth"] == 16 and sp["deepest_opt_log2_lr"] == -10.5
    edge, cut = ["L=16 low"], ["L=16 low"]
    assert sp["marks"]["slope"] == {"edge": edge, "cut": cut}
    assert sp["marks"]["deepest_opt"] == {"edge": edge, "cut": cut}
    assert sp["marks"]["regret_at_deepest"] == {"edge": edge, "cut": cut}  # base L=2 is bracketed
    assert sp["marks"]["loss_gap"] == {"edge": ["sp L=16 low"], "cut": ["sp L=16 low"]}
    assert all(m == {"edge": [], "cut": []} for m in dm["marks"].values())
    header, cells = headline_table([sp, dm])
    assert cells[0][2] == _with_ci(sp["slope"], sp["slope_ci"], "+.3f") + " †‡"
    assert cells[0][3] == "does not transfer †‡"  # the verdict rests on the slope
    assert cells[0][5] == "-10.50 [-10.50, -10.50] †‡"
    assert cells[0][6] == _with_ci(sp["regret_at_deepest"], sp["regret_at_deepest_ci"], ".4f") + " †‡"
    assert cells[0][7] == _with_ci(sp["loss_gap"], sp["loss_gap_ci"], "+.4f") + " †‡ (− depth_mup)"
    assert not any("†" in c or "‡" in c for c in cells[1])
    md = (out / "report.md").read_text()
    assert (
        f"| sp | end (f=1) | {cells[0][2]} | {cells[0][3]} | 16 | -10.50 [-10.50, -10.50] †‡ |" in md
        and HEADLINE_LEGEND in md
    )
    headline = json.loads((out / "transfer.json").read_text())["headline"]
    assert next(h for h in headline if h["family"] == "sp" and h["fraction"] == 1.0)["marks"] == sp["marks"]
    from study.spec import load_study
    from study.summary import render_markdown

    summary = render_markdown({"presets": {}, "transfer_headline": headline}, load_study("quick"), 1.0)
    assert f"| sp | end (f=1) | {cells[0][2]} | {cells[0][3]} | 16 |" in summary and HEADLINE_LEGEND in summary


def test_optimum_next_to_divergence_is_flagged(tmp_path):
    analysis = run_analysis(tmp_path, make_rows(slopes={"sp": 0.0}, diverge_gap=0.2, seeds=(0, 1)), fractions=[1.0])
    _, d8 = depth_result(analysis, "sp", 1.0, 8)
    # lr* = -9.2: -9.0 is stable (gap 0.2 is not > 0.2), -8.5 and up diverge, best point -9.0 has no higher neighbour
    assert (d8.optimum.edge, d8.optimum.edge_reason) == ("high", "diverged")
    assert d8.n_lr_diverged == sum(1 for x in GRID if x > LOG2_LR0 + 0.2)


def test_missing_points_and_failed_runs_are_reported(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}, seeds=(0, 1))
    keep = {-10.5, -11.0}
    for row in rows:  # at L=16 only two LRs finished; the rest failed before any eval
        if row["model.num_layers"] == 16 and math.log2(row["optimizer.lr"]) not in keep:
            row.update(status="failed", step="", val_loss="")
    analysis = run_analysis(tmp_path, rows)
    _, d16 = depth_result(analysis, "sp", 1.0, 16)
    assert d16.optimum.fallback == "few_points" and d16.optimum.method == "grid"
    assert d16.optimum.log2_lr == -10.5
    text = notes_text(analysis)
    assert "sp | end (f=1) | L=16] no quadratic fit: only 2 usable LR point(s); a quadratic fit needs 3" in text
    assert "have no loss at this eval point (failed before it, or no row)" in text
    result, _ = depth_result(analysis, "sp", 1.0, 2)
    assert result.slope.available  # the other depths still give a slope


def test_all_diverged_depth_is_named_and_does_not_crash(tmp_path):
    rows = make_rows(slopes={"depth_mup": 0.0}, seeds=(0, 1))
    for row in rows:
        if row["model.num_layers"] == 16:
            row.update(status="diverged", step="", val_loss="")
    analysis = run_analysis(tmp_path, rows)
    result, d16 = depth_result(analysis, "depth_mup", 0.5, 16)
    assert not d16.optimum.found and d16.regret_status == "no_optimum"
    assert d16.n_lr_diverged == len(GRID)
    assert "[depth_mup | mid (f=0.5) | L=16] no usable point: all 17 LR(s)" in notes_text(analysis)
    assert result.slope.n_depths == 3 and result.slope.slope == pytest.approx(0.0, abs=0.03)
    fig = plot_loss_vs_lr(analysis)
    ax = fig.axes[0]
    assert {ln.get_gid() for ln in ax.get_lines() if (ln.get_gid() or "").startswith("diverged:")} >= {"diverged:L=16"}


def test_diverged_runs_excluded_unless_asked(tmp_path):
    rows = make_rows(slopes={"sp": 0.0}, seeds=(0, 1), diverge_gap=2.6)
    for row in rows:  # a diverged run whose mid-training loss looks (deceptively) best
        if (
            row["status"] == "diverged"
            and row["fraction"] == 0.5
            and math.isclose(math.log2(row["optimizer.lr"]), -6.5)
        ):
            row["val_loss"] = 1.0
    default = run_analysis(tmp_path / "a", rows, fractions=[0.5])
    _, d = depth_result(default, "sp", 0.5, 8)
    assert d.optimum.log2_lr == pytest.approx(LOG2_LR0, abs=0.05)
    kept = run_analysis(tmp_path / "b", rows, fractions=[0.5], use_evals_before_divergence=True)
    _, d = depth_result(kept, "sp", 0.5, 8)
    assert d.optimum.log2_lr == pytest.approx(-6.5, abs=0.3)


def test_single_depth_preset_has_no_slope(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}) + make_rows(slopes={"ode": 0.0}, depths=(8,), rng_seed=7)
    analysis = run_analysis(tmp_path, rows)
    result, d8 = depth_result(analysis, "ode", 1.0, 8)
    assert d8.optimum.method == "quadratic"
    assert not result.slope.available and math.isnan(result.drift)
    assert "single depth L=8 in this family: no slope" in notes_text(analysis)
    # base_num_layers=2 was not swept for this family -> smallest depth, with a note
    assert result.base_depth == 8 and "was not swept" in notes_text(analysis)
    # its only regret is the base depth's 0 by construction: no max regret (it read "0.0000", no cost)
    assert d8.regret == 0.0 and math.isnan(result.max_regret)
    assert result.max_regret_text() == "n/a (no depth besides the base L=8)"
    from eval.report import headline_rows

    row = next(h for h in headline_rows(analysis) if h["family"] == "ode" and h["fraction"] == 1.0)
    assert row["regret_at_deepest"] is None and row["regret_at_deepest_status"] == "base_depth"
    sp = next(r for r in analysis.results if r.family.preset == "sp" and r.fraction == 1.0)
    assert sp.max_regret == max(d.regret for d in sp.depths) > 0  # a family with several depths: unchanged


def test_pending_runs_are_ignored_and_counted(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}, seeds=(0, 1))
    pending_ids = {r["run_id"] for r in rows if r["run.seed"] == 1 and r["model.num_layers"] == 8}
    for row in rows:
        if row["run_id"] in pending_ids:
            row.update(status="pending", step="", val_loss="")
    analysis = run_analysis(tmp_path, rows)
    n_runs = len({r["run_id"] for r in rows})
    assert f"{len(pending_ids)} of {n_runs} runs are pending and were ignored" in notes_text(analysis)
    _, d8 = depth_result(analysis, "sp", 1.0, 8)
    assert d8.seed_counts == (1, 1) and d8.optimum.found


def test_nonfinite_loss_of_a_completed_run_counts_as_diverged(tmp_path):
    rows = make_rows(slopes={"sp": 0.0}, depths=(2, 4), seeds=(0, 1))
    bad = next(r for r in rows if r["model.num_layers"] == 4 and r["fraction"] == 1.0 and r["run.seed"] == 1)
    bad["val_loss"] = float("nan")  # written as 'nan', as repr does
    analysis = run_analysis(tmp_path, rows, fractions=[1.0])
    _, d4 = depth_result(analysis, "sp", 1.0, 4)
    i = int(np.flatnonzero(np.isclose(d4.curve.log2_lr, math.log2(bad["optimizer.lr"])))[0])
    assert (d4.curve.n_diverged[i], d4.curve.n_seeds[i]) == (1, 1)
    assert f"recorded a nan/inf loss; treated as diverged: {bad['run_id']}" in notes_text(analysis)


def test_interval_fractions_default_to_mid_and_end(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}, depths=(2, 4), seeds=(0, 1), fractions=(0.25, 0.5, 0.75, 1.0))
    sweep = read_results(write_sweep(tmp_path / "sweep", rows))
    assert analyze(sweep, n_boot=0).fractions == [0.5, 1.0]
    assert analyze(sweep, n_boot=0, fractions="all").fractions == [0.25, 0.5, 0.75, 1.0]
    only = analyze(sweep, n_boot=0, fractions=[0.75], presets=["sp"])
    assert [r.fraction for r in only.results] == [0.75]
    with pytest.raises(AnalysisInputError, match=r"preset\(s\) \['mup'\] not in column 'parametrization.preset'"):
        analyze(sweep, presets=["mup"])


def test_base_depth_choice(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}, seeds=(0, 1))
    override = run_analysis(tmp_path / "a", rows, base_depth=8, n_boot=0)
    result, d8 = depth_result(override, "sp", 1.0, 8)
    assert result.base_depth == 8 and d8.is_base and d8.regret == pytest.approx(0.0, abs=1e-12)
    _, d2 = depth_result(override, "sp", 1.0, 2)
    assert d2.regret == pytest.approx(K * 1.0**2, abs=0.01)
    for i, row in enumerate(rows):  # runs disagree on L0 -> smallest depth
        row["parametrization.base_num_layers"] = 2 if row["model.num_layers"] < 8 else 4
        rows[i] = row
    disagree = run_analysis(tmp_path / "b", rows, n_boot=0)
    result, _ = depth_result(disagree, "sp", 1.0, 2)
    assert result.base_depth == 2 and "disagree on parametrization.base_num_layers [2, 4]" in notes_text(disagree)
    with pytest.raises(AnalysisInputError, match="--base-depth 3 is not a swept depth"):
        run_analysis(tmp_path / "c", rows, base_depth=3)


# ----------------------------------------------------------------- malformed input


def _csv_text(rows: list[dict], header: list[str] = HEADER) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[repr(v) if isinstance(v, float) else v for v in (r.get(h, "") for h in header)] for r in rows])
    return buf.getvalue()


def _edit_cell(column: str, value: str, row: int = 0):
    def edit(rows: list[dict]) -> str:
        rows[row][column] = value
        return _csv_text(rows)

    return edit


def _ragged_line_2(rows: list[dict]) -> str:
    lines = _csv_text(rows).splitlines()
    lines[1] += ",extra"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "build,expected",
    [
        (lambda rows: "", "file is empty"),
        (lambda rows: _csv_text([]), "has a header but no rows"),
        (
            lambda rows: _csv_text(rows, [h for h in HEADER if h != "optimizer.lr"]),
            "missing column(s) ['optimizer.lr']",
        ),
        (_edit_cell("optimizer.lr", "abc"), "line 2, column 'optimizer.lr': 'abc' is not a number"),
        (_edit_cell("optimizer.lr", "-0.01", row=1), "line 3, column 'optimizer.lr': '-0.01' must be a positive"),
        (_edit_cell("status", "done"), "line 2, column 'status': 'done' is not one of"),
        (_edit_cell("model.num_layers", "2.5", row=1), "line 3, column 'model.num_layers': '2.5' is not an integer"),
        (_edit_cell("fraction", "1.5", row=1), "line 3, column 'fraction': '1.5' must be in (0, 1]"),
        (_edit_cell("val_loss", "low", row=1), "line 3, column 'val_loss': 'low' is not a number"),
        (lambda rows: _csv_text(rows).split("\n", 1)[1], "line 1 (header): missing column(s)"),  # no header line
        (_ragged_line_2, "line 2: has 13 fields, the header has 12"),
    ],
)
def test_malformed_results_csv_exits_2_with_a_clear_message(tmp_path, capsys, build, expected):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0,))
    (sweep / "results.csv").write_text(build(rows))
    assert main(["transfer", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(sweep / "results.csv") in err and expected in err
    assert not (tmp_path / "out" / "transfer.json").exists()


def test_missing_file_and_inconsistent_run(tmp_path, capsys):
    assert main(["transfer", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert "results.csv: file not found" in capsys.readouterr().err
    rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0,))
    rows[1]["model.num_layers"] = 4  # same run_id, other depth on its second row
    write_sweep(tmp_path / "bad", rows)
    with pytest.raises(
        ResultsError,
        match=r"run 'sp-a1-L2-lr-9.00-s0' has different values of column 'model.num_layers' on lines \[2, 3\]",
    ):
        read_results(tmp_path / "bad")


def test_a_repeated_eval_row_exits_2_naming_the_lines(tmp_path, capsys):
    """Two rows of one run at one fraction (here with different losses: the first, 3.5, used
    to win silently) are rejected, also when the fractions differ by float noise only."""
    rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0, -8.5))
    # lines: 2 = lr -9 f0.5, 3 = lr -9 f1, 4 = lr -8.5 f0.5, 5 = lr -8.5 f1; line 6 repeats line 3
    rows.append({**rows[1], "val_loss": 3.5})
    write_sweep(tmp_path / "a", rows)
    assert main(["transfer", str(tmp_path / "a"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    assert (
        f"{tmp_path / 'a' / 'results.csv'}: lines 3 and 6: run 'sp-a1-L2-lr-9.00-s0' has two rows at fraction 1" in err
    )
    rows[-1] = {**rows[0], "fraction": 0.5 + 1e-9}  # the same eval point as line 2
    write_sweep(tmp_path / "b", rows)
    with pytest.raises(ResultsError, match=r"lines 2 and 6: run 'sp-a1-L2-lr-9.00-s0' has two rows at fraction 0.5"):
        read_results(tmp_path / "b")


def test_one_configuration_under_two_run_ids_exits_2(tmp_path, capsys):
    """A copy of a run under another ID would count as a second seed of its cell."""
    rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0, -8.5))
    rows += [{**r, "run_id": "copy"} for r in rows[:2]]  # lines 6 and 7 repeat the run on lines 2 and 3
    write_sweep(tmp_path / "sweep", rows)
    assert main(["transfer", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and not (tmp_path / "out" / "transfer.json").exists()
    assert (
        f"{tmp_path / 'sweep' / 'results.csv'}: lines 2 and 6: runs 'sp-a1-L2-lr-9.00-s0' and 'copy' have the same "
        "configuration (parametrization.preset=sp, model.num_layers=2, optimizer.lr=0.001953125, run.seed=0, "
        "parametrization.block_multiplier=1.0, parametrization.base_num_layers=2, model.hidden_size=128)"
    ) in err
    rows[-2]["run.seed"] = rows[-1]["run.seed"] = 1  # another seed: a different configuration, accepted
    write_sweep(tmp_path / "ok", rows)
    assert len(read_results(tmp_path / "ok").rows) == 6


def test_unrecorded_fraction_is_a_clear_error(tmp_path, capsys):
    write_sweep(tmp_path / "sweep", make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,)))
    assert main(["transfer", str(tmp_path / "sweep"), "--out", str(tmp_path / "o"), "--fractions", "0.25"]) == 2
    assert "fraction 0.25 is not recorded in column 'fraction'; recorded: 0.5, 1" in capsys.readouterr().err


# ----------------------------------------------------------------- figures and outputs


def test_loss_vs_lr_figure_has_one_curve_per_depth(planted):
    fig = plot_loss_vs_lr(planted)
    axes = fig.axes
    assert len(axes) == 2 * 2  # rows = presets, columns = fractions
    colours = {}
    for ax in axes:
        curves = [ln for ln in ax.get_lines() if ln.get_label().startswith("L=")]
        assert [ln.get_label() for ln in curves] == ["L=2 (base)", "L=4", "L=8", "L=16"]
        optima = [ln for ln in ax.get_lines() if (ln.get_gid() or "").startswith("optimum:")]
        assert len(optima) == len(DEPTHS)
        assert any((ln.get_gid() or "").startswith("diverged:") for ln in ax.get_lines())
        for ln in curves:
            colours.setdefault(ln.get_label(), ln.get_color())
            assert ln.get_color() == colours[ln.get_label()]  # one colour per depth in every panel
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    assert axes[0].get_ylim() == axes[1].get_ylim()  # shared y-range per row
    ymin, ymax = axes[0].get_ylim()
    best = min(d.optimum.loss for r in planted.results[:2] for d in r.depths)
    assert ymin < best < ymax and ymax < 5.0  # the basin is shown, the far-away losses are clipped


def test_optimal_lr_figure_has_one_line_per_preset_with_slope_and_ci(planted):
    fig = plot_optimal_lr_vs_depth(planted)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        labels = [ln.get_label() for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        assert len(labels) == 2 and all("slope" in lab and "95% CI" in lab for lab in labels)
        assert {lab.split(":")[0] for lab in labels} == {"depth_mup", "sp"}
        assert ax.get_xscale() == "log"


def test_block_multiplier_heatmaps(tmp_path, planted):
    assert plot_block_multiplier_heatmaps(planted) == []  # the planted sweep does not vary it
    rows = make_rows(slopes={"depth_mup": 0.0}, depths=(2, 8), seeds=(0,), block_multipliers=(0.5, 1.0, 2.0))
    analysis = run_analysis(tmp_path, rows, n_boot=0)
    assert len(analysis.families) == 3
    figures = plot_block_multiplier_heatmaps(analysis)
    assert [stem for stem, _ in figures] == ["fig_heatmap_depth_mup_f0.5", "fig_heatmap_depth_mup_f1"]
    for _, fig in figures:
        panels = [ax for ax in fig.axes if ax.get_images()]
        assert [ax.get_title() for ax in panels] == ["L=2", "L=8"]
        assert panels[0].get_images()[0].get_array().shape == (3, len(GRID))


def test_cli_writes_every_output(tmp_path, capsys):
    rows = make_rows(seeds=(0, 1))
    rows[0]["status"] = rows[1]["status"] = "pending"  # one run, both of its rows
    rows[0]["val_loss"] = rows[1]["val_loss"] = rows[0]["step"] = rows[1]["step"] = ""
    sweep = write_sweep(tmp_path / "sweep", rows)
    out = tmp_path / "out"
    assert main(["transfer", str(sweep), "--out", str(out), "--bootstrap", "50", "--fractions", "0.5", "1.0"]) == 0
    stdout = capsys.readouterr().out
    assert "sp" in stdout and "slope" in stdout
    # the intervals' method and seed counts are on stdout, not only in the report (one run is pending)
    assert stdout.splitlines()[0] == (
        "intervals: 95% percentile, 50 seed-bootstrap draws (pooled residuals of each curve, --seed-model "
        "independent, RNG seed 0); usable seeds per (depth, LR) cell: 1-2; none where a family has one seed per "
        "cell (docs/eval.md)"
    )
    data = json.loads((out / "transfer.json").read_text())
    assert data["fractions"] == [0.5, 1.0]
    assert data["counts"] == {"runs": len(rows) // 2, "pending_runs": 1, "shared_base_rows": 0}
    sp_end = next(r for r in data["results"] if r["preset"] == "sp" and r["fraction"] == 1.0)
    assert sp_end["slope"]["value"] == pytest.approx(-0.5, abs=0.03)
    assert sp_end["slope"]["ci_contains_zero"] is False
    assert [d["depth"] for d in sp_end["depths"]] == list(DEPTHS)
    assert sp_end["depths"][3]["optimum"]["log2_lr"] == pytest.approx(planted_log2_opt(16, 0.5), abs=0.06)
    assert any("pending" in w["message"] for w in data["warnings"])
    with open(out / "transfer.csv") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 2 * 2 * len(DEPTHS)  # presets x fractions x depths
    assert {row["opt_method"] for row in table} == {"quadratic"}
    md = (out / "report.md").read_text()
    assert "## Warnings" in md and "fig_loss_vs_lr.png" in md and "| sp |" in md
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2 and "pending" in page
    for stem in ("fig_loss_vs_lr", "fig_optimal_lr_vs_depth"):
        assert (out / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
        with Image.open(out / f"{stem}.png") as img:
            assert round(img.info["dpi"][0]) >= 150
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temp files behind


def test_rerunning_into_the_same_out_leaves_one_analysis(tmp_path, capsys):
    """A rerun into the same --out with --no-figures (or on a sweep without block multipliers)
    left the earlier run's figures beside the new numbers; they are removed, the user's own files
    are not, and the same command twice writes the same bytes."""
    out = tmp_path / "out"
    heatmap = make_rows(slopes={"sp": 0.5}, depths=(2, 4), seeds=(0, 1), block_multipliers=(0.5, 1.0))
    assert main(["transfer", str(write_sweep(tmp_path / "a", heatmap)), "--out", str(out), "--bootstrap", "20"]) == 0
    figures = sorted(p.name for p in out.glob("fig_*"))
    assert "fig_heatmap_sp_f1.png" in figures and "fig_loss_vs_lr.pdf" in figures
    (out / "notes.txt").write_text("mine")
    (out / "downstream.md").write_text("from an earlier sweep")
    plain = write_sweep(tmp_path / "b", make_rows(slopes={"sp": 0.5}, depths=(2, 4), seeds=(0, 1)))
    args = ["transfer", str(plain), "--out", str(out), "--bootstrap", "20", "--no-figures"]
    assert main(args) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "notes.txt", "report.html", "report.md", "transfer.csv", "transfer.json"
    ]  # fmt: skip
    first = {name: (out / name).read_bytes() for name in ("transfer.json", "transfer.csv", "report.md")}
    assert main(args) == 0
    assert {name: (out / name).read_bytes() for name in first} == first
    capsys.readouterr()


def test_cli_registry_answers_for_commands_not_built_yet(monkeypatch, capsys):
    import eval.__main__ as cli

    monkeypatch.setattr(
        cli, "SUBCOMMANDS", {"transfer": "eval.transfer_cmd", "later": "eval.not_written_yet", "bad": "eval.results"}
    )
    assert cli.main(["later", "anything", "--flag"]) == 2
    assert (
        "`python -m eval later` is not available: eval/not_written_yet.py does not exist yet" in capsys.readouterr().err
    )
    assert cli.main(["bad"]) == 2
    assert "eval/results.py does not define add_arguments and run()" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "transfer" in out and "later" in out


def test_headline_gives_slope_regret_and_gap_with_cis(planted):
    from eval.report import analysis_dict, headline_rows, headline_table

    rows = {(h["family"], h["fraction"]): h for h in headline_rows(planted)}
    assert len(rows) == 4
    sp = rows[("sp", 1.0)]
    assert sp["slope"] == pytest.approx(-0.5, abs=0.02) and sp["slope_ci"][0] <= -0.5 <= sp["slope_ci"][1]
    assert sp["deepest_depth"] == 16
    lo, hi = sp["regret_at_deepest_ci"]
    assert lo <= sp["regret_at_deepest"] <= hi and lo > 0.15  # planted 0.225
    assert sp["gap_reference"] == "depth_mup" and sp["loss_gap_ci"][0] <= 0.0 <= sp["loss_gap_ci"][1]
    assert rows[("depth_mup", 1.0)]["gap_reference"] is None
    header, cells = headline_table(list(rows.values()))
    assert all(len(c) == len(header) for c in cells)
    assert analysis_dict(planted, [])["headline"] == headline_rows(planted)


# ----------------------------------------------------------------- intervals cut by the LRs tried


def test_an_optimum_ci_cut_by_the_last_lr_tried_is_open_and_fails_its_goal(tmp_path):
    """Planted optimum 2^-9.2, tried LRs end at 2^-9.0: the bootstrap puts the optimum on the
    last LR tried, so the interval is cut there (open high), the report says so, and a width
    goal it meets by width is still not met. The same curve with 2^-8.5 tried and diverged
    for every seed ends at a real bound: not open."""
    from eval.goals import achieved_text, check_goals

    grid = tuple(x for x in GRID if x <= -9.0)
    rows = make_rows(slopes={"depth_mup": 0.0}, grid=grid, fractions=(1.0,), noise=0.02, diverge_gap=None)
    analysis = run_analysis(tmp_path / "cut", rows, window=2)
    _, d = depth_result(analysis, "depth_mup", 1.0, 16)
    assert d.open_ends == ("high",) and d.opt_ci[1] == -9.0
    assert "ends on the highest LR tried (log2 lr -9) and nothing past it was tried" in notes_text(analysis)
    check = next(c for c in check_goals(analysis, {"deepest_opt_ci_width": 5.0}))
    assert check.within_target and not check.met and check.open == ("L=16 high",)
    assert achieved_text(check.as_dict()).endswith("(CI cut by the LRs tried: L=16 high)")

    grid = tuple(x for x in GRID if x <= -8.5)
    rows = make_rows(slopes={"depth_mup": 0.0}, grid=grid, fractions=(1.0,), noise=0.02, diverge_gap=0.6)
    analysis = run_analysis(tmp_path / "bound", rows, window=2)
    _, d = depth_result(analysis, "depth_mup", 1.0, 16)
    assert d.n_lr_diverged == 1 and d.opt_ci[1] == -9.0 and d.open_ends == ()
    assert check_goals(analysis, {"deepest_opt_ci_width": 5.0})[0].met


@pytest.mark.parametrize(
    "statuses,why",
    [(("failed",) * 3, "missing"), (("pending",) * 3, "pending"), (("diverged", "diverged", "failed"), "missing")],
)
def test_an_end_next_to_an_lr_without_a_usable_loss_that_did_not_diverge_is_open(tmp_path, statuses, why):
    """The same cut curve (planted optimum 2^-9.2, CI upper end on 2^-9.0), now with 2^-8.5 and
    2^-8.0 tried past it: 2^-8.0 diverged for every seed, 2^-8.5 has no usable loss because its
    runs failed, are pending, or one of three failed where two diverged. Only an LR where every
    seed diverged bounds the optimum, so the end stays open (it used to count as bounded because
    a diverged LR lay further out) and the width goal is not met."""
    from eval.goals import check_goals

    grid = tuple(x for x in GRID if x <= -8.0)
    rows = make_rows(slopes={"depth_mup": 0.0}, grid=grid, fractions=(1.0,), noise=0.02, diverge_gap=1.1)
    for row in rows:
        if math.log2(row["optimizer.lr"]) == -8.5:
            row.update(status=statuses[row["run.seed"]], step="", val_loss="")
    analysis = run_analysis(tmp_path, rows, window=2)
    _, d = depth_result(analysis, "depth_mup", 1.0, 16)
    assert d.opt_ci[1] == -9.0 and d.beyond_end("high") == (-8.5, why)
    assert d.open_ends == ("high",)
    assert (
        "[depth_mup | end (f=1) | L=16] the optimum's CI ends on the highest usable LR (log2 lr -9) and the next LR "
        "tried past it (log2 lr -8.5) has no usable loss because its runs "
    ) in notes_text(analysis)
    check = check_goals(analysis, {"deepest_opt_ci_width": 5.0})[0]
    assert check.within_target and not check.met and check.open == ("L=16 high",)


def test_keep_depths_notes_only_what_it_leaves_out(tmp_path):
    """--depths (and a study passing its own depths) says "only depths ... analysed" only when
    a swept depth is left out; listing every swept depth keeps the sweep as it is, unnoted."""
    from eval.results import keep_depths

    sweep = read_results(write_sweep(tmp_path / "sweep", make_rows(seeds=(0,))))
    every = keep_depths(sweep, list(DEPTHS))
    assert every is sweep and not any("only depths" in w for w in every.warnings)
    short = keep_depths(sweep, list(DEPTHS[:-1]))
    assert f"only depths {list(DEPTHS[:-1])} of {list(DEPTHS)} analysed (--depths)" in short.warnings
    assert sorted(short.rows["depth"].unique()) == list(DEPTHS[:-1])


def test_a_preset_without_its_base_depth_is_pointed_at_the_shared_base(tmp_path):
    """A study trains L0 once, under sp: without --shared-base, depth_mup falls back to its
    smallest depth, and the warning names the option that uses sp's L0 runs."""
    rows = [r for r in make_rows(seeds=(0,)) if r["parametrization.preset"] == "sp" or r["model.num_layers"] != L0]
    text = notes_text(run_analysis(tmp_path, rows, n_boot=0))
    smallest = sorted(DEPTHS)[1]
    assert (
        f"[depth_mup | end (f=1)] parametrization.base_num_layers={L0} was not swept (depths {sorted(DEPTHS)[1:]}); "
        f"using the smallest depth L={smallest}; sp has runs at L={L0}: `--shared-base sp` uses them"
    ) in text
    assert "[sp | end (f=1)] parametrization.base_num_layers" not in text


def test_a_study_out_dir_given_for_its_sweep_is_pointed_at_the_sweep(tmp_path):
    write_sweep(tmp_path / "out" / "sweep", make_rows(seeds=(0,)))
    with pytest.raises(ResultsError, match=r"out/results.csv: file not found; .*out/sweep/results.csv is there: give"):
        read_results(tmp_path / "out")


def test_ten_thousand_runs_are_checked_without_a_loop_over_runs(tmp_path, monkeypatch):
    # read_results checked each run's key columns with a pandas nunique per run and key (4.6 s of
    # eval transfer's 12 s over 10000 runs, benchmarks/sweep_scale.py); now one groupby does.
    import pandas as pd

    rows = make_rows(seeds=tuple(range(74)), diverge_gap=None)  # 2 presets x 4 depths x 17 LRs x 74 seeds
    calls = []
    nunique = pd.Series.nunique
    monkeypatch.setattr(pd.Series, "nunique", lambda *a, **k: calls.append(1) or nunique(*a, **k))
    sweep = read_results(write_sweep(tmp_path / "ok", rows))
    assert len(sweep.rows) == 20128 and sweep.rows["run_id"].nunique() == 10064
    assert len(calls) < 20  # was 80513: one for each of 8 columns of each of the 10064 runs
    rows[-1]["model.hidden_size"] = 256  # the last run's second row disagrees with its first
    with pytest.raises(ResultsError) as bad:
        read_results(write_sweep(tmp_path / "bad", rows))
    assert str(bad.value) == (
        f"{tmp_path / 'bad' / 'results.csv'}: run '{rows[-1]['run_id']}' has different values of column "
        "'model.hidden_size' on lines [20128, 20129]: [128, 256]"
    )


def test_equal_optima_print_no_signed_zero(tmp_path, capsys):
    """Optima planted at log2 LR -6 at L = 4, 8, 16 (loss 3 + 0.1 (log2 lr + 6)^2, seeds -/+ 0.01:
    the parabola's vertex is exactly -6 at every depth). The least-squares slope is 0 exactly
    (``eval.transfer.depth_slopes``; np.polyfit over log2 L = 2, 3, 4 gave -9.4e-16), and every
    printed text (stdout, report.md, report.html, the figure's legend) says +0.000. Before: 'slope -0.000'. eval dynamics' table the
    same: update_ratio 0.01 at every depth gives an exponent of -5.6e-16, printed +0.000."""
    import math

    from eval.__main__ import main
    from eval.outputs import number
    from eval.plots import slope_legend
    from eval.results import read_results
    from eval.transfer import analyze
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    lines = [",".join(["run_id", *CANONICAL_KEYS, *TAIL_COLUMNS])]
    for L in (4, 8, 16):
        for x in (-7, -6, -5):
            for seed, offset in ((0, -0.01), (1, 0.01)):
                loss = 3.0 + 0.1 * (x + 6) ** 2 + offset
                lines.append(f"L{L}-x{x}-s{seed},depth_mup,{L},{2.0**x!r},{seed},1.0,4,64,completed,40,1.0,{loss!r}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    assert main(["transfer", str(tmp_path), "--out", str(tmp_path / "out"), "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    assert "slope +0.000 [" in printed and "-0.000" not in printed
    result = json.loads((tmp_path / "out" / "transfer.json").read_text())["results"][0]
    assert result["slope"]["value"] == 0.0  # the value itself (np.polyfit: -9.4e-16)
    for name in ("report.md", "report.html"):
        text = (tmp_path / "out" / name).read_text()
        assert "+0.000" in text and "-0.000" not in text and "-0.00 " not in text, name
    (r,) = analyze(read_results(tmp_path), fractions=[1.0], n_boot=0).results
    assert r.slope.slope == 0.0 and slope_legend(r) == "depth_mup: slope +0.000 (no CI)"
    assert [number(v, s) for v, s in ((-0.0, "+.3f"), (-4e-4, ".3f"), (-6e-4, ".3f"), (-1e-20, ".3g"))] == [
        "+0.000",
        "0.000",
        "-0.001",
        "-1e-20",
    ]
    from eval.dynamics import markdown

    row = {"family": "sp", "quantity": "update_ratio", "fraction": 1.0, "value": -5.6e-16, "ci": [-0.01, -1e-17],
           "expected": -0.0, "depths": [4, 8, 16]}  # fmt: skip
    assert "| +0.000 [-0.010, +0.000] | +0.000 |" in markdown({"exponents": [row]})
    assert math.copysign(1.0, row["expected"]) == -1.0  # the value is left as it is


def test_lrs_are_written_as_the_table_has_them_and_a_zero_slope_is_zero(tmp_path):
    """LRs 0.0039, 0.0156, 0.0625 (losses 3.2, 3.0, 3.3 at L = 1, 2, 8; two seeds -/+ 0.01): every
    depth's optimum is the quadratic's vertex; the best grid point and each curve point carry the
    LR as results.csv wrote it (0.0156), not 2^log2(0.0156) = 0.015600000000000001 (before). With
    optima equal at every depth the slope is 0 exactly: each row is taken relative to its first
    value (``depth_slopes``); centring on the mean left 4.2e-32 at log2 LR log2(0.00391) over
    L = 1, 2, 8, and np.polyfit -1e-15. A CI end that near 0 contains 0 in the verdict, the
    report's column and transfer.json alike (before: [-1e-16, -1e-17], printed [+0.000, +0.000],
    read "no")."""
    import math

    from eval.__main__ import main
    from eval.report import write_reports
    from eval.results import read_results
    from eval.transfer import SlopeFit, analyze, depth_slopes, transfer_verdict
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    assert 2.0 ** math.log2(0.0156) == 0.015600000000000001
    lines = [",".join(["run_id", *CANONICAL_KEYS, *TAIL_COLUMNS])]
    for L in (1, 2, 8):
        for lr, loss in ((0.0039, 3.2), (0.0156, 3.0), (0.0625, 3.3)):
            for seed, offset in ((0, -0.01), (1, 0.01)):
                lines.append(f"L{L}-{lr}-s{seed},depth_mup,{L},{lr},{seed},1.0,1,64,completed,40,1.0,{loss + offset!r}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    assert main(["transfer", str(tmp_path), "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-figures"]) == 0
    (result,) = json.loads((tmp_path / "out" / "transfer.json").read_text())["results"]
    assert [d["best_grid"]["lr"] for d in result["depths"]] == [0.0156] * 3
    assert [c["lr"] for c in result["depths"][0]["curve"]] == [0.0039, 0.0156, 0.0625]

    x = np.log2([1, 2, 8])
    y = np.full((2, 3), math.log2(0.00391))
    xc = x - x.mean()
    assert ((y - y.mean(axis=1, keepdims=True)) @ xc / (xc @ xc))[0] == pytest.approx(4.2e-32, rel=0.01)  # the old way
    assert depth_slopes(x, y).tolist() == [0.0, 0.0]
    assert depth_slopes(x, [[1.0, 2.0, 4.0]])[0] == pytest.approx(np.polyfit(x, [1.0, 2.0, 4.0], 1)[0], abs=1e-14)

    near = SlopeFit(slope=-1e-16, n_depths=3, ci_low=-1e-16, ci_high=-1e-17)
    assert near.ci_contains_zero is True and transfer_verdict(near, 0.1) == "consistent with transfer"
    wide = SlopeFit(slope=0.3, n_depths=3, ci_low=1e-16, ci_high=0.6)
    assert wide.ci_contains_zero is True and transfer_verdict(wide, 0.1) == "inconclusive"
    apart = SlopeFit(slope=0.3, n_depths=3, ci_low=4e-4, ci_high=0.6)  # prints [+0.000, +0.600]: excludes 0
    assert apart.ci_contains_zero is False and transfer_verdict(apart, 0.1) == "does not transfer"
    analysis = analyze(read_results(tmp_path), fractions=[1.0], n_boot=0)
    analysis.results[0].slope.ci_low, analysis.results[0].slope.ci_high = -1e-16, -1e-17
    write_reports(tmp_path / "out", analysis, [])
    summary = (tmp_path / "out" / "report.md").read_text().split("## Summary")[1]
    row = next(line for line in summary.splitlines() if line.startswith("| depth_mup"))
    assert "[+0.000, +0.000] | yes |" in row


def test_lr_labels_are_the_lr_as_the_table_has_it(tmp_path, monkeypatch):
    """`eval loss-curves` labelled each LR 2^{log2 lr:.3g}: 0.0156 read "lr 2^-6" (2^-6 = 0.015625,
    another LR of the grid). Now eval.outputs.lr_text: the table's value, and its power of two only
    where it is one exactly."""
    import eval.plots
    from eval.loss_curves import RunCurve, plot
    from eval.outputs import lr_text

    assert lr_text(0.0156) == "0.0156"
    assert lr_text(0.015625) == "0.015625 (2^-6)"
    assert lr_text(0.001953125) == "0.001953125 (2^-9)"
    assert lr_text(0.003) == "0.003"
    assert lr_text(2**-9.5) == repr(2**-9.5)  # a half power: no exponent claimed

    shown = {}

    def keep(fig, out, name, dpi):
        shown.update({label: True for ax in fig.axes for label in ax.get_legend_handles_labels()[1]})
        return []

    monkeypatch.setattr(eval.plots, "save_figure", keep)
    rows = [{"kind": "train", "step": s, "loss": 5.0 - s} for s in (1, 2, 3)]
    plot([RunCurve("a", 2, 0.0156, rows), RunCurve("b", 2, 0.015625, rows), RunCurve("c", 2, None, rows)], tmp_path)
    assert sorted(shown) == ["c", "lr 0.0156", "lr 0.015625 (2^-6)"]  # before: "lr 2^-6" twice

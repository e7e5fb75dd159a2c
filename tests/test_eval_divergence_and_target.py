"""Seeds that diverge where others finish, and the predicted optimal LR at a target depth.

Planted answers: hand-computed cell means with diverged seeds counted at the curve's worst
finished loss; planted sweeps (tests/test_eval_transfer.py) whose optimum falls ``s`` octaves
per depth doubling, so the optimum at an unseen depth is known.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from eval.__main__ import main
from eval.results import read_results
from eval.seed_model import curve_means
from eval.transfer import analyze, predict_at_depths
from tests.test_eval_transfer import make_rows, planted_log2_opt, write_sweep


def test_diverged_seeds_count_at_the_curves_worst_finished_loss():
    """Cell means by hand: 2 finished + 1 diverged -> (l1 + l2 + cap) / 3, cap = the worst
    finished seed loss of the curve; cells with no divergence and all-diverged cells unchanged."""
    losses = [np.array([5.4]), np.array([5.0, 5.1]), np.array([4.9]), np.array([])]
    seeds = [np.array([0]), np.array([0, 1]), np.array([0]), np.array([], dtype=int)]
    diverged = [0, 1, 2, 3]
    fit = curve_means(losses, seeds, "independent", diverged)
    cap = 5.4
    np.testing.assert_allclose(fit.means[:3], [5.4, (5.0 + 5.1 + cap) / 3, (4.9 + 2 * cap) / 3])
    assert np.isnan(fit.means[3]) and fit.cap == cap
    np.testing.assert_allclose(fit.survivor_means[:3], [5.4, 5.05, 4.9])
    # without the counts: survivors only, as before
    np.testing.assert_allclose(curve_means(losses, seeds, "independent").means[:3], [5.4, 5.05, 4.9])


def test_bootstrap_redraws_how_many_seeds_diverge():
    """A cell where 1 of 3 seeds diverged: in a draw all 3 diverge with probability (1/3)^3
    (the cell is then unusable), and the draws' mean is the counted mean."""
    losses = [np.array([5.2, 5.25, 5.15]), np.array([5.0, 5.02]), np.array([5.3, 5.28, 5.33])]
    seeds = [np.array([0, 1, 2]), np.array([0, 1]), np.array([0, 1, 2])]
    fit = curve_means(losses, seeds, "independent", [0, 1, 0])
    draws = fit.resample(20000, np.random.default_rng(0))
    unusable = np.isnan(draws[:, 1]).mean()
    assert unusable == pytest.approx(1 / 27, abs=0.006)
    assert np.nanmean(draws[:, 1]) == pytest.approx(fit.means[1], abs=0.01)
    assert not np.isnan(draws[:, [0, 2]]).any()


def test_a_partly_diverged_lr_is_not_the_optimum_because_of_its_survivors(tmp_path):
    """The LR right above the planted optimum loses 2 of its 3 seeds, and its survivor happens
    to be the lowest loss of the curve: counted only by its survivor it would be the optimum;
    counted with its diverged seeds, the optimum stays in the stable basin."""
    rows = make_rows(slopes={"sp": 0.0}, depths=(2, 4), fractions=(1.0,), noise=0.0, diverge_gap=None)
    x_opt = planted_log2_opt(4, 0.0)  # -9.2: between grid points -9.5 and -9.0
    unstable = -8.5
    for r in rows:
        if r["model.num_layers"] == 4 and math.isclose(math.log2(r["optimizer.lr"]), unstable):
            if r["run.seed"] < 2:
                r.update(status="diverged", val_loss="", step="")
            else:
                r["val_loss"] -= 0.2  # the lucky survivor
    analysis = analyze(read_results(write_sweep(tmp_path / "s", rows)), n_boot=0)
    opt = next(d for d in analysis.results[0].depths if d.depth == 4).optimum
    assert opt.log2_lr < unstable - 0.25 and abs(opt.log2_lr - x_opt) < 0.5, opt
    # the survivor alone (the diverged runs dropped, as the analysis did before) wins the curve
    survivors = [r for r in rows if r["status"] != "diverged"]
    before = analyze(read_results(write_sweep(tmp_path / "v", survivors)), n_boot=0)
    assert next(d for d in before.results[0].depths if d.depth == 4).optimum.log2_lr > unstable - 0.25
    assert "each counts at this curve's worst finished loss" in "\n".join(str(n) for n in analysis.notes)


def test_divergence_outside_the_fit_window_leaves_the_optimum_unchanged(tmp_path):
    """Half the runs 1.5-2.5 octaves above the optimum diverge at random: the fitted optima
    are exactly those of the same sweep without those divergences (no bias), and the intervals
    still cover the planted optimum."""
    rng = np.random.default_rng(7)
    covered = cells = 0
    for rep in range(6):
        rows = make_rows(fractions=(1.0,), noise=0.02, rng_seed=rep)
        clean = analyze(read_results(write_sweep(tmp_path / f"c{rep}", rows)), n_boot=200, window=2)
        slope = {"sp": 0.5, "depth_mup": 0.0}
        for r in rows:
            gap = math.log2(r["optimizer.lr"]) - planted_log2_opt(
                r["model.num_layers"], slope[r["parametrization.preset"]]
            )
            if 1.5 <= gap <= 2.5 and r["status"] == "completed" and rng.random() < 0.5:
                r.update(status="diverged", val_loss="", step="")
        noisy = analyze(read_results(write_sweep(tmp_path / f"d{rep}", rows)), n_boot=200, window=2)
        for a, b in zip(clean.results, noisy.results):
            for da, db in zip(a.depths, b.depths):
                assert db.optimum.log2_lr == pytest.approx(da.optimum.log2_lr, abs=1e-12)
                truth = planted_log2_opt(db.depth, slope[b.family.preset])
                covered += db.opt_ci[0] <= truth <= db.opt_ci[1]
                cells += 1
    assert covered / cells >= 0.9, (covered, cells)


# ---------------------------------------------------------------- optimal LR at a target depth


def test_target_depth_prediction_covers_a_planted_optimum_at_an_unseen_depth(tmp_path):
    """Sweeps of depths 2-16, planted slopes 0 and -0.5: the predicted optimum at L=64 (two
    doublings past the sweep) lies within its 95% interval in >= 90% of repetitions, and the
    regret of the L=2 LR there is the planted curvature x the planted shift squared."""
    covered, n, regrets = 0, 0, []
    grid = tuple(float(x) for x in np.arange(-11.0, -7.5 + 1e-9, 0.5))
    for rep in range(12):
        rows = make_rows(depths=(2, 4, 8, 16), fractions=(1.0,), noise=0.03, grid=grid, diverge_gap=None, rng_seed=rep)
        analysis = analyze(read_results(write_sweep(tmp_path / f"r{rep}", rows)), n_boot=300, boot_seed=rep, window=2)
        for p in predict_at_depths(analysis, [64]):
            slope = 0.5 if p.family.preset == "sp" else 0.0
            truth = planted_log2_opt(64, slope)
            assert p.extrapolated and p.ci is not None
            covered += p.ci[0] <= truth <= p.ci[1]
            n += 1
            if slope:
                regrets.append(p.regret)
    assert covered / n >= 0.9, (covered, n)
    # planted regret of the L=2 optimum at L=64: 0.1 * (0.5 * 5)^2 = 0.625 nats
    assert np.median(regrets) == pytest.approx(0.625, rel=0.25), regrets


def test_target_depth_on_the_command_line(tmp_path, capsys):
    rows = make_rows(depths=(2, 4, 8), fractions=(1.0,), noise=0.01)
    sweep = write_sweep(tmp_path / "s", rows)
    code = main(
        ["transfer", str(sweep), "--out", str(tmp_path / "o"), "--no-figures", "--bootstrap", "100",
         "--target-depth", "8", "64", "--goals", "slope_ci_halfwidth=0.5", "deepest_opt_ci_width=0.01"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "L=64: optimal log2 LR" in out and "(extrapolated)" in out
    assert "goal slope_ci_halfwidth sp end (f=1): target 0.5" in out and "NOT met" in out
    import json

    report = json.loads((tmp_path / "o" / "transfer.json").read_text())
    preds = report["target_depth_predictions"]
    assert {(p["family"], p["target_depth"]) for p in preds} == {(f, d) for f in ("sp", "depth_mup") for d in (8, 64)}
    assert {g["goal"] for g in report["goals"]} == {"slope_ci_halfwidth", "deepest_opt_ci_width"}
    md = (tmp_path / "o" / "report.md").read_text()
    assert "## Goals" in md and "## Predicted optimal LR at target depths" in md
    # leave the deepest depth out and predict it
    code = main(
        ["transfer", str(sweep), "--out", str(tmp_path / "o3"), "--no-figures", "--bootstrap", "100",
         "--depths", "2", "4", "--target-depth", "8"]
    )  # fmt: skip
    left_out = json.loads((tmp_path / "o3" / "transfer.json").read_text())
    assert code == 0 and {d["depth"] for r in left_out["results"] for d in r["depths"]} == {2, 4}
    sp = next(p for p in left_out["target_depth_predictions"] if p["family"] == "sp")
    assert sp["extrapolated"] and sp["log2_lr"] == pytest.approx(planted_log2_opt(8, 0.5), abs=0.3)
    assert main(["transfer", str(sweep), "--out", str(tmp_path / "o4"), "--depths", "3"]) == 2
    with pytest.raises(SystemExit) as err:  # argparse: usage error, exit 2, naming the goal
        main(["transfer", str(sweep), "--out", str(tmp_path / "o2"), "--goals", "speed=1"])
    assert err.value.code == 2 and "unknown goal 'speed'" in capsys.readouterr().err


def test_a_target_depth_that_was_swept_is_compared_with_its_measured_optimum(tmp_path, capsys):
    """--target-depth at a swept depth used to print the line's reading alone. Planted, noise-free:
    sp's optima at L=2, 4, 16 fall 0.5 octave per doubling (-9.2, -9.7, -10.7) and L=8's is
    -9.2 (not on the line): the line there and the measured optimum are both given, and their
    difference is the hand-computed least-squares reading minus -9.2."""
    rows = make_rows(slopes={"sp": 0.5}, depths=(2, 4, 16), seeds=(0, 1), fractions=(1.0,), noise=0.0)
    rows += make_rows(slopes={"sp": 0.0}, depths=(8,), seeds=(0, 1), fractions=(1.0,), noise=0.0)
    sweep = write_sweep(tmp_path / "s", rows)
    out = tmp_path / "o"
    code = main(["transfer", str(sweep), "--out", str(out), "--no-figures", "--bootstrap", "50",
                 "--target-depth", "8", "16", "64"])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0, text
    slope, intercept = np.polyfit([1.0, 2.0, 3.0, 4.0], [-9.2, -9.7, -9.2, -10.7], 1)
    line_at_8 = intercept + 3 * slope  # -9.9 by hand: slope -0.4, intercept -8.7
    assert line_at_8 == pytest.approx(-9.9)
    import json

    preds = {p["target_depth"]: p for p in json.loads((out / "transfer.json").read_text())["target_depth_predictions"]}
    p8, p16, p64 = preds[8], preds[16], preds[64]
    assert p8["measured"] and p8["log2_lr"] == pytest.approx(line_at_8, abs=1e-9)
    assert p8["measured_log2_lr"] == pytest.approx(-9.2, abs=1e-9)
    assert p8["line_minus_measured_log2_lr"] == pytest.approx(-0.7, abs=1e-9)
    assert p8["measured_method"] == "quadratic" and p8["measured_ci_log2_lr"] == pytest.approx([-9.2, -9.2])
    assert p8["measured_regret"] == pytest.approx(0.0, abs=1e-12)  # L=2's optimum is L=8's
    # L=16: the L=2 LR (-9.2) lies outside L=16's fitted bracket [-11.2, -10.2], so the measured regret is the
    # linear interpolation between grid points -9.5 (0.1 * 1.2^2) and -9.0 (0.1 * 1.7^2) at -9.2
    assert p16["measured_regret"] == pytest.approx(0.144 + (0.289 - 0.144) * 0.6, abs=1e-9)
    assert not p64["measured"] and p64["measured_log2_lr"] is None and p64["extrapolated"]
    # the line's interval carries the optima's scatter about it (lack of fit), the measurement only seed noise (0)
    line8 = next(line for line in text.splitlines() if "L=8: optimal log2 LR" in line)
    assert line8.startswith("sp                           end (f=1)    L=8: optimal log2 LR -9.90 [")
    assert line8.endswith(
        "(lr 0.00105); regret of the L=2 LR there 0.0490" + line8.split("0.0490", 1)[1].split(";")[0] + "; "
        "measured there: optimal log2 LR -9.20 [-9.20, -9.20] (quadratic), regret of the L=2 LR 0.0000 "
        "[0.0000, 0.0000]; the line is 0.70 octave below it"
    )
    md = (out / "report.md").read_text()
    assert "| -9.20 [-9.20, -9.20] (quadratic); 0.0000 [0.0000, 0.0000] |" in md and "| not swept |" in md


def test_predicted_regret_interval_starts_at_zero_where_the_base_lr_is_consistent_with_the_optimum(tmp_path):
    """depth_mup planted flat (the L=2 optimum is every depth's): the shift between the base
    optimum and the prediction has an interval holding 0, so the regret's interval starts at 0
    ("consistent with no regret") and holds its point. Percentiles of the squared shift alone
    started above 0 (none of these reached it before; on a user's sweep the point regret fell
    below its own interval: 0.0029 [0.0073, 0.3247]). sp planted at -0.5 octave per doubling is
    2.5 octaves off at L=64: its interval stays clear of 0."""
    for rep in range(2):
        rows = make_rows(depths=(2, 4, 8, 16), fractions=(1.0,), noise=0.03, diverge_gap=None, rng_seed=rep,
                         grid=tuple(float(x) for x in np.arange(-11.0, -7.5 + 1e-9, 0.5)))  # fmt: skip
        analysis = analyze(read_results(write_sweep(tmp_path / f"r{rep}", rows)), n_boot=300, boot_seed=rep, window=2)
        for p in predict_at_depths(analysis, [16, 64]):
            low, high = p.regret_ci
            assert low <= p.regret <= high, (p.family.preset, p.depth, p.regret, p.regret_ci)
            if p.family.preset == "depth_mup":
                assert low == 0.0
            elif p.depth == 64:
                assert low > 0.1, p.regret_ci


@pytest.mark.parametrize("keep", [False, True])
def test_each_run_is_classified_once_per_fraction(keep):
    """build_curves' classes at one depth, on planted rows (rows in shuffled order): at lr 2^-8
    seeds 0-5 are usable (3.0), diverged with a loss (3.5: usable only with
    use_evals_before_divergence), diverged with no row, non-finite (nan recorded by a completed
    run), missing (a completed run's empty cell) and missing (a failed run with no row at 1.0);
    at lr 2^-7 one usable seed (seed 3, 2.5)."""
    from eval.curves import build_curves
    from eval.results import results_from_records

    def row(seed, lr, status, frac, loss):
        return {"run_id": f"s{seed}-{lr}", "parametrization.preset": "depth_mup", "model.num_layers": 4,
                "optimizer.lr": 2.0**lr, "run.seed": seed, "parametrization.block_multiplier": 1.0,
                "parametrization.base_num_layers": 2, "model.hidden_size": 64, "status": status,
                "step": None if loss is None else 10, "fraction": frac, "val_loss": loss}  # fmt: skip

    records = [
        row(5, -8, "failed", 0.5, 3.9),
        row(3, -7, "completed", 1.0, 2.5),
        row(2, -8, "diverged", 0.5, 4.0),
        row(1, -8, "diverged", 1.0, 3.5),
        row(4, -8, "completed", 1.0, None),
        row(0, -8, "completed", 1.0, 3.0),
        row(3, -8, "completed", 1.0, "nan"),
    ]
    curves = build_curves(results_from_records("planted.csv", records), [1.0], use_evals_before_divergence=keep)
    ((curve,),) = curves.curves.values()
    assert curve.log2_lr.tolist() == [-8.0, -7.0]
    assert [v.tolist() for v in curve.seed_losses] == [[3.0, 3.5] if keep else [3.0], [2.5]]
    assert [v.tolist() for v in curve.seed_ids] == [[0, 1] if keep else [0], [3]]
    assert curve.n_diverged.tolist() == [2 if keep else 3, 0] and curve.n_missing.tolist() == [2, 0]
    assert curve.diverged_run_ids == ([] if keep else ["s1--8"]) + ["s2--8", "s3--8"]
    assert curve.nonfinite_run_ids == ["s3--8"] and curve.missing_run_ids == ["s4--8", "s5--8"]

"""The README's study headline is what ``eval transfer`` computes from the committed results.

Each study the README reports has its results.csv under docs/studies/<study>/; this test
recomputes the headline table (slope, optimum and regret at L=32, loss gap, with CIs) with
the README's command settings and checks every row is in the README as printed, so a rerun
study or a changed analysis cannot leave the README quoting numbers nobody can recompute.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.report import headline_rows, mark_text
from eval.results import read_results, share_base_depth
from eval.transfer import analyze

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ("kjv", "sotu")
# docs/studies/<dir> -> the first cell of its rows in the README (fig10: its linear1_abs half),
# the README command's --fit-window, and the presets the study compares
STUDIES = {
    "kjv": ("kjv", 2, {"sp", "depth_mup"}),
    "sotu": ("sotu", 2, {"sp", "depth_mup"}),
    "fig10_linear1_abs": ("kjv linear1_abs", 2, {"sp", "depth_mup"}),
    "gpu_h100": ("h100", 1, {"sp", "depth_mup", "ode"}),
}


def _num(value: float, fmt: str) -> str:
    return format(value, fmt).replace("-", "−")


def _ci(value: float, ci: list[float], fmt: str) -> str:
    return f"{_num(value, fmt)} [{_num(ci[0], fmt)}, {_num(ci[1], fmt)}]"


@pytest.mark.parametrize("study", STUDIES)
def test_the_readme_headline_is_recomputed_from_the_committed_results(study):
    # python -m eval transfer docs/studies/<study>/results.csv --out DIR --fit-window W --shared-base sp
    label, window, presets = STUDIES[study]
    sweep = share_base_depth(read_results(ROOT / "docs" / "studies" / study / "results.csv"), "sp")
    analysis = analyze(sweep, window=window, n_boot=1000, boot_seed=0)
    readme = (ROOT / "README.md").read_text().splitlines()
    rows = headline_rows(analysis)
    assert {r["family"] for r in rows} == presets and all(r["deepest_depth"] == 32 for r in rows)
    for r in rows:
        fraction = {0.5: "mid", 1.0: "end"}[r["fraction"]]
        marks = {key: mark_text(m) for key, m in r["marks"].items()}  # † a bound, ‡ a cut interval
        gap = _ci(r["loss_gap"], r["loss_gap_ci"], "+.3f") + marks["loss_gap"] if r["loss_gap"] is not None else ""
        regret = r["regret_at_deepest"]
        cells = [
            label,
            r["family"],
            fraction,
            _ci(r["slope"], r["slope_ci"], "+.3f") + marks["slope"],
            r["verdict"],
            _ci(r["deepest_opt_log2_lr"], r["deepest_opt_ci"], ".2f") + marks["deepest_opt"],
            _ci(regret, r["regret_at_deepest_ci"], ".3f") + marks["regret_at_deepest"]
            if regret is not None
            else "(not measured)",
            gap,
        ]
        line = "| " + " | ".join(cells) + " |"
        assert line.replace("|  |", "| |") in readme, f"README lacks the recomputed row:\n{line}"


@pytest.mark.parametrize("corpus", CORPORA)
def test_the_readme_leave_deepest_out_check_is_recomputed(corpus):
    # ... --depths 2 4 8 16 --target-depth 32, against the full study's L=32 optimum
    from eval.results import keep_depths
    from eval.transfer import predict_at_depths

    sweep = share_base_depth(read_results(ROOT / "docs" / "studies" / corpus / "results.csv"), "sp")
    full = {(r["family"], r["fraction"]): r for r in headline_rows(analyze(sweep, window=2, n_boot=1000, boot_seed=0))}
    short = analyze(keep_depths(sweep, [2, 4, 8, 16]), window=2, n_boot=1000, boot_seed=0)
    readme = (ROOT / "README.md").read_text().splitlines()
    for p in predict_at_depths(short, [32]):
        fraction = {0.5: "mid", 1.0: "end"}[p.fraction]
        measured = full[(p.family.label, p.fraction)]["deepest_opt_log2_lr"]
        inside = p.ci[0] <= measured <= p.ci[1]
        prefix = f"| {corpus} | {p.family.label} | {fraction} | {_ci(p.log2_lr, list(p.ci), '.2f')} | {_num(measured, '.2f')} | "
        line = next((x for x in readme if x.startswith(prefix)), None)
        assert line is not None, f"README lacks the recomputed row:\n{prefix}"
        if inside:
            assert line.endswith("| yes |"), line
        else:  # how far outside, from the unrounded numbers (0.143 reads 0.14, not 0.15 from the rounded ones)
            below = measured < p.ci[0]
            miss = p.ci[0] - measured if below else measured - p.ci[1]
            assert line.endswith(f"| no, {miss:.2f} octave {'below' if below else 'above'} |"), line


# docs/studies/<dir> -> the study file (and variant) that ran it: its goals and analysis settings
SUMMARY_STUDIES = {
    "kjv": ("default", None),
    "sotu": ("default", None),
    "fig10_linear1_abs": ("fig10", ["linear1_abs"]),
}


# how far a bootstrap interval's ends move with the RNG's draws alone (README, "What these numbers do not
# support": --bootstrap-seed 0..4 moved slope CI ends by up to 0.038 and optimum CI ends by up to 0.26 octave)
MC_HALFWIDTH, MC_WIDTH = 0.04, 2 * 0.26


@pytest.mark.parametrize("study", SUMMARY_STUDIES)
def test_the_committed_summary_goal_table_is_the_run_time_record_the_recomputation_agrees_with(study):
    # the goal table of docs/studies/<study>/demo_summary.md is what the study printed when it stopped (its
    # planner's bootstrap draws); the study's analysis (study.analysis.analyse) on the committed results.csv
    # checks the same goals, meets the same ones, and its achieved widths differ only by Monte Carlo error
    from eval.goals import check_goals, goal_table, met_text
    from study.spec import load_study

    name, variants = SUMMARY_STUDIES[study]
    s = load_study(name, variants)
    assert s.goals, f"study {name} has no goals"
    sweep = share_base_depth(read_results(ROOT / "docs" / "studies" / study / "results.csv"), s.presets[0])
    analysis = analyze(sweep, window=s.fit_window, n_boot=s.bootstrap, boot_seed=0, seed_model=s.seed_model)
    checks = [c.as_dict() for c in check_goals(analysis, s.goals)]
    summary = (ROOT / "docs" / "studies" / study / "demo_summary.md").read_text()
    met = sum(c["met"] for c in checks)
    assert f"Goals ({met} of {len(checks)} met;" in summary
    recorded = {}  # (goal, family, fraction, target) -> [achieved, met], as the study printed them
    for line in summary.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].split(" ")[0] in s.goals:
            recorded[tuple(cells[:4])] = cells[4:]
    _, rows = goal_table(checks)
    assert len(recorded) == len(rows) == len(checks)
    for cells, check in zip(rows, checks):
        achieved, met_cell = recorded[tuple(cells[:4])]
        assert met_cell == met_text(check), f"{study}: {cells[:4]} recorded {met_cell}, recomputed {met_text(check)}"
        tol = MC_HALFWIDTH if check["goal"] == "slope_ci_halfwidth" else MC_WIDTH
        assert abs(float(achieved.split(" ")[0]) - check["achieved"]) <= tol, (study, cells, achieved)


FIRST_VERSIONS = "f770698"  # the commit holding the studies' first versions (run before the open-interval rule)


def test_the_first_versions_cut_intervals_quoted_in_the_docs_are_recomputed(tmp_path):
    # git show f770698:docs/studies/<corpus>/results.csv > v1.csv; eval transfer v1.csv ... (one
    # "CI ends on" warning per cut interval): README, docs/study_design.md and docs/eval.md count them
    import subprocess

    cut = {}
    for corpus in CORPORA:
        shown = subprocess.run(
            ["git", "show", f"{FIRST_VERSIONS}:docs/studies/{corpus}/results.csv"], cwd=ROOT, capture_output=True
        )
        if shown.returncode != 0:
            pytest.skip(f"no git history with {FIRST_VERSIONS} here: {shown.stderr.decode().strip()}")
        (tmp_path / f"{corpus}.csv").write_bytes(shown.stdout)
        sweep = share_base_depth(read_results(tmp_path / f"{corpus}.csv"), "sp")
        analysis = analyze(sweep, window=2, n_boot=1000, boot_seed=0)
        cut[corpus] = sum(bool(d.open_ends) for r in analysis.results for d in r.depths)  # per preset, depth, mid/end
        if corpus == "sotu":  # depth-μP's L=32 optimum interval, the widest over its goal
            widths = {
                h["fraction"]: h["deepest_opt_ci"][1] - h["deepest_opt_ci"][0]
                for h in headline_rows(analysis)
                if h["family"] == "depth_mup"
            }
    docs = {name: (ROOT / name).read_text() for name in ("README.md", "docs/study_design.md", "docs/eval.md")}
    assert f"depth-μP's L=32 optimum ({widths[0.5]:.2f} mid, {widths[1.0]:.2f}\nend)" in docs["docs/study_design.md"]
    assert f"with it {cut['kjv']} of KJV's and {cut['sotu']} of SOTU's\nper-depth intervals" in docs["README.md"]
    assert f"{cut['kjv']} per-depth intervals of KJV and {cut['sotu']} of SOTU" in docs["docs/study_design.md"]
    assert f"before the planner knew this rule) {cut['kjv']}\n  optima's intervals were open" in docs["docs/eval.md"]


def test_the_seed_sd_spread_between_depths_quoted_in_docs_eval_is_recomputed():
    # docs/eval.md (borrowed seed noise): per family at the end of training, each depth's seed SD
    # pooled over its cells with two or more seeds, as the borrowed-noise warning prints it
    import numpy as np

    text = " ".join((ROOT / "docs" / "eval.md").read_text().split())
    ratios = []
    for corpus in CORPORA:
        sweep = share_base_depth(read_results(ROOT / "docs" / "studies" / corpus / "results.csv"), "sp")
        for r in analyze(sweep, window=2, n_boot=0, boot_seed=0).results:
            if r.fraction != 1.0:
                continue
            sd = {}
            for d in r.depths:
                pool, df = d.fit.noise_pool()
                if df:
                    sd[d.depth] = float(np.sqrt(np.mean(pool**2)))
            lo, hi = min(sd, key=sd.get), max(sd, key=sd.get)
            ratios.append(sd[hi] / sd[lo])
            quoted = (
                f"{sd[lo]:.3f} nats at L={lo}, {sd[hi]:.3f} at L={hi}"
                if corpus == "kjv" and r.family.label == "depth_mup"
                else f"{sd[lo]:.3f} at L={lo} to {sd[hi]:.3f} at L={hi}"
            )
            assert quoted in text, f"docs/eval.md lacks {corpus} {r.family.label}: {quoted}"
    assert f"by up to a factor {max(ratios):.1f}" in text


def test_the_h100_depth_mup_end_slope_rests_on_intervals_cut_on_both_sides_as_the_readme_says():
    # README, "On an H100": the slope's CI excludes 0 only on optima whose intervals the LRs tried cut
    sweep = share_base_depth(read_results(ROOT / "docs" / "studies" / "gpu_h100" / "results.csv"), "sp")
    rows = headline_rows(analyze(sweep, window=1, n_boot=1000, boot_seed=0))
    row = next(r for r in rows if r["family"] == "depth_mup" and r["fraction"] == 1.0)
    assert row["verdict"] == "does not transfer" and row["slope_ci"][0] > 0
    assert sorted(row["marks"]["slope"]["cut"]) == ["L=16 high", "L=16 low", "L=32 high", "L=32 low", "L=8 low"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        f"CI barely excludes 0 (+{row['slope_ci'][0]:.3f}), and it rests on L=16 and L=32 optima whose intervals"
        " the LRs tried cut on both sides (‡), and on L=8's, cut at its lower end" in readme
    )


@pytest.mark.slow
def test_the_monte_carlo_spread_of_the_readme_intervals_is_recomputed():
    # README "What these numbers do not support": the headline CIs of both corpora under
    # --bootstrap-seed 0..4: how far their ends move, and that no verdict changes
    import numpy as np

    slope_move, opt_move = 0.0, 0.0
    for corpus in CORPORA:
        sweep = share_base_depth(read_results(ROOT / "docs" / "studies" / corpus / "results.csv"), "sp")
        by_seed = [headline_rows(analyze(sweep, window=2, n_boot=1000, boot_seed=s)) for s in range(5)]
        for rows in zip(*by_seed):
            assert len({r["verdict"] for r in rows}) == 1, rows[0]["family"]
            slope_move = max(slope_move, *np.ptp([r["slope_ci"] for r in rows], axis=0))
            opt_move = max(opt_move, *np.ptp([r["deepest_opt_ci"] for r in rows], axis=0))
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (
        f"slope CIs' ends above move by up to {slope_move:.3f} and the optimum CIs' ends by up to {opt_move:.2f} octave"
        in readme
    )

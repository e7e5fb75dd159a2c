"""``python -m eval transfer A B ...``: several results.csv read as one table (eval.results.read_results).

Planted sweeps as in tests/test_eval_transfer.py (val_loss = c + k (log2 lr - log2 lr*(L))^2,
log2 lr*(L) = log2 lr0 - s log2(L / L0)), split over files: only the tables together give the
planted slope, and the join gives the numbers of one file holding all the rows. Each table is
checked alone (errors name its file and line); a run ID in two tables is one run (the same rows:
counted once; other rows: refused, naming both files); checks across rows name each line's file.
"""

from __future__ import annotations

import json
import math

import pytest

from eval.__main__ import main
from eval.results import ResultsError, read_results
from eval.transfer import analyze
from rundir.contract import Status
from rundir.files import RunSummary, write_summary
from tests.test_eval_transfer import HEADER, L0, make_rows, planted_log2_opt, write_sweep

BRANCH_HEADER = [*HEADER[:8], "branch_of.step", "training.steps", "branch_of.run_id", *HEADER[8:]]


def slopes(analysis) -> dict[tuple[str, float], float]:
    return {(r.family.label, r.fraction): r.slope.slope for r in analysis.results}


def test_two_tables_that_each_lack_depths_give_the_planted_slope_of_their_join(tmp_path, capsys):
    """A holds depth 2 only (no slope alone), B depths 4, 8, 16 (base depth 2 not swept there).
    Read together: sp's slope -0.5 and depth_mup's 0, base L=2, each depth's optimum where it
    was planted, and the very numbers of one file with all the rows (the old workaround)."""
    rows = make_rows(seeds=(0, 1))
    a = write_sweep(tmp_path / "a", [r for r in rows if r["model.num_layers"] == 2])
    b = write_sweep(tmp_path / "b", [r for r in rows if r["model.num_layers"] != 2])
    joined = read_results([a, b])
    assert joined.files == (a / "results.csv", b / "results.csv")
    assert set(joined.rows["file"]) == {str(a / "results.csv"), str(b / "results.csv")}
    analysis = analyze(joined, n_boot=100)
    one_file = analyze(read_results(write_sweep(tmp_path / "all", rows)), n_boot=100)
    for r in analysis.results:
        planted = {"sp": 0.5, "depth_mup": 0.0}[r.family.preset]
        assert r.base_depth == L0 and r.slope.slope == pytest.approx(-planted, abs=0.02)
        for d in r.depths:
            assert d.optimum.log2_lr == pytest.approx(planted_log2_opt(d.depth, planted), abs=0.05)
        twin = next(t for t in one_file.results if t.family == r.family and t.fraction == r.fraction)
        assert (r.slope.slope, r.slope.ci_low, r.slope.ci_high) == (
            twin.slope.slope,
            twin.slope.ci_low,
            twin.slope.ci_high,
        )
    alone = analyze(read_results(a), n_boot=0)
    assert all(not r.slope.available for r in alone.results)  # one depth: no slope from A alone

    out = tmp_path / "out"
    assert (
        main(["transfer", str(a), str(b / "results.csv"), "--out", str(out), "--bootstrap", "50", "--no-figures"]) == 0
    )
    stdout = capsys.readouterr().out
    runs_a, runs_b = 2 * 17 * 2, 2 * 3 * 17 * 2  # presets x depths x LRs x seeds
    assert f"read as one table: {a / 'results.csv'} ({runs_a} runs), {b / 'results.csv'} ({runs_b} runs)" in stdout
    record = json.loads((out / "transfer.json").read_text())
    assert record["sources"] == [
        {"file": str(a / "results.csv"), "runs": runs_a},
        {"file": str(b / "results.csv"), "runs": runs_b},
    ]
    assert record["source"] == f"{a / 'results.csv'}, {b / 'results.csv'}"
    assert (
        f"Sources, read as one table: `{a / 'results.csv'}` ({runs_a} runs), `{b / 'results.csv'}` ({runs_b} runs)"
        in (out / "report.md").read_text()
    )


def branch_rows(slope: float, step: int, steps: int, rng_seed: int) -> list[dict]:
    rows = make_rows(slopes={"sp": slope}, depths=(2, 4, 8), seeds=(0, 1), rng_seed=rng_seed)
    for row in rows:
        row["branch_of.run_id"] = row["run_id"]  # the stable run it branches from (a record, no family key)
        row.update({"run_id": f"{row['run_id']}-from{step}", "branch_of.step": step, "training.steps": steps})
    return rows


def test_cooldowns_from_two_steps_and_the_stable_sweep_are_a_family_each(tmp_path):
    """Cooldowns from step 6 (to 8) with a planted slope 0.5, from step 18 (to 20) with 0, and the
    stable sweep (no branch columns) with 0.25: three families, each with its own slope; the
    stable table's rows read the columns it lacks as empty, said once."""
    cool6 = write_sweep(tmp_path / "cool6", branch_rows(0.5, 6, 8, 1), BRANCH_HEADER)
    cool18 = write_sweep(tmp_path / "cool18", branch_rows(0.0, 18, 20, 2), BRANCH_HEADER)
    stable = write_sweep(tmp_path / "stable", make_rows(slopes={"sp": 0.25}, depths=(2, 4, 8), seeds=(0, 1)))
    joined = read_results([stable, cool6, cool18])
    assert joined.extra_keys == ["branch_of.step", "training.steps"]
    analysis = analyze(joined, n_boot=0, fractions=[1.0])
    assert slopes(analysis) == {
        ("sp", 1.0): pytest.approx(-0.25, abs=0.02),
        ("sp (branch_of.step=6)", 1.0): pytest.approx(-0.5, abs=0.02),
        ("sp (branch_of.step=18)", 1.0): pytest.approx(0.0, abs=0.02),
    }
    warned = [w for w in joined.warnings if "no column(s)" in w]
    assert warned == [
        f"{stable / 'results.csv'}: no column(s) ['branch_of.step', 'training.steps'] (another table's swept keys): "
        f"its {3 * 17 * 2} run(s) read them as empty, so they are families of their own"
    ]


def test_a_run_id_in_two_tables_is_counted_once_with_the_same_rows_and_refused_with_others(tmp_path, capsys):
    rows = make_rows(slopes={"sp": 0.5}, depths=(2, 4, 8), seeds=(0,))
    a = write_sweep(tmp_path / "a", [r for r in rows if r["model.num_layers"] in (2, 4)])
    b = write_sweep(tmp_path / "b", [r for r in rows if r["model.num_layers"] in (4, 8)])
    joined = read_results([a, b])  # depth 4's 17 runs are in both, row for row
    assert joined.rows["run_id"].nunique() == 3 * 17 and len(joined.rows) == len(rows)
    assert (joined.rows.loc[joined.rows["depth"] == 4, "file"] == str(a / "results.csv")).all()
    assert any(
        w.startswith(f"{b / 'results.csv'}: 17 run(s) also in {a / 'results.csv'} with the same rows, counted once")
        for w in joined.warnings
    )
    one_file = analyze(read_results(write_sweep(tmp_path / "all", rows)), n_boot=0)
    assert slopes(analyze(joined, n_boot=0)) == slopes(one_file)

    # the same run ID with another loss in B: refused, naming both files and the first line of each
    changed = [dict(r) for r in rows if r["model.num_layers"] in (4, 8)]
    changed[3]["val_loss"] = 9.0  # line 5 of B: run L4 lr -12.50 at fraction 1.0 (its first line is 4)
    write_sweep(tmp_path / "b", changed)
    assert main(["transfer", str(a), str(b), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    rid = changed[3]["run_id"]
    line_in_a = 2 + next(i for i, r in enumerate(rows[: 2 * 17 * 2]) if r["run_id"] == rid)
    assert (
        f"error: {a / 'results.csv'} line {line_in_a} and {b / 'results.csv'} line 4: run {rid!r} is in both tables "
        f"with other values of column 'val_loss': {rows[line_in_a - 1]['val_loss']!r} and 9.0; a run ID names one run"
    ) in err
    assert not (tmp_path / "out" / "transfer.json").exists()


def test_a_configuration_under_two_run_ids_in_two_tables_names_both_lines(tmp_path):
    """One sweep run on two clusters with its runs renamed: a copy would count as a second seed."""
    rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0, -8.5))
    a = write_sweep(tmp_path / "a", rows)
    b = write_sweep(tmp_path / "b", [{**r, "run_id": "cluster2-" + r["run_id"]} for r in rows])
    with pytest.raises(ResultsError) as refused:
        read_results([a, b])
    assert str(refused.value).startswith(
        f"{a / 'results.csv'} line 2 and {b / 'results.csv'} line 2: runs 'sp-a1-L2-lr-9.00-s0' and "
        "'cluster2-sp-a1-L2-lr-9.00-s0' have the same configuration (parametrization.preset=sp, "
    )
    # two LRs of one curve written with other digits, one per table: both files named
    b_rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-8.0,))
    for r in b_rows:
        r["run_id"], r["optimizer.lr"] = "rounded", 0.00195  # 2**-9 = 0.001953125 on A's lines 2-3
    write_sweep(tmp_path / "b", b_rows)
    with pytest.raises(ResultsError) as refused:
        read_results([a, b])
    assert str(refused.value).startswith(
        f"{a / 'results.csv'} line 2 and {b / 'results.csv'} line 2, column 'optimizer.lr': 0.001953125 and 0.00195 "
    )


def test_each_table_is_checked_alone_and_its_errors_name_it(tmp_path, capsys):
    rows = make_rows(slopes={"sp": 0.5}, depths=(2, 4), seeds=(0,), grid=(-9.0, -8.5))
    a = write_sweep(tmp_path / "a", rows[:4])
    bad = [dict(r) for r in rows[4:]]
    bad[2]["fraction"] = 1.5  # B's line 4
    b = write_sweep(tmp_path / "b", bad)
    assert main(["transfer", str(a), str(b), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: {b / 'results.csv'}: line 4, column 'fraction': '1.5' must be in (0, 1]" in err
    assert str(a) not in err
    assert main(["transfer", str(a), str(tmp_path / "nowhere"), "--out", str(tmp_path / "out")]) == 2
    assert f"{tmp_path / 'nowhere' / 'results.csv'}: file not found" in capsys.readouterr().err
    with pytest.raises(ResultsError, match=r"results.csv: given twice: each table is read once"):
        read_results([a, a / "results.csv"])


def test_ignore_columns_drop_where_present_and_a_column_in_no_table_is_refused(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}, depths=(2, 4), seeds=(0,), grid=(-9.0, -8.5, -8.0))
    a = write_sweep(tmp_path / "a", rows[:6])
    b = write_sweep(tmp_path / "b", [{**r, "wall_s": 10.0 * i} for i, r in enumerate(rows[6:])], [*HEADER, "wall_s"])
    with pytest.raises(ResultsError, match="'wall_s'"):  # a per-run record read as a swept key
        read_results([a, b])
    joined = read_results([a, b], ignore_columns=["wall_s"])
    assert joined.extra_keys == [] and len(joined.rows) == len(rows)
    with pytest.raises(ResultsError, match=r"--ignore-columns \['nope'\]: in none of the headers of "):
        read_results([a, b], ignore_columns=["wall_s", "nope"])


def test_divergence_reasons_are_read_beside_the_table_a_run_is_in(tmp_path):
    rows = make_rows(slopes={"sp": 0.5}, depths=(2, 4), seeds=(0,))
    a = write_sweep(tmp_path / "a", [r for r in rows if r["model.num_layers"] == 2])
    b = write_sweep(tmp_path / "b", [r for r in rows if r["model.num_layers"] == 4])
    diverged = next(r["run_id"] for r in rows if r["model.num_layers"] == 4 and r["status"] == "diverged")
    write_summary(b / "runs" / diverged, RunSummary(Status.DIVERGED, reason="loss 12.3 above the bound", steps=210))
    analysis = analyze(read_results([a, b]), n_boot=0)
    assert analysis.divergence_reasons == {diverged: "loss 12.3 above the bound"}
    assert math.isclose(analysis.results[0].slope.slope, -0.5, abs_tol=0.05)


COOL_HEADER = [*HEADER[:8], "optimizer.min_lr_ratio", "branch_of.step", "training.steps", *HEADER[8:]]


def cooldown_rows(slope: float, step: int, cooldown: int, floor: str | None = "0.0") -> list[dict]:
    """Planted cooldown branches from ``step``: a family with the planted ``slope`` (one fraction)."""
    rows = make_rows(slopes={"sp": slope}, depths=(2, 4, 8), seeds=(0, 1), fractions=(1.0,), rng_seed=step)
    for row in rows:
        row.update({"run_id": f"{row['run_id']}-from{step}-c{cooldown}-floor{floor}", "branch_of.step": step})
        row.update({"training.steps": step + cooldown, "optimizer.min_lr_ratio": floor})
    return rows


def test_families_are_ordered_by_their_values_with_numbers_as_numbers(tmp_path):
    """Branch steps 6, 12 and 18 sort as text as "12", "18", "6": the families came out in that
    order in transfer.json, the report's tables and the figure. Now by value: the stable sweep
    (no branch step) first, then 6, 12, 18 (planted slopes 0.5, 0.25, 0 tell them apart)."""
    planted = {6: 0.5, 12: 0.25, 18: 0.0}
    sweeps = [write_sweep(tmp_path / f"cool{s}", cooldown_rows(v, s, 2), COOL_HEADER) for s, v in planted.items()]
    stable = write_sweep(tmp_path / "stable", make_rows(slopes={"sp": 0.1}, depths=(2, 4, 8), fractions=(1.0,)))
    out = tmp_path / "out"
    assert main(["transfer", str(stable), *map(str, reversed(sweeps)), "--out", str(out), "--bootstrap", "0"]) == 0
    labels = ["sp", *(f"sp (branch_of.step={s})" for s in (6, 12, 18))]
    record = json.loads((out / "transfer.json").read_text())
    assert [f["label"] for f in record["families"]] == labels
    assert [r["family"] for r in record["results"]] == labels
    assert [r["slope"]["value"] for r in record["results"]] == pytest.approx([-0.1, -0.5, -0.25, 0.0], abs=0.03)
    report = (out / "report.md").read_text()
    headline = report[: report.index("## ", report.index("| family"))]
    assert [headline.index(f"| {lab} |") for lab in labels] == sorted(headline.index(f"| {lab} |") for lab in labels)


def test_natural_key_compares_numbers_as_numbers_and_puts_a_missing_value_first():
    from eval.curves import natural_key

    values = ["18", "", "6", "1e-4", "0.01", "linear12", "linear2", "standard", "nan"]
    assert sorted(values, key=natural_key) == ["", "1e-4", "0.01", "6", "18", "linear2", "linear12", "nan", "standard"]


def test_a_column_one_table_lacks_and_the_others_fix_is_named_only_where_it_tells_families_apart(tmp_path):
    """Cooldowns that all set ``optimizer.min_lr_ratio=0.0`` beside a stable sweep without that
    column: the value is the same in every family that has it, so no label names it (it named it
    in all four cooldown families before); the branch step still tells them apart. Where it is
    all that tells two families apart (a cooldown with the stable sweep's other columns), it stays."""
    cool = [write_sweep(tmp_path / f"cool{s}", cooldown_rows(0.0, s, 2), COOL_HEADER) for s in (6, 18)]
    stable = write_sweep(tmp_path / "stable", make_rows(slopes={"sp": 0.25}, depths=(2, 4, 8), fractions=(1.0,)))
    analysis = analyze(read_results([stable, *cool]), n_boot=0)
    assert [f.label for f in analysis.families] == [
        "sp", "sp (branch_of.step=6)", "sp (branch_of.step=18)",
    ]  # fmt: skip
    assert analysis.families[1].key_dict()["optimizer.min_lr_ratio"] == "0.0"  # kept in the keys and transfer.json
    # two floors: the column tells the cooldowns apart, and is named in each of them
    cool01 = write_sweep(tmp_path / "cool6b", cooldown_rows(0.0, 6, 2, "0.1"), COOL_HEADER)
    analysis = analyze(read_results([stable, cool[0], cool01]), n_boot=0)
    assert [f.label for f in analysis.families] == [
        "sp",
        "sp (optimizer.min_lr_ratio=0.0)",
        "sp (optimizer.min_lr_ratio=0.1)",
    ]
    # the column alone tells a table apart: named, or the two families would read the same
    only = [*HEADER[:8], "optimizer.min_lr_ratio", *HEADER[8:]]
    rows = [{**r, "branch_of.step": "", "training.steps": ""} for r in cooldown_rows(0.5, 6, 2)]
    floor = write_sweep(tmp_path / "floor", rows, only)
    analysis = analyze(read_results([stable, floor]), n_boot=0)
    assert {f.label: r.slope.slope for f, r in zip(analysis.families, analysis.results)} == {
        "sp": pytest.approx(-0.25, abs=0.03),
        "sp (optimizer.min_lr_ratio=0.0)": pytest.approx(-0.5, abs=0.03),
    }


def test_a_branch_label_leaves_out_the_training_steps_its_step_and_cooldown_imply(tmp_path):
    """Cooldowns from steps 6 and 18, each 2 and 6 steps long (configs/sweeps/wsd/cooldown.yaml):
    training.steps = step + cooldown (8, 12, 20, 24) is said by the other two columns, so the
    labels name the cooldown and the step only; before, all three
    ('sp (scheduler.wsd_decay_steps=2, training.steps=8, branch_of.step=6)'). Every column stays
    in the keys. A sweep whose families only training.steps tells apart keeps it in the label."""
    header = [*HEADER[:8], "optimizer.min_lr_ratio", "scheduler.wsd_decay_steps", "training.steps",
              "branch_of.step", *HEADER[8:]]  # fmt: skip
    rows = []
    for step in (6, 18):
        for cooldown in (2, 6):
            for row in cooldown_rows(0.0, step, cooldown):
                rows.append({**row, "scheduler.wsd_decay_steps": cooldown})
    analysis = analyze(read_results(write_sweep(tmp_path / "cool", rows, header)), n_boot=0)
    assert [f.label for f in analysis.families] == [
        f"sp (scheduler.wsd_decay_steps={c}, branch_of.step={s})" for c in (2, 6) for s in (6, 18)
    ]
    assert [f.key_dict()["training.steps"] for f in analysis.families] == ["8", "20", "12", "24"]
    only = [*HEADER[:8], "training.steps", *HEADER[8:]]
    rows = [{**r, "training.steps": steps, "run_id": f"{r['run_id']}-{steps}"}
            for steps in (24, 48) for r in make_rows(slopes={"sp": 0.0}, depths=(2, 4, 8), fractions=(1.0,))]  # fmt: skip
    analysis = analyze(read_results(write_sweep(tmp_path / "long", rows, only)), n_boot=0)
    assert [f.label for f in analysis.families] == ["sp (training.steps=24)", "sp (training.steps=48)"]


def test_one_custom_arm_keeps_its_alpha_and_gamma_in_its_label(tmp_path):
    """A custom arm's alpha and gamma are one value each and the other preset lacks them, as a
    cooldown's fixed floor is; they say which parametrization it is, so its label keeps them."""
    header = [*HEADER[:8], "parametrization.alpha", "parametrization.gamma", *HEADER[8:]]
    rows = make_rows(slopes={"custom": 0.5, "depth_mup": 0.0}, depths=(2, 4, 8), fractions=(1.0,))
    for row in rows:
        if row["parametrization.preset"] == "custom":
            row.update({"parametrization.alpha": 1.0, "parametrization.gamma": 0.0})
    analysis = analyze(read_results(write_sweep(tmp_path / "s", rows, header)), n_boot=0)
    assert [f.label for f in analysis.families] == [
        "custom (parametrization.alpha=1.0, parametrization.gamma=0.0)",
        "depth_mup",
    ]

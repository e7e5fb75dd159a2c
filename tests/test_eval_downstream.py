"""eval transfer adds downstream scores from runs' lm_eval.json: planted scores, known picks."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from eval.__main__ import main
from eval.downstream import choices, per_run_table, read_scores
from eval.results import read_results
from tests.test_eval_transfer import make_rows, write_sweep

GRID = (-11.0, -10.0, -9.0, -8.0, -7.0)


def planted_acc(log2_lr: float, depth: int) -> float:
    """Peaks one octave above the val-loss optimum at depth 4, on it elsewhere."""
    peak = -9.2 + (1.0 if depth == 4 else 0.0)
    return 0.6 - 0.05 * (log2_lr - peak) ** 2


@pytest.fixture
def sweep(tmp_path):
    rows = make_rows(slopes={"depth_mup": 0.0}, depths=(2, 4), grid=GRID, seeds=(0, 1), diverge_gap=None)
    directory = write_sweep(tmp_path / "sweep", rows)
    scored = 0
    for row in rows:
        run = directory / "runs" / row["run_id"]
        if row["fraction"] != 1.0 or row["run.seed"] == 1 and row["model.num_layers"] == 2:
            continue  # seed 1 at depth 2 has no scores: never imputed
        run.mkdir(parents=True, exist_ok=True)
        acc = planted_acc(math.log2(row["optimizer.lr"]), row["model.num_layers"])
        record = {"tasks": {"toy": {"acc": acc, "acc_stderr": 0.01, "sample_len": 100}}}
        (run / "lm_eval.json").write_text(json.dumps(record))
        scored += 1
    return directory, scored


def test_downstream_picks_follow_the_planted_scores(sweep):
    directory, scored = sweep
    results = read_results(directory)
    final = results.rows[results.rows["fraction"] == 1.0]
    scores, higher = read_scores(directory, sorted(final["run_id"]))
    assert len(scores) == scored == 15 and higher == {}  # files without higher_is_better
    table = per_run_table(final, scores)
    assert table["toy/acc"].isna().sum() == 5  # depth 2, seed 1
    picked = choices(table, "toy/acc").set_index("depth")
    assert picked.loc[2, "octaves_apart"] == pytest.approx(0.0)
    assert picked.loc[4, "octaves_apart"] == pytest.approx(1.0)
    assert picked.loc[4, "lr_by_val_loss"] == pytest.approx(2.0**-9)
    assert picked.loc[4, "best_metric"] == pytest.approx(planted_acc(-8.0, 4))
    assert picked.loc[4, "metric_at_lr_by_val_loss"] == pytest.approx(planted_acc(-9.0, 4))
    assert picked.loc[2, "seeds_per_lr"] == 1 and picked.loc[4, "seeds_per_lr"] == 2


def test_transfer_writes_the_downstream_tables(sweep, tmp_path, capsys):
    directory, _ = sweep
    out = tmp_path / "out"
    assert main(["transfer", str(directory), "--out", str(out), "--no-figures", "--bootstrap", "0"]) == 0
    table = pd.read_csv(out / "downstream.csv")
    assert "toy/acc" in table and "sample_len" not in " ".join(table.columns)
    text = (out / "downstream.md").read_text()
    assert "15 of 20 runs have lm-eval scores" in text and "## toy/acc" in text
    assert "downstream scores:" in capsys.readouterr().out


def test_no_scores_no_tables(tmp_path):
    directory = write_sweep(tmp_path / "sweep", make_rows(slopes={"sp": 0.0}, depths=(2, 4), grid=GRID, seeds=(0,)))
    out = tmp_path / "out"
    assert main(["transfer", str(directory), "--out", str(out), "--no-figures", "--bootstrap", "0"]) == 0
    assert not (out / "downstream.csv").exists()


def test_lower_is_better_metrics_and_ties_pick_the_right_lr(tmp_path):
    """lm-eval says which way each metric points (higher_is_better, kept in lm_eval.json): a
    perplexity's best LR is its lowest (it was the highest: the worst LR, 2 octaves off here),
    and a metric tied at its best over several LRs picks the one nearest the val-loss LR (it
    picked the lowest LR of the tie: a small task's equal scores read as octaves apart)."""
    rows = make_rows(slopes={"depth_mup": 0.0}, depths=(4,), grid=GRID, seeds=(0,), diverge_gap=None)
    directory = write_sweep(tmp_path / "sweep", rows)
    for row in rows:
        if row["fraction"] != 1.0:
            continue
        x = math.log2(row["optimizer.lr"])
        (directory / "runs" / row["run_id"]).mkdir(parents=True, exist_ok=True)
        record = {
            "tasks": {"toy": {"word_perplexity": 20.0 + (x + 8.0) ** 2, "acc": 0.25 if x <= -9 else 0.2}},
            "higher_is_better": {"toy": {"word_perplexity": False, "acc": True}},
        }
        (directory / "runs" / row["run_id"] / "lm_eval.json").write_text(json.dumps(record))
    final = read_results(directory).rows
    final = final[final["fraction"] == 1.0]
    scores, higher = read_scores(directory, sorted(final["run_id"]))
    assert higher == {"toy/word_perplexity": False, "toy/acc": True}
    table = per_run_table(final, scores)
    ppl = choices(table, "toy/word_perplexity", higher_is_better=False).iloc[0]
    assert (ppl["lr_by_val_loss"], ppl["lr_by_metric"], ppl["octaves_apart"]) == (2.0**-9, 2.0**-8, 1.0)
    assert (ppl["best_metric"], ppl["metric_at_lr_by_val_loss"], ppl["lrs_at_best_metric"]) == (20.0, 21.0, 1)
    acc = choices(table, "toy/acc").iloc[0]  # 0.25 at 2^-11, 2^-10, 2^-9: the val-loss LR is one of them
    assert (acc["lr_by_metric"], acc["octaves_apart"], acc["lrs_at_best_metric"]) == (2.0**-9, 0.0, 3)
    out = tmp_path / "out"
    assert main(["transfer", str(directory), "--out", str(out), "--no-figures", "--bootstrap", "0"]) == 0
    text = (out / "downstream.md").read_text()
    assert "## toy/word_perplexity (lower is better)" in text and "## toy/acc (higher is better)" in text

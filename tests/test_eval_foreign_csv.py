"""``eval transfer`` on tables written by other tools: encodings, delimiters, extra columns, LR spelling.

Every bad table is exit 2 with a message naming the file, the line and the column; a table
that differs only in its spelling (a byte-order mark, CRLF, tabs, another file name) gives the
same numbers as the contract's CSV.
"""

from __future__ import annotations

import math

import pytest

from eval.__main__ import main
from eval.results import ResultsError, read_results
from eval.transfer import analyze
from tests.test_eval_transfer import HEADER, _csv_text, make_rows

ROWS = dict(slopes={"depth_mup": 0.0, "sp": 0.5}, depths=(2, 4, 8), seeds=(0, 1), noise=0.0)


def _optima(path, **kwargs) -> dict:
    analysis = analyze(read_results(path, **kwargs), n_boot=0)
    return {(r.family.label, r.fraction, d.depth): d.optimum.log2_lr for r in analysis.results for d in r.depths}


def test_bom_crlf_tabs_and_any_file_name_read_as_the_csv(tmp_path):
    """Excel's "CSV UTF-8" starts with a byte-order mark (it was read into the first column's
    name: "missing column(s) ['run_id']"); a file not named .csv was looked for as a directory
    ("file not found"); a tab-separated header was one column. All give the CSV's optima."""
    text = _csv_text(make_rows(**ROWS))
    (tmp_path / "plain.csv").write_text(text)
    expected = _optima(tmp_path / "plain.csv")
    assert len(expected) == 2 * 2 * 3 and all(math.isfinite(v) for v in expected.values())
    (tmp_path / "bom.csv").write_text("\ufeff" + text.replace("\n", "\r\n"), newline="")
    (tmp_path / "sweep.tsv").write_text(text.replace(",", "\t"))
    (tmp_path / "export.txt").write_text(text)
    for name in ("bom.csv", "sweep.tsv", "export.txt"):
        assert _optima(tmp_path / name) == expected, name
    assert main(["transfer", str(tmp_path / "sweep.tsv"), "--out", str(tmp_path / "out"), "--no-figures",
                 "--bootstrap", "0"]) == 0  # fmt: skip
    with pytest.raises(ResultsError, match=r"missing\.tsv: file not found$"):
        read_results(tmp_path / "missing.tsv")


@pytest.mark.parametrize(
    "edit,expected",
    [
        (
            lambda text: text.replace(",", ";"),
            "line 1 (header): fields are separated by ';'; write the table with ',' (or tabs) between fields and "
            "'.' as the decimal point",
        ),
        (  # an LR given as its log2
            lambda text: text.replace("0.001953125", "-9.0", 1),
            "line 2, column 'optimizer.lr': '-9.0' must be a positive finite number (the LR itself, not its "
            "logarithm: write 2**x for a log2 LR x)",
        ),
    ],
)
def test_spelling_errors_exit_2_naming_line_and_column(tmp_path, capsys, edit, expected):
    path = tmp_path / "results.csv"
    path.write_text(edit(_csv_text(make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0, -8.5)))))
    assert main(["transfer", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {path}: {expected}\n"


def test_one_lr_written_with_two_precisions_is_refused(tmp_path, capsys):
    """Seed 1's LRs rounded to 3 digits (0.00276 beside seed 0's 2^-8.5 = 0.0027621...) made two grid
    points 0.001 octave apart; the parabola through them gave regrets of tens of nats, exit 0."""
    rows = make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0, 1), grid=(-9.0, -8.5, -8.0))
    for r in rows:
        if r["run.seed"] == 1:
            r["optimizer.lr"] = float(f"{r['optimizer.lr']:.3g}")
    path = tmp_path / "results.csv"
    path.write_text(_csv_text(rows))
    # lines: 2^-9 seed 0 = 2-3, seed 1 = 4-5; 2^-8.5 seed 0 = 6-7, seed 1 = 8-9 (0.00276, the closest pair)
    assert main(["transfer", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"error: {path}: lines 6 and 8, column 'optimizer.lr': 0.0027621358640099515 and 0.00276 are 0.00112 octave "
        "apart at the same preset, depth and family (parametrization.preset=sp, model.num_layers=2): one LR written "
        "with different precision? Write every LR with the same digits (the analysis would fit two grid points "
        "0.00112 octave apart)\n"
    )
    assert not (tmp_path / "out" / "transfer.json").exists()


def _with_column(rows: list[dict], name: str, value) -> tuple[list[dict], list[str]]:
    rows = [{**r, name: value(r)} for r in rows]
    return rows, [*HEADER[:8], name, *HEADER[8:]]


def test_a_per_run_column_that_splits_every_curve_is_refused_and_can_be_ignored(tmp_path, capsys):
    """A minimum LR derived from the LR (a Megatron-LM sweep records one) made every family one
    LR per depth: each read "consistent with transfer", CI [0, 0], exit 0."""
    rows, header = _with_column(make_rows(**ROWS), "optimizer.min_lr", lambda r: r["optimizer.lr"] / 10)
    path = tmp_path / "results.csv"
    path.write_text(_csv_text(rows, header))
    n_lrs = len({r["optimizer.lr"] for r in rows})
    n_runs = len({r["run_id"] for r in rows})
    assert main(["transfer", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"error: {path}: column 'optimizer.min_lr' splits every loss-vs-LR curve into single LRs: no two runs with "
        "the same preset, depth, width, block multiplier and 'optimizer.min_lr' have different LRs "
        f"({n_lrs} distinct values of 'optimizer.min_lr' over {n_runs} runs). A column besides the contract's is read "
        "as a swept setting that defines a family; a per-run record (a time, a count, a value derived from the LR) is "
        "none: leave it out with --ignore-columns optimizer.min_lr\n"
    )
    (tmp_path / "plain.csv").write_text(_csv_text(make_rows(**ROWS)))
    assert _optima(path, ignore_columns=["optimizer.min_lr"]) == _optima(tmp_path / "plain.csv")
    out = tmp_path / "out"
    assert main(["transfer", str(path), "--out", str(out), "--bootstrap", "0", "--no-figures",
                 "--ignore-columns", "optimizer.min_lr"]) == 0  # fmt: skip
    assert f"{path}: column(s) ['optimizer.min_lr'] left out (--ignore-columns)" in (out / "report.md").read_text()
    with pytest.raises(ResultsError, match=r"--ignore-columns \['val_loss'\]: the analysis needs these columns"):
        read_results(path, ignore_columns=["val_loss"])
    with pytest.raises(ResultsError, match=r"line 1 \(header\): --ignore-columns \['wall'\] not in the header"):
        read_results(path, ignore_columns=["wall"])


def test_a_swept_extra_key_is_still_a_family(tmp_path):
    """The check refuses only columns that leave no curve: a real swept key (two block types)
    keeps its families."""
    rows = make_rows(**ROWS)
    rows = [{**r, "model.block": "standard"} for r in rows] + [
        {**r, "model.block": "linear1", "run_id": r["run_id"] + "-l1"} for r in rows
    ]
    path = tmp_path / "results.csv"
    path.write_text(_csv_text(rows, [*HEADER[:8], "model.block", *HEADER[8:]]))
    labels = {r.family.label for r in analyze(read_results(path), n_boot=0).results}
    assert labels == {f"{p} (model.block={b})" for p in ("depth_mup", "sp") for b in ("linear1", "standard")}


def test_a_per_eval_column_is_named_with_the_option_that_leaves_it_out(tmp_path):
    rows, header = _with_column(make_rows(slopes={"sp": 0.5}, depths=(2,), seeds=(0,), grid=(-9.0,)), "train_loss",
                                lambda r: r["val_loss"] - 0.1)  # fmt: skip
    path = tmp_path / "results.csv"
    path.write_text(_csv_text(rows, header))
    with pytest.raises(ResultsError) as err:
        read_results(path)
    assert str(err.value).endswith(
        "(a column besides the contract's is read as a swept setting, one value per run; leave a per-eval record "
        "such as this out with --ignore-columns train_loss)"
    )
    assert len(read_results(path, ignore_columns=["train_loss"]).rows) == 2


def test_figures_of_families_with_two_swept_keys_keep_titles_and_legends_apart(tmp_path):
    """fig10's families carry two swept keys (``sp (model.block=linear1, model.linear1_phi=abs)``):
    the loss panels' titles ran into each other and the optimum figure's legends covered the data
    and the next panel (matplotlib: "constrained_layout not applied"). Titles and legends now keep
    clear of each other and of the axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from eval.plots import plot_loss_vs_lr, plot_optimal_lr_vs_depth

    rows = []
    for block, phi in (("standard", "relu"), ("linear1", "abs")):
        rows += [{**r, "model.block": block, "model.linear1_phi": phi, "run_id": f"{r['run_id']}-{block}"}
                 for r in make_rows(**ROWS)]  # fmt: skip
    path = tmp_path / "results.csv"
    path.write_text(_csv_text(rows, [*HEADER[:8], "model.block", "model.linear1_phi", *HEADER[8:]]))
    analysis = analyze(read_results(path), n_boot=20)
    assert "sp (model.block=linear1, model.linear1_phi=abs)" in {f.label for f in analysis.families}

    def overlap(a, b) -> bool:
        return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1

    loss = plot_loss_vs_lr(analysis)
    canvas = FigureCanvasAgg(loss)
    canvas.draw()
    renderer = canvas.get_renderer()
    titles = [ax.title.get_window_extent(renderer) for ax in loss.axes if ax.get_title()]
    assert len(titles) == 4 * 2
    assert not any(overlap(a, b) for i, a in enumerate(titles) for b in titles[i + 1 :])
    assert all(t.x0 >= 0 and t.x1 <= loss.bbox.width for t in titles)
    optima = plot_optimal_lr_vs_depth(analysis)
    canvas = FigureCanvasAgg(optima)
    canvas.draw()
    renderer = canvas.get_renderer()
    axes = [ax.get_window_extent(renderer) for ax in optima.axes]
    assert [ax.get_legend() for ax in optima.axes] == [None, None]  # one legend under both panels
    legend = optima.legends[0].get_window_extent(renderer)
    assert not any(overlap(legend, ax) for ax in axes)
    assert legend.x0 >= 0 and legend.x1 <= optima.bbox.width and legend.y0 >= 0


def test_where_analyses_one_variant_of_a_table_that_swept_two(tmp_path, capsys):
    """A study over two block types (configs/studies/fig10.yaml) writes one table; ``--where
    model.block=X`` gives the numbers of X's rows alone, as if its table had been written by itself."""
    variants = {"standard": {"depth_mup": 0.0, "sp": 0.5}, "linear1": {"depth_mup": 0.3, "sp": -0.4}}
    rows, header = [], None
    for block, slopes in variants.items():
        part, header = _with_column(make_rows(**{**ROWS, "slopes": slopes}), "model.block", lambda r, b=block: b)
        (tmp_path / f"{block}.csv").write_text(
            _csv_text([{k: v for k, v in r.items() if k != "model.block"} for r in part])
        )
        rows += [{**r, "run_id": f"{block}-{r['run_id']}"} for r in part]
    both = tmp_path / "results.csv"
    both.write_text(_csv_text(rows, header))
    for block in variants:
        picked = _optima_where(both, [("model.block", block)])
        alone = {(label.split(" ")[0], f, d): v for (label, f, d), v in _optima(tmp_path / f"{block}.csv").items()}
        assert picked == alone, block
    sp_end = {
        d: v for (p, f, d), v in _optima_where(both, [("model.block", "linear1")]).items() if p == "sp" and f == 1.0
    }
    assert sp_end[8] - sp_end[2] == pytest.approx(0.4 * 2, abs=1e-6)  # linear1's sp: optimum 2^(-(-0.4) log2(L/2))
    # numbers match as numbers; a missing column or value names what there is
    assert _optima_where(both, [("model.hidden_size", "128.0"), ("model.block", "standard")]) == _optima_where(
        both, [("model.block", "standard")]
    )
    out = tmp_path / "out"
    assert main(["transfer", str(both), "--out", str(out), "--bootstrap", "0", "--no-figures",
                 "--where", "model.block=linear1"]) == 0  # fmt: skip
    assert "only rows with model.block=linear1 analysed (--where)" in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["transfer", str(both), "--out", str(out), "--where", "model.block=mlp"]) == 2
    assert capsys.readouterr().err == (
        f"error: {both}: --where model.block=mlp: no row has it (column 'model.block' holds ['linear1', 'standard'])\n"
    )
    assert main(["transfer", str(both), "--out", str(out), "--where", "block=linear1"]) == 2
    assert "--where block=linear1: no column 'block' (columns: ['parametrization.preset'," in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["transfer", str(both), "--out", str(out), "--where", "model.block"])
    assert "'model.block': expected COLUMN=VALUE" in capsys.readouterr().err


def _optima_where(path, where) -> dict:
    from eval.results import keep_where

    analysis = analyze(keep_where(read_results(path), where), n_boot=0)
    return {
        (r.family.label.split(" ")[0], r.fraction, d.depth): d.optimum.log2_lr
        for r in analysis.results
        for d in r.depths
    }

"""``eval transfer``'s figures with 1 to 12 families: every legend, title and panel inside the
saved figure, no matplotlib warning, families in the analysis's order.

Before: with 9 families (a stable sweep and its 8 cooldowns, labels of ~100 characters) the
optimum figure's legends ran off both sides and matplotlib warned "constrained_layout not
applied because axes sizes collapsed to zero"; the loss figure was one panel per family stacked
into a strip 12 panels tall, each row with its own copy of the depth legend.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image

from eval.plots import plot_loss_vs_lr, plot_optimal_lr_vs_depth, save_figure
from eval.results import read_results
from eval.transfer import analyze
from tests.test_eval_transfer import HEADER, make_rows, write_sweep

KEYS = [
    "branch_of.step",
    "optimizer.min_lr_ratio",
    "scheduler.wsd_decay_steps",
    "training.steps",
    "optimizer.weight_decay",
]
GRID = tuple(float(x) for x in np.arange(-10.0, -6.9, 0.5))


def families_analysis(tmp_path, n: int, fractions: tuple[float, ...]):
    """``n`` families of planted cooldowns with long labels: branch steps 6, 12, ..., 6n (as text,
    12 sorts before 6), two floors, two cooldown lengths, three weight decays (training.steps, the
    step plus the cooldown, is not named); family k planted with slope k/20."""
    rows = []
    for k in range(n):
        step, floor, cooldown = 6 * (k + 1), ("0.0", "0.1")[k % 2], (2, 6)[k // 2 % 2]
        for row in make_rows(
            slopes={"depth_mup": k / 20}, depths=(2, 4, 8), seeds=(0,), grid=GRID, fractions=fractions, rng_seed=k
        ):
            values = {KEYS[0]: step, KEYS[1]: floor, KEYS[2]: cooldown, KEYS[3]: step + cooldown,
                      KEYS[4]: ("0.0", "0.01", "0.1")[k % 3]}  # fmt: skip
            rows.append({**row, **values, "run_id": f"{row['run_id']}-from{step}"})
    path = write_sweep(tmp_path / "sweep", rows, [*HEADER[:8], *KEYS, *HEADER[8:]])
    return analyze(read_results(path), n_boot=0, fractions=list(fractions))


def inside(box, fig, renderer) -> bool:
    whole = fig.get_window_extent(renderer)
    return box.x0 >= -0.5 and box.y0 >= -0.5 and box.x1 <= whole.x1 + 0.5 and box.y1 <= whole.y1 + 0.5


def overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("fractions", [(1.0,), (0.5, 1.0)], ids=["one-fraction", "two-fractions"])
@pytest.mark.parametrize("n", [1, 3, 12])
def test_figures_fit_every_legend_and_title_with_1_to_12_families(tmp_path, n, fractions):
    analysis = families_analysis(tmp_path, n, fractions)
    labels = [f.label for f in analysis.families]
    assert len(labels) == n
    if n > 1:  # numbers as numbers: branch steps 6, 12, 18, ... (as text 12, 18, 24, ... came before 6)
        assert [int(lab.split("branch_of.step=")[1].split(",")[0]) for lab in labels] == [6 * (k + 1) for k in range(n)]
        assert len(labels[-1]) > 100  # long labels: 4 swept keys named
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "constrained_layout not applied" and every other warning fail
        optimum, loss = plot_optimal_lr_vs_depth(analysis), plot_loss_vs_lr(analysis)
        for stem, fig in (("optimum", optimum), ("loss", loss)):
            png = save_figure(fig, tmp_path, stem, dpi=50)[0]
            renderer = FigureCanvasAgg(fig).get_renderer()
            fig.draw(renderer)
            with Image.open(png) as image:
                size = np.array(image.size)
            assert np.abs(size - 50 * np.array([fig.get_figwidth(), fig.get_figheight()])).max() <= 1  # what was fitted
            legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
            assert len(legends) == 1  # one legend for every panel
            legend = legends[0].get_window_extent(renderer)
            assert inside(legend, fig, renderer), (stem, legend, fig.bbox)
            titles = [fig._suptitle.get_window_extent(renderer)]
            titles += [ax.title.get_window_extent(renderer) for ax in fig.axes]
            assert all(inside(t, fig, renderer) for t in titles), stem
            panels = [ax.get_window_extent(renderer) for ax in fig.axes]
            assert len(panels) == (len(fractions) if stem == "optimum" else n * len(fractions))
            assert all(p.width > 1.5 * fig.dpi and p.height > 1.5 * fig.dpi for p in panels), stem  # not squeezed
            assert not any(overlap(legend, p) for p in panels), stem
            assert not any(overlap(a, b) for i, a in enumerate(panels) for b in panels[i + 1 :]), stem
    # the optimum figure's legend: one entry per family in the analysis's order, each with its slope
    texts = [t.get_text() for t in optimum.legends[0].get_texts()]
    after = ": slope" if len(fractions) == 1 else " mid (f=0.5): slope"  # wrapped lines go on indented by 2
    assert [t.replace("\n  ", " ").startswith(label + after) for t, label in zip(texts, labels)] == [True] * n
    assert len(texts) == n
    for text, family in zip(texts, analysis.families):
        slopes = [analysis.result(family, f).slope.slope for f in fractions]
        assert [f"slope {s:+.3f}" in text for s in slopes] == [True] * len(fractions)
    # the loss figure: families side by side in at most 4 columns, rows of equal length
    rows_columns = {1: (1, 1), 3: (1, 3), 12: (3, 4)} if len(fractions) == 1 else {1: (1, 2), 3: (2, 4), 12: (6, 4)}
    assert (
        len({round(ax.get_position().y0, 3) for ax in loss.axes}),
        len({round(ax.get_position().x0, 3) for ax in loss.axes}),
    ) == rows_columns[n]

"""eval.seed_model: the per-LR means the optimum is fitted to, with and without seed offsets."""

from __future__ import annotations

import numpy as np
import pytest

from eval.seed_model import curve_means


def _curve(table: dict[float, dict[int, float]]):
    """{log2 lr: {seed: loss}} -> (seed_losses, seed_ids) in LR order."""
    lrs = sorted(table)
    return [np.array(list(table[x].values())) for x in lrs], [np.array(list(table[x].keys())) for x in lrs]


def test_additive_model_removes_planted_seed_offsets_exactly():
    """loss = f(lr) + offset(seed), no other noise; seed 0 alone at the tails (as the planner
    trains them): the additive means are f(lr) + mean offset at every LR, the plain means are not."""
    f = {-9.0: 5.30, -8.5: 5.10, -8.0: 5.02, -7.5: 5.06, -7.0: 5.25}
    offset = {0: 0.12, 1: -0.05, 2: -0.04}  # mean 0.01
    seeds_at = {-9.0: [0], -8.5: [0, 1, 2], -8.0: [0, 1, 2], -7.5: [0, 1, 2], -7.0: [0]}
    table = {x: {s: f[x] + offset[s] for s in seeds_at[x]} for x in f}
    fit = curve_means(*_curve(table), "additive")
    assert fit.model == "additive"
    np.testing.assert_allclose(fit.means, [f[x] + 0.01 for x in sorted(f)], atol=1e-12)
    plain = curve_means(*_curve(table), "independent").means
    assert plain[0] == pytest.approx(5.30 + 0.12)  # seed 0's offset, not the average seed's
    # the model fits exactly: no residual noise, every bootstrap draw is the estimate
    draws = fit.resample(50, np.random.default_rng(0))
    np.testing.assert_allclose(draws, np.tile(fit.means, (50, 1)), atol=1e-12)


def test_balanced_design_gives_plain_means_and_smaller_noise():
    """Every seed at every LR: the additive means equal the seed means, and with offsets that
    dominate the noise the bootstrap spread of a difference between LRs shrinks."""
    rng = np.random.default_rng(1)
    lrs, seeds = [-9.0, -8.0, -7.0], [0, 1, 2, 3]
    offset = {s: 0.1 * rng.standard_normal() for s in seeds}
    table = {x: {s: 5.0 + 0.1 * x**2 / 64 + offset[s] + 0.005 * rng.standard_normal() for s in seeds} for x in lrs}
    add, ind = curve_means(*_curve(table), "additive"), curve_means(*_curve(table), "independent")
    np.testing.assert_allclose(add.means, ind.means, atol=1e-12)
    spread = {}
    for name, fit in (("additive", add), ("independent", ind)):
        d = fit.resample(4000, np.random.default_rng(2))
        spread[name] = float(np.std(d[:, 0] - d[:, 2]))
    assert spread["additive"] < 0.2 * spread["independent"], spread


def test_unlinked_seeds_fall_back_to_plain_means():
    """Each LR trained with its own seeds: no seed links two LRs, offsets are not identified."""
    table = {-9.0: {0: 5.2, 1: 5.3}, -8.0: {2: 5.0, 3: 5.1}, -7.0: {4: 5.4}}
    fit = curve_means(*_curve(table), "additive")
    assert fit.model == "independent"
    np.testing.assert_allclose(fit.means, [5.25, 5.05, 5.4])


def test_additive_residual_noise_level_is_unbiased():
    """Planted: offsets 0.1 and noise 0.02; the additive model's pooled residual variance
    (rss/df) estimates 0.02^2 over many curves, within 5%."""
    rng = np.random.default_rng(3)
    ests = []
    for _ in range(400):
        offset = 0.1 * rng.standard_normal(3)
        table = {x: {s: 5.0 + offset[s] + 0.02 * rng.standard_normal() for s in range(3)} for x in (-9.0, -8.0, -7.0)}
        table[-10.0] = {0: 5.0 + offset[0] + 0.02 * rng.standard_normal()}
        fit = curve_means(*_curve(table), "additive")
        ests.append(np.mean(fit._residuals**2))
    assert np.mean(ests) == pytest.approx(0.02**2, rel=0.05)


def test_empty_cells_stay_nan():
    table = {-9.0: {0: 5.2, 1: 5.3}, -8.0: {0: 5.0, 1: 5.1}}
    losses, ids = _curve(table)
    losses.append(np.array([]))
    ids.append(np.array([], dtype=int))
    fit = curve_means(losses, ids, "additive")
    assert fit.model == "additive" and np.isnan(fit.means[2])
    assert np.isnan(fit.resample(10, np.random.default_rng(0))[:, 2]).all()


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="seed model"):
        curve_means([np.array([1.0])], [np.array([0])], "mixed")


@pytest.mark.parametrize("model", ["independent", "additive"])
def test_a_curve_without_seed_noise_draws_the_borrowed_noise(model):
    """One seed (seed 0) at every LR: the curve has no residuals of its own (under either
    model), so without help every draw is the estimate; with borrowed residuals +-0.1 and a
    noise-level draw of 10^9 df (scale 1 to 1e-4), each cell's draw is its loss +- 0.1."""
    table = {-9.0: {0: 5.0}, -8.0: {0: 4.0}, -7.0: {0: 5.5}}
    fit = curve_means(*_curve(table), model)
    assert fit.noise_pool()[1] == 0
    np.testing.assert_allclose(fit.resample(20, np.random.default_rng(0)), np.tile([5.0, 4.0, 5.5], (20, 1)))
    draws = fit.resample(400, np.random.default_rng(0), borrowed=(np.array([0.1, -0.1]), 10**9))
    np.testing.assert_allclose(np.abs(draws - [5.0, 4.0, 5.5]), 0.1, rtol=1e-3)
    assert 150 < np.sum(draws[:, 1] > 4.0) < 250  # both signs, about equally often


def test_a_curve_with_its_own_noise_ignores_the_borrowed_noise():
    table = {-9.0: {0: 5.0, 1: 5.2}, -8.0: {0: 4.0}, -7.0: {0: 5.5, 1: 5.3}}
    fit = curve_means(*_curve(table), "independent")
    pool, df = fit.noise_pool()
    np.testing.assert_allclose(np.sort(pool), [-0.1 * np.sqrt(2)] * 2 + [0.1 * np.sqrt(2)] * 2)  # sqrt(n/(n-1))
    assert df == 2
    own = fit.resample(100, np.random.default_rng(3))
    np.testing.assert_array_equal(own, fit.resample(100, np.random.default_rng(3), borrowed=(np.array([9.0]), 5)))

"""`eval transfer --shared-base`: a base depth trained once stands for every preset."""

from __future__ import annotations

import pytest

from eval.results import ResultsError, read_results, share_base_depth
from eval.transfer import analyze
from tests.test_eval_transfer import HEADER, L0, depth_result, make_rows, notes_text, run_analysis, write_sweep


def _without_depth_mup_base(rows: list[dict]) -> list[dict]:
    return [r for r in rows if not (r["parametrization.preset"] == "depth_mup" and r["model.num_layers"] == L0)]


def test_shared_base_gives_every_preset_the_base_depth(tmp_path):
    full = make_rows(seeds=(0,), noise=0.0)
    sweep = read_results(write_sweep(tmp_path / "shared", _without_depth_mup_base(full)))
    shared = analyze(share_base_depth(sweep, "sp"), n_boot=0)
    reference = run_analysis(tmp_path / "full", full, n_boot=0)
    for fraction in (0.5, 1.0):
        _, got = depth_result(shared, "depth_mup", fraction, L0)
        _, want = depth_result(reference, "depth_mup", fraction, L0)
        # the planted depth_mup and sp curves coincide at L0, so sharing reproduces the full sweep
        assert got.is_base and got.optimum.log2_lr == pytest.approx(want.optimum.log2_lr, abs=1e-9)
        assert got.regret == pytest.approx(0.0, abs=1e-9)
    assert "base depth shared" in notes_text(shared)


def test_shared_base_rows_are_labelled_and_real_rows_win(tmp_path):
    rows = _without_depth_mup_base(make_rows(seeds=(0,), noise=0.0))
    sweep = share_base_depth(read_results(write_sweep(tmp_path, rows)), "sp")
    copies = sweep.rows[sweep.rows["run_id"].str.endswith("@depth_mup")]
    assert len(copies) == len([r for r in rows if r["parametrization.preset"] == "sp" and r["model.num_layers"] == L0])
    assert set(copies["preset"]) == {"depth_mup"} and set(copies["depth"]) == {L0}
    full = read_results(write_sweep(tmp_path / "full", make_rows(seeds=(0,), noise=0.0)))
    assert len(share_base_depth(full, "sp").rows) == len(full.rows)  # depth_mup has its own base rows


def test_shared_base_refuses_a_source_without_base_rows(tmp_path):
    rows = [r for r in make_rows(seeds=(0,)) if r["model.num_layers"] != L0]
    with pytest.raises(ResultsError, match="no rows of preset 'sp' at its base depth"):
        share_base_depth(read_results(write_sweep(tmp_path, rows)), "sp")


def test_shared_base_is_shared_within_each_variant(tmp_path):
    """With a swept block type, depth_mup's linear1 runs get sp's linear1 base rows, never the
    standard ones (a study with variants: launch/study.py)."""
    rows = []
    for block in ("standard", "linear1"):
        for r in _without_depth_mup_base(make_rows(seeds=(0,), noise=0.0)):
            rows.append({**r, "run_id": f"{r['run_id']}-{block}", "model.block": block})
    header = [*HEADER[:-4], "model.block", *HEADER[-4:]]  # an extra swept key sits before the tail columns
    sweep = share_base_depth(read_results(write_sweep(tmp_path, rows, header)), "sp")
    copies = sweep.rows[sweep.rows["run_id"].str.endswith("@depth_mup")]
    for block in ("standard", "linear1"):
        mine = copies[copies["model.block"] == block]
        assert len(mine) and all(rid.split("@")[0].endswith(f"-{block}") for rid in mine["run_id"])
    assert len(copies) == len([r for r in rows if r["parametrization.preset"] == "sp" and r["model.num_layers"] == L0])
    only_standard_sp = [r for r in rows if not (r["parametrization.preset"] == "sp" and r["model.block"] == "linear1"
                                                 and r["model.num_layers"] == L0)]  # fmt: skip
    with pytest.raises(ResultsError, match="no base-depth rows of 'sp' with {'model.block': 'linear1'}"):
        share_base_depth(read_results(write_sweep(tmp_path / "b", only_standard_sp, header)), "sp")


def test_shared_base_stands_for_custom_arms_of_any_alpha_and_gamma(tmp_path):
    """A study's custom arms (preset custom, told apart by their alpha and gamma columns) get the
    first arm's base-depth rows, each with its own alpha and gamma: at L = L0 the depth exponents
    change nothing. They used to be looked for as another variant and refused ("no base-depth rows")."""
    keys = ["parametrization.alpha", "parametrization.gamma"]
    rows = []
    for preset, alpha, gamma in (("sp", "", ""), ("custom", 0.5, 0.5), ("custom", 1.0, 0.0)):
        for r in make_rows(seeds=(0,), noise=0.0):
            if r["parametrization.preset"] != "sp" or (preset != "sp" and r["model.num_layers"] == L0):
                continue
            arm = {"parametrization.preset": preset, "parametrization.alpha": alpha, "parametrization.gamma": gamma}
            rows.append({**r, **arm, "run_id": f"{r['run_id']}-{preset}{alpha}"})
    header = [*HEADER[:-4], *keys, *HEADER[-4:]]
    sweep = read_results(write_sweep(tmp_path, rows, header))
    shared = share_base_depth(sweep, "sp")
    copies = shared.rows[shared.rows["run_id"].str.contains("@")]
    base = [r for r in rows if r["parametrization.preset"] == "sp" and r["model.num_layers"] == L0]
    assert len(copies) == 2 * len(base)
    assert {tuple(x) for x in copies[["preset", *keys]].values} == {("custom", "0.5", "0.5"), ("custom", "1.0", "0.0")}
    assert {rid.split("@")[1] for rid in copies["run_id"]} == {
        "custom[alpha=0.5,gamma=0.5]",
        "custom[alpha=1.0,gamma=0.0]",
    }
    result = analyze(shared, n_boot=0)
    assert {f.label for f in result.families} == {
        "sp", "custom (parametrization.alpha=0.5, parametrization.gamma=0.5)",
        "custom (parametrization.alpha=1.0, parametrization.gamma=0.0)",
    }  # fmt: skip
    # the source is itself a custom arm (a study whose first arm is custom): the other arm gets its rows
    from_custom = [r for r in rows if r["parametrization.preset"] == "custom"]
    for r in make_rows(seeds=(0,), noise=0.0):
        if r["parametrization.preset"] == "sp" and r["model.num_layers"] == L0:
            arm = {"parametrization.preset": "custom", "parametrization.alpha": 0.5, "parametrization.gamma": 0.5}
            from_custom.append({**r, **arm, "run_id": r["run_id"] + "-c"})
    shared = share_base_depth(read_results(write_sweep(tmp_path / "c", from_custom, header)), "custom")
    copies = shared.rows[shared.rows["run_id"].str.contains("@")]
    assert len(copies) == len(base) and set(copies["parametrization.alpha"]) == {"1.0"}
    # two sets of base rows of the source, either of which could stand for a third arm: refused
    twice = [*from_custom, *({**r, "parametrization.alpha": 1.0, "parametrization.gamma": 0.0, "run_id": r["run_id"] + "1"}
                              for r in from_custom if r["model.num_layers"] == L0)]  # fmt: skip
    twice = [r for r in twice if not (r["parametrization.alpha"] == 1.0 and r["model.num_layers"] != L0)]
    twice += [{**r, "parametrization.alpha": 0.25, "parametrization.gamma": 0.75, "run_id": r["run_id"] + "q"}
              for r in from_custom if r["parametrization.alpha"] == 1.0 and r["model.num_layers"] != L0]  # fmt: skip
    with pytest.raises(
        ResultsError, match=r"with several values of \['parametrization.alpha', 'parametrization.gamma'\]"
    ):
        share_base_depth(read_results(write_sweep(tmp_path / "t", twice, header)), "custom")

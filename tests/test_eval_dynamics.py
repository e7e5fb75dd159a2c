"""eval dynamics on planted diagnostics: known exponents against depth are recovered (with
CIs of a plausible width around them), expected exponents come from the resolved tables,
each depth's best LR is the one analysed, bad input is named."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from patches import ModelShape, Parametrization
from patches.rules import ROLES, resolve


def _table(preset: str, L: int) -> dict:
    r = resolve(Parametrization(preset=preset, base_num_layers=2, base_hidden_size=64), ModelShape(L, 64, 4))
    return {
        "preset": preset, "num_layers": L, "branch_multiplier": r.branch_multiplier, "optimizer_family": r.family,
        "roles": {role: {"lr_factor": r.roles[role].lr_factor, "init_std": r.roles[role].init_std} for role in ROLES},
    }  # fmt: skip


def _planted_run(root: Path, preset: str, L: int, seed: int, lr: float, loss: float, k: float, rng) -> None:
    """update_ratio = 0.01 * L^k and branch_rms = 0.1 * L^-1/2 (x 5% noise per layer), residual 1."""
    rd = root / "runs" / f"{preset}-L{L}-s{seed}-lr{lr}"
    rd.mkdir(parents=True)
    rows = []
    for step in (10, 20, 30, 40):
        for layer in range(L):
            noise = math.exp(rng.normal(0, 0.05))
            for role in ("hidden_in", "hidden_out"):
                rows.append({"step": step, "layer": layer, "role": role, "param": f"decoder.layers.{layer}.{role}",
                             "weight_rms": 1.0, "update_rms": 0.01 * L**k * noise, "update_ratio": 0.01 * L**k * noise})  # fmt: skip
            rows.append({"step": step, "layer": layer, "kind": "residual", "rms": 1.0 * noise})
            for kind in ("attention_branch", "mlp_branch"):
                rows.append({"step": step, "layer": layer, "kind": kind, "rms": 0.1 * L**-0.5 * noise})
        rows.append({"step": step, "layer": None, "role": "embedding", "param": "embedding.word_embeddings.weight",
                     "weight_rms": 0.02, "update_rms": 1e-3, "update_ratio": 0.05})  # fmt: skip
    (rd / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (rd / "parametrization.json").write_text(json.dumps(_table(preset, L)))
    summary = {"status": "completed", "preset": preset, "num_layers": L, "lr": lr, "seed": seed, "final_val_loss": loss}
    (rd / "summary.json").write_text(json.dumps(summary))


def test_planted_exponents_are_recovered(tmp_path):
    from eval.dynamics_cmd import write_dynamics

    rng = np.random.default_rng(0)
    for preset, k in (("depth_mup", -0.5), ("sp", 0.0)):
        for L in (2, 4, 8, 16):
            for seed in range(3):
                _planted_run(tmp_path, preset, L, seed, 0.01, 3.0, k, rng)
                _planted_run(tmp_path, preset, L, seed, 0.04, 3.5, 1.0, rng)  # worse LR: never selected
    result = write_dynamics([tmp_path], tmp_path / "out", fractions=(0.5, 1.0), n_boot=300)
    got = {(e["preset"], e["quantity"], e["fraction"]): e for e in result["exponents"]}
    for preset, k in (("depth_mup", -0.5), ("sp", 0.0)):
        for fraction in (0.5, 1.0):
            e = got[(preset, "update_ratio", fraction)]
            assert e["value"] == pytest.approx(k, abs=0.05), e  # 5% noise per layer and step
            assert e["ci"][0] <= e["value"] <= e["ci"][1] and 0.005 < e["ci"][1] - e["ci"][0] < 0.15, e
            assert e["expected"] == pytest.approx(k, abs=1e-9)  # Adam: lr_factor / init_std from the tables
            b = got[(preset, "branch_rms", fraction)]
            assert b["value"] == pytest.approx(-0.5, abs=0.05) and b["expected"] == pytest.approx(-0.5, abs=1e-9)
            assert got[(preset, "residual_rms", fraction)]["expected"] == 0.0
    assert {r["lr"] for r in result["runs"]} == {0.01}  # each depth's best LR by seed-mean loss
    assert (tmp_path / "out" / "dynamics.png").is_file() and "| depth_mup | update_ratio |" in result["markdown"]
    chosen = write_dynamics([tmp_path], tmp_path / "out2", lr=0.04, fractions=(1.0,), n_boot=50, figures=False)
    assert {r["lr"] for r in chosen["runs"]} == {0.04}


def test_no_diagnostics_is_a_named_error(tmp_path):
    from eval.__main__ import main

    (tmp_path / "runs" / "r1").mkdir(parents=True)
    assert main(["dynamics", str(tmp_path), "--out", str(tmp_path / "o")]) == 2


def _diag_run(rd: Path, preset: str, L: int, steps_k: dict[int, float], branch_of: dict | None = None) -> None:
    """update_ratio = 0.01 * L^k at each step with its own k (exact: no noise); a branch's summary names its source."""
    rd.mkdir(parents=True)
    rows = []
    for step, k in steps_k.items():
        for layer in range(L):
            for role in ("hidden_in", "hidden_out"):
                rows.append({"step": step, "layer": layer, "role": role, "param": f"decoder.layers.{layer}.{role}",
                             "weight_rms": 1.0, "update_rms": 0.01 * L**k, "update_ratio": 0.01 * L**k})  # fmt: skip
            rows.append({"step": step, "layer": layer, "kind": "residual", "rms": 1.0})
    if steps_k:
        (rd / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (rd / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "loss": 5.0}) + "\n")
    (rd / "parametrization.json").write_text(json.dumps(_table(preset, L)))
    summary = {"status": "completed", "preset": preset, "num_layers": L, "lr": 0.01, "seed": 0, "final_val_loss": 3.0}
    if branch_of:
        summary["branch_of"] = branch_of
    (rd / "summary.json").write_text(json.dumps(summary))


def test_a_branch_reads_its_sources_diagnostics_before_its_branch_step(tmp_path, monkeypatch):
    """Cooldown branches from step 20 of runs logged every 10 steps to 40: a branch's own
    diagnostics.jsonl starts at step 30. Planted: update_ratio ~ L^-1/2 up to step 20 (the source),
    L^+1/2 after (the branch). Fraction 0.25 of the branch's training is step 10, its source's:
    -0.5 (before, the nearest of the branch's own steps, 30, gave +0.5 and said nothing), said in
    dynamics.md and dynamics.json. The figure draws the source's rows (steps 10, 20) dashed and the
    branch's own (30, 40) solid from step 20, with the branch step marked; before, one solid line
    10..40 that did not say which rows were whose. A branch whose source logged no diagnostics is
    left out there."""
    import eval.dynamics_plots
    from eval.dynamics_cmd import write_dynamics

    figures = []
    save = eval.dynamics_plots.save_figure
    monkeypatch.setattr(eval.dynamics_plots, "save_figure", lambda fig, *a: figures.append(fig) or save(fig, *a))

    for L in (2, 4, 8):
        src = tmp_path / "stable" / "runs" / f"L{L}"
        _diag_run(src, "depth_mup", L, {10: -0.5, 20: -0.5})
        _diag_run(tmp_path / "cool" / "runs" / f"L{L}", "depth_mup", L, {30: 0.5, 40: 0.5},
                  {"run_dir": str(src), "run_id": f"L{L}", "step": 20})  # fmt: skip
    result = write_dynamics([tmp_path / "cool"], tmp_path / "out", fractions=(0.25, 0.5, 1.0), n_boot=50)
    got = {e["fraction"]: e for e in result["exponents"] if e["quantity"] == "update_ratio"}
    assert {f: round(e["value"], 6) for f, e in got.items()} == {0.25: -0.5, 0.5: -0.5, 1.0: 0.5}
    assert {f: e["runs_from_source"] for f, e in got.items()} == {0.25: 3, 0.5: 3, 1.0: 0}
    assert result["series"]["depth_mup"]["update_ratio"]["4"]["steps"] == [10, 20, 30, 40]
    assert result["series"]["depth_mup"]["update_ratio"]["4"]["source_steps"] == [10, 20]
    assert result["branch_steps"] == {"depth_mup": 20}
    panel = figures[0].axes[0]  # depth_mup's update_ratio against step
    drawn = [(line.get_linestyle(), list(line.get_xdata())) for line in panel.get_lines()]
    assert drawn == [("--", [10, 20]), ("-", [20, 30, 40])] * 3 + [(":", [20, 20])]
    assert [t.get_text() for t in panel.get_legend().get_texts()] == [
        "L=2", "L=4", "L=8", "branch step 20: dashed = source run's rows",
    ]  # fmt: skip
    text = (tmp_path / "out" / "dynamics.md").read_text()
    assert "depth_mup at fraction 0.25: 3 run(s) are cooldown branches whose rows there are their source's" in text
    assert "at fraction 1:" not in text

    # a source without diagnostics: the branch's early fractions are absent, not its step-30 rows
    for L in (2, 4):
        src = tmp_path / "quiet" / "runs" / f"L{L}"
        _diag_run(src, "sp", L, {})
        _diag_run(tmp_path / "cool2" / "runs" / f"L{L}", "sp", L, {30: 0.5, 40: 0.5},
                  {"run_dir": str(src), "run_id": f"L{L}", "step": 20})  # fmt: skip
    result = write_dynamics([tmp_path / "cool2"], tmp_path / "out2", fractions=(0.25, 1.0), n_boot=50)
    got = {e["fraction"]: e for e in result["exponents"] if e["quantity"] == "update_ratio"}
    assert got[0.25]["value"] is None and got[0.25]["runs_absent_before_branch"] == 2
    assert round(got[1.0]["value"], 6) == 0.5
    assert (
        "sp at fraction 0.25: 2 branch run(s) are left out: their source logged no diagnostics"
        in (tmp_path / "out2" / "dynamics.md").read_text()
    )


def _family_run(root: Path, run_id: str, preset: str, L: int, lr: float, seed: int, loss: float, k: float, rng,
                table: dict | None = None) -> None:  # fmt: skip
    """update_ratio = 0.01 * L^k (x 2% noise per layer and step) at steps 10..40; a run of a sweep (runs/<ID>)."""
    rd = root / "runs" / run_id
    rd.mkdir(parents=True)
    rows = []
    for step in (10, 20, 30, 40):
        for layer in range(L):
            value = 0.01 * L**k * math.exp(rng.normal(0, 0.02))
            for role in ("hidden_in", "hidden_out"):
                rows.append({"step": step, "layer": layer, "role": role, "param": f"decoder.layers.{layer}.{role}",
                             "weight_rms": 1.0, "update_rms": value, "update_ratio": value})  # fmt: skip
            rows.append({"step": step, "layer": layer, "kind": "residual", "rms": 1.0})
    (rd / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (rd / "parametrization.json").write_text(json.dumps(table or _table(preset, L)))
    summary = {"status": "completed", "preset": preset, "num_layers": L, "lr": lr, "seed": seed, "final_val_loss": loss}
    (rd / "summary.json").write_text(json.dumps(summary))


def test_families_of_a_sweep_are_fitted_apart(tmp_path, capsys):
    """A cooldown-like sweep: two floors (optimizer.min_lr_ratio 0.0 and 0.1) at the same preset,
    depths, LRs and seeds. Planted at the best LR 0.01: update_ratio ~ L^-1/2 with floor 0.0,
    L^+1/2 with floor 0.1 (LR 0.04, worse loss: L^2, never selected). Each family gets its own
    exponent, label and place as eval transfer gives them; before, both floors were pooled as
    seeds of one 'depth_mup' (exponent ~0). --where keeps one floor, --presets is checked."""
    from eval.__main__ import main
    from eval.curves import build_curves
    from eval.dynamics import DynamicsError
    from eval.dynamics_cmd import write_dynamics
    from eval.results import read_results
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    rng = np.random.default_rng(1)
    header = ["run_id", *CANONICAL_KEYS, "optimizer.min_lr_ratio", *TAIL_COLUMNS]
    lines = [",".join(header)]
    for floor, k in (("0.1", 0.5), ("0.0", -0.5)):  # the table's row order is not the report's
        for L in (2, 4, 8):
            for lr, loss, planted in ((0.01, 3.0, k), (0.04, 3.5, 2.0)):
                for seed in (0, 1):
                    run_id = f"f{floor}-L{L}-lr{lr}-s{seed}"
                    _family_run(tmp_path, run_id, "depth_mup", L, lr, seed, loss, planted, rng)
                    lines.append(f"{run_id},depth_mup,{L},{lr},{seed},1.0,2,64,{floor},completed,40,1.0,{loss}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")

    result = write_dynamics([tmp_path], tmp_path / "out", fractions=(0.5, 1.0), n_boot=200)
    labels = ["depth_mup (optimizer.min_lr_ratio=0.0)", "depth_mup (optimizer.min_lr_ratio=0.1)"]
    assert result["families"] == labels == [f.label for f in build_curves(read_results(tmp_path), [1.0]).families]
    got = {(e["family"], e["fraction"]): e for e in result["exponents"] if e["quantity"] == "update_ratio"}
    for label, k in zip(labels, (-0.5, 0.5)):
        for fraction in (0.5, 1.0):
            e = got[(label, fraction)]
            assert e["value"] == pytest.approx(k, abs=0.03), e
            assert e["ci"][0] <= e["value"] <= e["ci"][1] and e["runs_per_depth"] == {"2": 2, "4": 2, "8": 2}
    assert {(r["family"], r["lr"]) for r in result["runs"]} == {(labels[0], 0.01), (labels[1], 0.01)}
    text = (tmp_path / "out" / "dynamics.md").read_text()
    assert text.index(f"| {labels[0]} | update_ratio | 1 | -0.") < text.index(f"| {labels[1]} | update_ratio | 1 | +0.")
    assert set(result["series"]) == set(labels)

    one = write_dynamics([tmp_path], tmp_path / "o2", fractions=(1.0,), n_boot=50, figures=False,
                         where=[("optimizer.min_lr_ratio", "0.1")])  # fmt: skip
    assert one["families"] == ["depth_mup"]  # alone, nothing tells it apart: transfer's label too
    assert {r["run_dir"].split("/")[-1][:4] for r in one["runs"]} == {"f0.1"}
    assert [round(e["value"], 1) for e in one["exponents"] if e["quantity"] == "update_ratio"] == [0.5]
    with pytest.raises(DynamicsError, match=r"--where optimizer.min_lr_ratio=0.5: no row has it"):
        write_dynamics([tmp_path], tmp_path / "o3", figures=False, where=[("optimizer.min_lr_ratio", "0.5")])
    # --presets as eval transfer checks it: one message (eval.results.check_presets); before, another wording
    said = f"{tmp_path / 'results.csv'}: preset(s) ['sp'] not in column 'parametrization.preset'; found ['depth_mup']"
    with pytest.raises(DynamicsError) as refused:
        write_dynamics([tmp_path], tmp_path / "o4", figures=False, presets=["sp"])
    assert str(refused.value) == said
    for command in ("dynamics", "transfer"):
        capsys.readouterr()
        assert main([command, str(tmp_path), "--out", str(tmp_path / f"o4{command}"), "--presets", "sp"]) == 2
        assert capsys.readouterr().err == f"error: {said}\n", command
    assert main(["dynamics", str(tmp_path), "--out", str(tmp_path / "o5"), "--no-figures", "--bootstrap", "20",
                 "--where", "optimizer.min_lr_ratio=0.0", "--presets", "depth_mup"]) == 0  # fmt: skip


def test_custom_arms_without_a_table_are_fitted_apart(tmp_path):
    """Run directories given without results.csv: two custom arms (alpha 1/2 and alpha 1) at the
    same depths and LR are two families, labelled as eval transfer labels them (their alpha and
    gamma from parametrization.json), with their own planted exponents; depth_mup beside them."""
    from eval.dynamics_cmd import write_dynamics

    rng = np.random.default_rng(2)
    for name, alpha, gamma, k in (("a100", 1.0, 0.0, 0.5), ("a050", 0.5, 0.5, -0.5), ("dm", None, None, 0.0)):
        for L in (2, 4, 8):
            table = _table("depth_mup", L)
            if alpha is not None:
                table.update(preset="custom", alpha=alpha, gamma=gamma)
            _family_run(tmp_path, f"{name}-L{L}", "depth_mup" if alpha is None else "custom", L, 0.01, 0, 3.0, k,
                        rng, table)  # fmt: skip
    result = write_dynamics([tmp_path], tmp_path / "out", fractions=(1.0,), n_boot=50, figures=False)
    labels = [
        "custom (parametrization.alpha=0.5, parametrization.gamma=0.5)",
        "custom (parametrization.alpha=1.0, parametrization.gamma=0.0)",
        "depth_mup",
    ]
    assert result["families"] == labels
    got = {e["family"]: e["value"] for e in result["exponents"] if e["quantity"] == "update_ratio"}
    assert got == pytest.approx(dict(zip(labels, (-0.5, 0.5, 0.0))), abs=0.03)


def test_load_run_reads_a_branchs_summary_once(tmp_path, monkeypatch):
    """load_run read a branch's summary.json three times (the join's branch_source, its own
    branch_source, read_summary); now once, and its source's once (the join)."""
    import rundir.files
    from eval.dynamics import load_run

    src, branch = tmp_path / "stable" / "runs" / "L4", tmp_path / "cool" / "runs" / "L4"
    _diag_run(src, "depth_mup", 4, {10: -0.5, 20: -0.5})
    _diag_run(branch, "depth_mup", 4, {30: 0.5}, {"run_dir": str(src), "run_id": "L4", "step": 20})
    read: list[Path] = []
    real = rundir.files.read_summary

    def counting(run_dir):
        read.append(Path(run_dir))
        return real(run_dir)

    monkeypatch.setattr(rundir.files, "read_summary", counting)
    monkeypatch.setattr("eval.dynamics.read_summary", counting)
    run = load_run(branch)
    assert run.branch_step == 20 and run.steps == [10, 20, 30] and run.inherited_steps == {10, 20}
    assert read == [branch, src]


def _valued_run(
    root: Path, run_id: str, preset: str, L: int, value: float, lr: float = 0.01, loss: float = 3.0
) -> None:
    """update_ratio = ``value`` exactly (every layer and step 10..40, no noise); a run of a sweep."""
    rd = root / "runs" / run_id
    rd.mkdir(parents=True)
    rows = [{"step": step, "layer": layer, "role": role, "param": f"decoder.layers.{layer}.{role}", "weight_rms": 1.0,
             "update_rms": value, "update_ratio": value}
            for step in (10, 20, 30, 40) for layer in range(L) for role in ("hidden_in", "hidden_out")]  # fmt: skip
    (rd / "diagnostics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (rd / "parametrization.json").write_text(json.dumps(_table(preset, L)))
    summary = {"status": "completed", "preset": preset, "num_layers": L, "lr": lr, "seed": 0, "final_val_loss": loss}
    (rd / "summary.json").write_text(json.dumps(summary))


def test_depths_and_shared_base_choose_the_runs_as_eval_transfer_does(tmp_path):
    """A sweep that trained the base depth L0=2 once, as sp: sp at L = 2, 4, 8 with update_ratio
    0.01, 0.01, 0.04; depth_mup at L = 4, 8 only, with 0.04, 0.04. Least squares of ln q on ln L:
    sp over (2, 4, 8) is +1.0, over (4, 8) (--depths 4 8) +2.0; depth_mup over (4, 8) is 0.0, and
    with --shared-base sp (sp's L=2 run, 0.01, stands for depth_mup's) +1.0 over (2, 4, 8). The
    options are eval transfer's own (one parser, the same help), and so is their order: --depths
    before --shared-base, so --depths 4 8 --shared-base sp finds no base run to share, exit 2 as in
    eval transfer. Before, eval dynamics had neither option (exit 2: unrecognized arguments)."""
    import argparse

    from eval import dynamics_cmd, transfer_cmd
    from eval.__main__ import main
    from eval.dynamics import DynamicsError
    from eval.dynamics_cmd import write_dynamics
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    lines = [",".join(["run_id", *CANONICAL_KEYS, *TAIL_COLUMNS])]
    for preset, values in (("sp", {2: 0.01, 4: 0.01, 8: 0.04}), ("depth_mup", {4: 0.04, 8: 0.04})):
        for L, value in values.items():
            _valued_run(tmp_path, f"{preset}-L{L}", preset, L, value)
            lines.append(f"{preset}-L{L},{preset},{L},0.01,0,1.0,2,64,completed,40,1.0,3.0")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")

    def exponents(**options) -> dict[str, tuple[float, list[int]]]:
        result = write_dynamics([tmp_path], tmp_path / "out", fractions=(1.0,), n_boot=20, figures=False, **options)
        return {e["family"]: (round(e["value"], 6), e["depths"]) for e in result["exponents"]
                if e["quantity"] == "update_ratio"}  # fmt: skip

    assert exponents() == {"sp": (1.0, [2, 4, 8]), "depth_mup": (0.0, [4, 8])}
    assert exponents(depths=[4, 8]) == {"sp": (2.0, [4, 8]), "depth_mup": (0.0, [4, 8])}
    assert exponents(shared_base="sp") == {"sp": (1.0, [2, 4, 8]), "depth_mup": (1.0, [2, 4, 8])}
    result = json.loads((tmp_path / "out" / "dynamics.json").read_text())
    assert {(r["family"], r["num_layers"], r.get("shared_base", False)) for r in result["runs"] if r["num_layers"] == 2} \
        == {("sp", 2, False), ("depth_mup", 2, True)}  # fmt: skip
    said = "base depth shared: the runs of 'sp' at L = L0 also stand for 'depth_mup'"
    assert any(n.startswith(said) for n in result["notes"]) and said in (tmp_path / "out" / "dynamics.md").read_text()
    with pytest.raises(DynamicsError, match=r"--shared-base sp: no rows of preset 'sp' at its base depth"):
        exponents(depths=[4, 8], shared_base="sp")
    with pytest.raises(DynamicsError, match=r"--depths \[16\] not in column 'model.num_layers' \(swept: \[2, 4, 8\]\)"):
        exponents(depths=[16])
    out = ["--out", str(tmp_path / "o"), "--no-figures", "--bootstrap", "10", "--fractions", "1.0"]
    assert main(["dynamics", str(tmp_path), *out, "--depths", "4", "8", "--shared-base", "sp"]) == 2
    assert main(["dynamics", str(tmp_path), *out, "--shared-base", "sp", "--depths", "2", "4"]) == 0

    def options(module) -> dict[str, tuple]:
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        return {a.option_strings[0]: (a.dest, a.nargs, a.type, a.default, a.help) for a in parser._actions
                if a.option_strings}  # fmt: skip

    transfer, dynamics = options(transfer_cmd), options(dynamics_cmd)
    for name in ("--presets", "--where", "--ignore-columns", "--depths", "--shared-base"):
        assert dynamics[name] == transfer[name], name


def test_runs_without_diagnostics_still_name_the_families_as_eval_transfer_does(tmp_path):
    """A sweep of two floors whose optimizer.min_lr_ratio=0.1 runs are still pending (no run
    directory yet): eval transfer labels the finished family 'depth_mup (optimizer.min_lr_ratio=0.0)'
    (its labels come from every row of results.csv), and so does eval dynamics now, saying that
    4 of the 8 runs (4 pending) have no diagnostics. Before, its families were made from the runs
    with diagnostics only: 'depth_mup', another name for the same runs, and nothing said."""
    from eval.curves import build_curves
    from eval.dynamics_cmd import write_dynamics
    from eval.results import read_results
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    rng = np.random.default_rng(3)
    lines = [",".join(["run_id", *CANONICAL_KEYS, "optimizer.min_lr_ratio", *TAIL_COLUMNS])]
    for floor, status in (("0.0", "completed"), ("0.1", "pending")):
        for L in (2, 4):
            for seed in (0, 1):
                run_id = f"f{floor}-L{L}-s{seed}"
                if status == "completed":
                    _family_run(tmp_path, run_id, "depth_mup", L, 0.01, seed, 3.0, -0.5, rng)
                loss = "3.0" if status == "completed" else ""
                lines.append(f"{run_id},depth_mup,{L},0.01,{seed},1.0,2,64,{floor},{status},40,1.0,{loss}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    result = write_dynamics([tmp_path], tmp_path / "out", fractions=(1.0,), n_boot=20, figures=False)
    transfer = [f.label for f in build_curves(read_results(tmp_path), [1.0]).families]
    assert transfer == ["depth_mup (optimizer.min_lr_ratio=0.0)", "depth_mup (optimizer.min_lr_ratio=0.1)"]
    assert result["families"] == transfer[:1]
    assert len(result["runs"]) == 4
    said = "4 of 8 runs have no diagnostics rows and were left out (4 pending)"
    assert any(n.startswith(said) for n in result["notes"]) and said in (tmp_path / "out" / "dynamics.md").read_text()


def test_the_figure_keeps_nine_long_family_labels_apart(tmp_path, monkeypatch):
    """Nine cooldown families with labels of three swept keys (a stable sweep read with its WSD
    cooldowns, as `eval dynamics sweeps/wsd_stable sweeps/wsd_cooldown` gives them): each panel's
    title is wrapped inside its own width (no two titles of a row overlap), and the exponent panels
    share one legend under them, one entry per family, inside the figure and clear of the panels.
    Before, an 80-character label ran into its neighbour's title and each exponent panel had its own
    legend of 18 entries drawn over its points."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import eval.dynamics_plots as dp
    from eval.dynamics import QUANTITIES

    families = ["sp"] + [f"sp (optimizer.min_lr_ratio={r}, scheduler.wsd_decay_steps={c}, branch_of.step={s})"
                         for r in ("0.0", "0.1") for c in (2, 6) for s in (6, 18)]  # fmt: skip
    fractions = [0.25, 0.5, 1.0]
    series = {q: {str(L): {"steps": [3, 6, 9], "values": [1.0, 0.5, 0.25], "source_steps": [3, 6]} for L in (2, 4)}
              for q in QUANTITIES}  # fmt: skip
    result = {
        "families": families, "fractions": fractions, "series": {f: series for f in families},
        "branch_steps": {f: 6 for f in families},
        "exponents": [{"family": f, "quantity": q, "fraction": x, "value": 0.1 * i, "ci": [0.1 * i - 0.05, 0.1 * i + 0.05],
                       "expected": -0.5} for i, f in enumerate(families) for q in QUANTITIES for x in fractions],
    }  # fmt: skip
    figures = []
    monkeypatch.setattr(dp, "save_figure", lambda fig, *a: figures.append((fig, a[1])) or [])
    dp.plot(result, tmp_path / "dynamics")
    # nine families: the exponents in dynamics, the step panels four families a figure (4 + 4 + 1)
    assert [name for _, name in figures] == ["dynamics", "dynamics_steps_1", "dynamics_steps_2", "dynamics_steps_3"]
    all_rows = []
    for fig, _ in figures:
        renderer = FigureCanvasAgg(fig).get_renderer()
        fig.draw(renderer)
        axes = fig.axes
        rows = [axes[i : i + len(QUANTITIES)] for i in range(0, len(axes), len(QUANTITIES))]
        all_rows.append(len(rows))
        for row in rows:
            boxes = [ax.title.get_window_extent(renderer) for ax in row]
            for left, right in zip(boxes, boxes[1:]):
                assert left.x1 <= right.x0, (left, right)  # titles side by side, not over each other
    assert all_rows == [1, 4, 4, 1]
    assert figures[1][0].axes[4].get_title().count("\n") == 2  # the long label over two lines, then the quantity
    fig = figures[0][0]
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    rows = [fig.axes]
    assert all(ax.get_legend() is None for ax in rows[-1])
    (legend,) = fig.legends
    assert [t.get_text().replace("\n  ", " ") for t in legend.get_texts()] == families
    box, whole = legend.get_window_extent(renderer), fig.get_window_extent(renderer)
    assert box.y0 >= -0.5 and box.x0 >= -0.5 and box.x1 <= whole.x1 + 0.5
    assert all(box.y1 <= ax.xaxis.label.get_window_extent(renderer).y0 for ax in rows[-1])  # under the panels
    points = [line for line in rows[-1][0].get_lines() if line.get_linestyle() == "None" and line.get_marker() != "_"]
    xs = sorted(x for line in points for x in line.get_xdata())
    assert len(xs) == 9 * 3 and [round(x, 2) for x in xs[:9]] == [0.17, 0.19, 0.21, 0.23, 0.25, 0.27, 0.29, 0.31, 0.33]
    assert max(xs[9:18]) - min(xs[9:18]) <= 0.16 + 1e-9 and min(xs[9:18]) > 0.25 + 0.125  # nearer 0.5 than 0.25


def test_the_report_says_the_tables_and_runs_it_read_as_eval_transfer_counts_them(tmp_path):
    """Two sweeps read as one table (a stable sweep: sp at L = 2, 4, 8 with LRs 0.01 and 0.04; a
    second: sp at L = 2, 4 at 0.01 with optimizer.min_lr_ratio=0.1): dynamics.md says 'read as one
    table: A (6 runs), B (2 runs)' as eval transfer prints it, and '5 of 8 runs with diagnostics
    analysed' (per family and depth the best LR's seeds: 3 + 2). The expected exponent of sp's
    update_ratio is +0.000 (before, -0.000: a least-squares slope of -1e-17). Before, none of this."""
    from eval.dynamics_cmd import write_dynamics
    from eval.results import read_results
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    header = ["run_id", *CANONICAL_KEYS, *TAIL_COLUMNS]
    stable, floor = tmp_path / "stable", tmp_path / "floor"
    lines = [",".join(header)]
    for L in (2, 4, 8):
        for lr, loss in ((0.01, 3.0), (0.04, 3.5)):
            _valued_run(stable, f"L{L}-{lr}", "sp", L, 0.01 * L if lr == 0.01 else 1.0, lr, loss)
            lines.append(f"L{L}-{lr},sp,{L},{lr},0,1.0,2,64,completed,40,1.0,{loss}")
    (stable / "results.csv").write_text("\n".join(lines) + "\n")
    lines = [",".join([*header[:8], "optimizer.min_lr_ratio", *TAIL_COLUMNS])]
    for L in (2, 4):
        _valued_run(floor, f"F{L}", "sp", L, 0.01)
        lines.append(f"F{L},sp,{L},0.01,0,1.0,2,64,0.1,completed,40,1.0,3.0")
    (floor / "results.csv").write_text("\n".join(lines) + "\n")
    result = write_dynamics([stable, floor], tmp_path / "out", fractions=(1.0,), n_boot=20, figures=False)
    text = (tmp_path / "out" / "dynamics.md").read_text()
    said = f"read as one table: {stable / 'results.csv'} (6 runs), {floor / 'results.csv'} (2 runs)"
    assert read_results([stable, floor]).runs_per_file() == [
        (str(stable / "results.csv"), 6),
        (str(floor / "results.csv"), 2),
    ]
    assert said in result["notes"] and said in text
    assert "5 of 8 runs with diagnostics analysed: per family and depth, every seed at the LR with the lowest" in text
    got = {e["family"]: e for e in result["exponents"] if e["quantity"] == "update_ratio"}
    assert list(got) == ["sp", "sp (optimizer.min_lr_ratio=0.1)"]
    assert got["sp"]["value"] == pytest.approx(1.0) and got["sp (optimizer.min_lr_ratio=0.1)"][
        "value"
    ] == pytest.approx(0.0)
    assert math.copysign(1.0, got["sp"]["expected"]) == 1.0 and "-0.000" not in text


def test_the_runs_at_the_best_lr_are_the_ones_eval_transfer_finds_best(tmp_path):
    """A hand-made results.csv that disagrees with the runs' summary.json: the summaries say LR
    0.01 ends lower (3.0 against 3.5), the table says 0.04 does at the end (fraction 1: 3.0 against
    3.5; at 0.5 the other way round). Planted update_ratio ~ L^-1/2 at 0.01 and L^+1/2 at 0.04.
    eval dynamics now analyses the table's best LR, the best grid point eval transfer reports
    (transfer.json's best_grid): exponent +0.5 over the runs at 0.04, and a run of the table without
    summary.json is read from its row. Before, it took the summaries' best LR (exponent -0.5) and
    refused the run without summary.json."""
    from eval.dynamics_cmd import write_dynamics
    from eval.results import read_results
    from eval.transfer import analyze
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    rng = np.random.default_rng(5)
    lines = [",".join(["run_id", *CANONICAL_KEYS, *TAIL_COLUMNS])]
    for L in (2, 4, 8):
        for lr, summary_loss, end_loss, k in ((0.01, 3.0, 3.5, -0.5), (0.04, 3.5, 3.0, 0.5)):
            for seed in (0, 1):
                run_id = f"L{L}-lr{lr}-s{seed}"
                _family_run(tmp_path, run_id, "depth_mup", L, lr, seed, summary_loss, k, rng)
                lines.append(f"{run_id},depth_mup,{L},{lr},{seed},1.0,2,64,completed,20,0.5,{6.5 - end_loss}")
                lines.append(f"{run_id},depth_mup,{L},{lr},{seed},1.0,2,64,completed,40,1.0,{end_loss}")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    (tmp_path / "runs" / "L4-lr0.04-s1" / "summary.json").unlink()

    result = write_dynamics([tmp_path], tmp_path / "out", fractions=(1.0,), n_boot=100, figures=False)
    assert sorted((r["num_layers"], r["lr"], r["seed"]) for r in result["runs"]) == [
        (L, 0.04, s) for L in (2, 4, 8) for s in (0, 1)
    ]
    (e,) = [e for e in result["exponents"] if e["quantity"] == "update_ratio"]
    assert e["value"] == pytest.approx(0.5, abs=0.03) and e["runs_per_depth"] == {"2": 2, "4": 2, "8": 2}
    transfer = analyze(read_results(tmp_path), fractions=[1.0], n_boot=0)
    assert {d.depth: 2.0 ** d.best_grid[0] for d in transfer.results[0].depths} == pytest.approx(
        {2: 0.04, 4: 0.04, 8: 0.04}
    )


def test_a_partly_diverged_lr_counts_its_diverged_seeds_as_eval_transfer_does(tmp_path):
    """Run directories given alone (no results.csv), L = 2 and 4, LRs 0.01, 0.02, 0.04 with two
    seeds: at 0.01 both end at 3.0, at 0.04 both at 4.0, at 0.02 seed 0 ends at 2.9 and seed 1
    diverged. eval transfer counts the diverged seed at the depth's worst finished loss (4.0): 0.02
    is (2.9 + 4.0) / 2 = 3.45 > 3.0, so 0.01 is the best LR (planted L^-1/2 there, L^+1/2 at 0.02).
    Before, eval dynamics averaged the survivor alone (2.9) and analysed 0.02 (exponent +0.5)."""
    from eval.dynamics_cmd import write_dynamics

    rng = np.random.default_rng(6)
    for L in (2, 4):
        for lr, losses, k in ((0.01, (3.0, 3.0), -0.5), (0.02, (2.9, None), 0.5), (0.04, (4.0, 4.0), 2.0)):
            for seed, loss in enumerate(losses):
                run_id = f"L{L}-lr{lr}-s{seed}"
                _family_run(tmp_path, run_id, "depth_mup", L, lr, seed, loss, k, rng)
                if loss is None:
                    path = tmp_path / "runs" / run_id / "summary.json"
                    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "diverged"}))
    result = write_dynamics([tmp_path], tmp_path / "out", fractions=(1.0,), n_boot=50, figures=False)
    assert sorted((r["num_layers"], r["lr"]) for r in result["runs"]) == [(2, 0.01), (2, 0.01), (4, 0.01), (4, 0.01)]
    (e,) = [e for e in result["exponents"] if e["quantity"] == "update_ratio"]
    assert e["value"] == pytest.approx(-0.5, abs=0.03)


def test_sixteen_families_are_drawn_over_figures_a_page_tall(tmp_path):
    """A sweep of 16 floors (optimizer.min_lr_ratio 0.00 .. 0.15) at L = 2, 4: the exponents of
    every family in dynamics.png (one row of panels, one legend of 16 entries), the step panels
    four families a figure in dynamics_steps_1..4.png, each at most 4 panel rows plus its titles
    tall (under 16 inches), every one linked from dynamics.md. Before: one dynamics.png of 17 panel
    rows, about 58 inches tall."""
    from PIL import Image

    from eval.dynamics_cmd import write_dynamics
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    rng = np.random.default_rng(7)
    lines = [",".join(["run_id", *CANONICAL_KEYS, "optimizer.min_lr_ratio", *TAIL_COLUMNS])]
    for i in range(16):
        for L in (2, 4):
            run_id = f"f{i}-L{L}"
            _family_run(tmp_path, run_id, "depth_mup", L, 0.01, 0, 3.0, -0.5, rng)
            lines.append(f"{run_id},depth_mup,{L},0.01,0,1.0,2,64,{i / 100:.2f},completed,40,1.0,3.0")
    (tmp_path / "results.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    result = write_dynamics([tmp_path], out, fractions=(1.0,), n_boot=10)
    pngs = ["dynamics.png", *(f"dynamics_steps_{i}.png" for i in (1, 2, 3, 4))]
    assert [f for f in result["files"] if f.endswith(".png")] == pngs
    assert {f for f in result["files"] if f.endswith(".pdf")} == {p.replace(".png", ".pdf") for p in pngs}
    text = (out / "dynamics.md").read_text()
    for name in pngs:
        with Image.open(out / name) as image:
            width, height = image.size
        assert height <= 16 * 150 and width == 4 * 4.2 * 150, (name, image.size)  # 150 dpi, 4 panels wide
        assert f"]({name})" in text
    assert len(result["families"]) == 16


def test_selection_errors_of_run_directories_name_what_was_read(tmp_path, capsys):
    """Run directories given alone (no results.csv): --presets and --depths name what was read,
    their summary.json files, not a results.csv column. Before: "the run directories given:
    preset(s) ['ode'] not in column 'parametrization.preset'", a column of no file given."""
    from eval.__main__ import main

    rng = np.random.default_rng(8)
    for L in (2, 4):
        _family_run(tmp_path, f"sp-L{L}", "sp", L, 0.01, 0, 3.0, 0.0, rng)
    dirs = [str(tmp_path / "runs" / f"sp-L{L}") for L in (2, 4)]
    out = ["--out", str(tmp_path / "o"), "--no-figures", "--bootstrap", "5"]
    assert main(["dynamics", *dirs, *out, "--presets", "ode"]) == 2
    said = (
        "the run directories given: preset(s) ['ode'] not among the presets their summary.json files name; found ['sp']"
    )
    assert capsys.readouterr().err == f"error: {said}\n"
    assert main(["dynamics", *dirs, *out, "--depths", "8"]) == 2
    said = "the run directories given: --depths [8] not among the depths their summary.json files name (swept: [2, 4])"
    assert capsys.readouterr().err == f"error: {said}\n"


def _folder_sweep(root: Path) -> list[str]:
    """A planted sweep: depth_mup at L = 2, 4, 8, one seed; update_ratio ~ L^-1/2 at LR 0.0156 (the
    best: loss 3.0; 0.0039 and 0.0625 worse: 3.2 and 3.3, planted L^+1), and LR 4.0 diverged at
    step 1, before any diagnostics row. Every run has metrics.jsonl (2 train rows; the diverged 1)."""
    from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS

    rng = np.random.default_rng(11)
    lines = [",".join(["run_id", *CANONICAL_KEYS, *TAIL_COLUMNS])]
    for L in (2, 4, 8):
        for lr, loss, k in ((0.0039, 3.2, 1.0), (0.0156, 3.0, -0.5), (0.0625, 3.3, 1.0)):
            run_id = f"L{L}-lr{lr}"
            _family_run(root, run_id, "depth_mup", L, lr, 0, loss, k, rng)
            (root / "runs" / run_id / "metrics.jsonl").write_text(
                "".join(json.dumps({"kind": "train", "step": s, "loss": 6.0 - s / 10}) + "\n" for s in (10, 20))
            )
            lines.append(f"{run_id},depth_mup,{L},{lr},0,1.0,2,64,completed,40,1.0,{loss}")
        rd = root / "runs" / f"L{L}-lr4.0"
        rd.mkdir()
        summary = {"status": "diverged", "preset": "depth_mup", "num_layers": L, "lr": 4.0, "seed": 0, "steps": 1}
        (rd / "summary.json").write_text(json.dumps(summary))
        (rd / "metrics.jsonl").write_text(json.dumps({"kind": "train", "step": 1, "loss": 40.0}) + "\n")
        lines.append(f"L{L}-lr4.0,depth_mup,{L},4.0,0,1.0,2,64,diverged,1,1.0,")
    (root / "results.csv").write_text("\n".join(lines) + "\n")
    return lines


def test_every_eval_command_reads_a_sweep_its_runs_folder_and_its_run_directories(tmp_path, capsys):
    """`eval dynamics`, `loss-curves` and `transfer` given a sweep's runs/ folder read it as the sweep
    (rundir.files.locate_runs, one reading of a path) and say so: the same planted exponent -0.5, the
    same 12 curves (21 rows), the same best LR. Before, each failed: "no diagnostics.jsonl", "neither
    a sweep directory nor a run directory", "runs/results.csv: file not found". Run directories of the
    sweep given to transfer: those runs' rows of its table. The 3 runs that diverged before their
    first diagnostics row are named as diverged (before: "trained without
    logging.diagnostics_interval, or ended before its first diagnostics step"), and so is a lone one."""
    from eval.__main__ import main
    from eval.dynamics_cmd import write_dynamics

    _folder_sweep(tmp_path)
    runs = tmp_path / "runs"
    exponents, notes = [], []
    for path in (tmp_path, runs):
        result = write_dynamics([path], tmp_path / "dyn", fractions=(1.0,), n_boot=20, figures=False)
        (e,) = [e for e in result["exponents"] if e["quantity"] == "update_ratio"]
        exponents.append(e["value"])
        notes.append(result["notes"])
    assert exponents[0] == pytest.approx(-0.5, abs=0.03) and exponents[1] == exponents[0]
    said = "3 of 12 runs have no diagnostics rows and were left out (3 diverged before their first diagnostics row)"
    assert said in notes[0] and said in notes[1]
    assert f"read {runs}: the runs/ folder of sweep {tmp_path} (12 run directories; results.csv there)" in notes[1]

    out = ["--no-figures"]
    assert main(["loss-curves", str(runs), "--out", str(tmp_path / "lc"), *out]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"read {runs}: the runs/ folder of sweep {tmp_path} (12 run directories")
    assert len((tmp_path / "lc" / "loss_curves.csv").read_text().splitlines()) == 1 + 9 * 2 + 3

    best = []
    for paths in ([tmp_path], [runs]):
        assert main(["transfer", *map(str, paths), "--out", str(tmp_path / "tr"), "--bootstrap", "0", *out]) == 0
        depths = json.loads((tmp_path / "tr" / "transfer.json").read_text())["results"][0]["depths"]
        best.append([d["best_grid"]["lr"] for d in depths])
    assert best == [[0.0156] * 3] * 2
    chosen = [str(runs / f"L{L}-lr{lr}") for L in (2, 4) for lr in (0.0039, 0.0156, 0.0625)]
    assert main(["transfer", *chosen, "--out", str(tmp_path / "tr"), "--bootstrap", "0", *out]) == 0
    report = json.loads((tmp_path / "tr" / "transfer.json").read_text())
    assert [d["depth"] for d in report["results"][0]["depths"]] == [2, 4]
    assert (
        f"only the 6 run directories given of the 12 runs of {tmp_path / 'results.csv'} analysed"
        in (tmp_path / "tr" / "report.md").read_text()
    )

    capsys.readouterr()
    assert main(["dynamics", str(runs / "L2-lr4.0"), "--out", str(tmp_path / "d2"), *out]) == 2
    assert capsys.readouterr().err == (
        f"error: {runs / 'L2-lr4.0'}: a run directory: no run has diagnostics.jsonl rows (1 diverged before its "
        "first diagnostics row)\n"
    )
    (tmp_path / "other").mkdir()
    for command in ("dynamics", "loss-curves", "transfer"):
        assert main([command, str(tmp_path / "other"), "--out", str(tmp_path / "o"), *out]) == 2
        assert capsys.readouterr().err.startswith(
            f"error: {tmp_path / 'other'}: neither a sweep directory (no runs/), a folder of run directories, nor a "
            "run directory (no config.yaml, summary.json, metrics.jsonl)"
        )

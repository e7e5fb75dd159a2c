"""checkpoint.init_mode=continue: a new run directory continues another run's checkpoint (weights,
optimizer state, step count, RNG, data position) under its own schedule keys, as Megatron-LM's
--load OTHER_DIR with --override-opt_param-scheduler: WSD cooldown branches and extensions."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO, TINY, env, free_port

# WSD: 2 warmup steps, a stable phase, a linear decay over the last 4 steps to 0.1 x the peak.
WSD = [
    "model.num_layers=2",
    "parametrization.base_num_layers=1",  # L / L0 = 2: depth-muP gives the hidden matrices their own LR factor
    "scheduler.decay_style=wsd",
    "scheduler.warmup_steps=2",
    "scheduler.wsd_decay_steps=4",
    "logging.interval=1",
    "logging.progress_bar=false",
    "eval.at=[1.0]",
    "checkpoint.keep=10",
]
SOURCE_STEPS, BRANCH_AT = 12, 6  # the source decays over steps 9-12; its step 6 is in the stable phase


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *WSD, *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)


def train_rows(run_dir: Path) -> dict[int, dict]:
    rows = (json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip())
    return {r["step"]: r for r in rows if r.get("kind") == "train"}


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def branch(source: Path, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    folder = source / "checkpoints" / f"step_{BRANCH_AT:08d}"
    return train(run_dir, f"checkpoint.init_from={folder}", "checkpoint.init_mode=continue", *overrides)


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("continue") / "A"
    out = train(run, f"training.steps={SOURCE_STEPS}", f"checkpoint.interval={BRANCH_AT}")
    assert out.returncode == 0, out.stderr[-3000:]
    return run


def test_a_branch_with_the_same_schedule_is_the_source_bit_for_bit(source, tmp_path):
    """B continues A@6 with A's own config: its steps 7-12 are A's, loss, grad norm and every
    group's LR equal as floats (==, not approx): the same weights, Adam moments, scheduler step
    and samples go through the same operations, as a resume of A's own directory does. The
    summary names the source, and A's final eval is B's."""
    run = tmp_path / "B"
    out = branch(source, run, f"training.steps={SOURCE_STEPS}")
    assert out.returncode == 0, out.stderr[-3000:]
    a, b = train_rows(source), train_rows(run)
    assert sorted(b) == list(range(BRANCH_AT + 1, SOURCE_STEPS + 1))  # its own rows start after the branch step
    for step in b:
        assert (b[step]["loss"], b[step]["grad_norm"], b[step]["lr"]) == (
            a[step]["loss"],
            a[step]["grad_norm"],
            a[step]["lr"],
        ), step
    assert summary(run)["final_val_loss"] == summary(source)["final_val_loss"]
    common = json.loads((source / "checkpoints" / f"step_{BRANCH_AT:08d}" / "common.json").read_text())
    record = summary(run)["branch_of"]
    assert record["run_dir"] == str(source.resolve())
    # and where it lies from the branch's own directory, so that the pair can move together
    assert record["relative_run_dir"] == os.path.relpath(source.resolve(), run.resolve())
    assert record["step"] == BRANCH_AT
    want = hashlib.sha256(json.dumps(common["config"], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert record["config_sha256"] == want
    assert "same_sample_order" not in record  # training.steps unchanged: one data order
    assert summary(run)["steps"] == SOURCE_STEPS and summary(source).get("branch_of") is None
    # the branch's own checkpoint keeps the record: a rerun of a finished branch reads it back
    own = json.loads((run / "checkpoints" / f"step_{SOURCE_STEPS:08d}" / "common.json").read_text())
    assert own["branch_of"] == record


def test_an_extension_equals_a_fresh_run_of_the_longer_length(source, tmp_path):
    """D continues A@6 (stable phase) with training.steps=20: from there it is the fresh 20-step
    run C, bit for bit. A's first 6 steps are C's (the same warmup and stable LR, the same
    samples: mock data is one epoch either way, which D checks and records)."""
    fresh, ext = tmp_path / "C", tmp_path / "D"
    assert train(fresh, "training.steps=20").returncode == 0
    out = branch(source, ext, "training.steps=20")
    assert out.returncode == 0, out.stderr[-3000:]
    a, c, d = train_rows(source), train_rows(fresh), train_rows(ext)
    assert [a[s]["loss"] for s in range(1, BRANCH_AT + 1)] == [c[s]["loss"] for s in range(1, BRANCH_AT + 1)]
    assert sorted(d) == list(range(BRANCH_AT + 1, 21))
    for step in d:
        assert (d[step]["loss"], d[step]["lr"]) == (c[step]["loss"], c[step]["lr"]), step
    assert summary(ext)["final_val_loss"] == summary(fresh)["final_val_loss"]
    assert summary(ext)["branch_of"]["same_sample_order"] is True
    assert a[SOURCE_STEPS]["loss"] != c[SOURCE_STEPS]["loss"]  # A had decayed by then; C had not


def test_a_shorter_cooldown_branch_follows_the_wsd_formula(source, tmp_path):
    """E continues A@6 with 9 steps and a 3-step decay. The LR step s trains with is megatron's
    schedule at num_steps = s - 1: WSD's anneal starts at 9 - 3 = 6, so steps 7, 8, 9 get
    min + (1 - k/3)(peak - min) for k = 0, 1, 2, min = 0.1 peak: 1, 0.7, 0.4 x the peak of each
    group (the peak read from A's stable step 6)."""
    run = tmp_path / "E"
    out = branch(source, run, "training.steps=9", "scheduler.wsd_decay_steps=3")
    assert out.returncode == 0, out.stderr[-3000:]
    a, e = train_rows(source), train_rows(run)
    peaks = a[BRANCH_AT]["lr"]
    assert len(peaks) > 1  # depth-muP: groups with their own LR factors
    for step, factor in ((7, 1.0), (8, 0.7), (9, 0.4)):
        for group, peak in peaks.items():
            assert e[step]["lr"][group] == pytest.approx(peak * factor, rel=1e-12), (step, group)
    # a step's loss is measured before its update: steps 7 and 8 are A's (step 7 trained at the
    # peak in both); step 9 follows step 8's update, at 0.7 x the peak in E and the peak in A
    assert (e[7]["loss"], e[8]["loss"]) == (a[7]["loss"], a[8]["loss"])
    assert e[9]["loss"] != a[9]["loss"]
    assert summary(run)["target_steps"] == 9 and summary(run)["final_val_loss"] is not None


def test_a_cooldown_to_another_floor_and_peak_uses_the_branch_bounds_per_group(source, tmp_path):
    """F continues A@6 with a 3-step cooldown to floor 0 (optimizer.min_lr_ratio 0.1 -> 0.0) at half
    A's peak (optimizer.lr 0.003 -> 0.0015). Loading A's optimizer state restores every group's
    max_lr/min_lr from A; the branch puts its own back, each role's factor kept. By hand, per group
    g with A's peak P_g (A's stable step 6) and WSD's anneal from step 6 over 3 steps: steps 7, 8, 9
    train at 0.5 P_g x (1, 2/3, 1/3) (floor 0); the old floor would give 0.5 P_g x 0.7 at step 8,
    the old peak P_g at step 7. F's own checkpoints keep the new bounds: F cut after step 7 and
    resumed from its own checkpoint (not the source's) trains steps 8 and 9 as F did, bit for bit."""
    run = tmp_path / "F"
    overrides = (
        "training.steps=9",
        "scheduler.wsd_decay_steps=3",
        "optimizer.min_lr_ratio=0.0",
        "optimizer.lr=0.0015",
        "checkpoint.interval=1",
    )
    out = branch(source, run, *overrides)
    assert out.returncode == 0, out.stderr[-3000:]
    a, f = train_rows(source), train_rows(run)
    peaks = a[BRANCH_AT]["lr"]
    assert len(peaks) > 1 and len(set(peaks.values())) > 1  # groups with different LR factors
    for step, coeff in ((7, 1.0), (8, 2 / 3), (9, 1 / 3)):
        assert set(f[step]["lr"]) == set(peaks)
        for group, peak in peaks.items():
            want = 0.0 + coeff * (0.5 * peak - 0.0)  # min_lr + coeff (max_lr - min_lr), megatron's WSD
            assert f[step]["lr"][group] == pytest.approx(want, rel=1e-12), (step, group)
    assert f[7]["loss"] == a[7]["loss"] and f[8]["loss"] != a[8]["loss"]  # step 7's update is the first at 0.5 P
    state = json.loads((run / "checkpoints" / "step_00000009" / "common.json").read_text())
    assert state["config"]["optimizer"]["min_lr_ratio"] == 0.0 and state["config"]["optimizer"]["lr"] == 0.0015
    cut = tmp_path / "F_cut"  # F as a kill after step 7 leaves it: its checkpoint of step 7, no summary
    shutil.copytree(run, cut)
    (cut / "summary.json").unlink()
    for later in ("step_00000008", "step_00000009"):
        shutil.rmtree(cut / "checkpoints" / later)
    (cut / "checkpoints" / "latest").write_text("step_00000007\n")
    out = branch(source, cut, *overrides)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in out.stderr and "continued" not in out.stderr
    g = train_rows(cut)
    assert [(g[s]["loss"], g[s]["lr"]) for s in (8, 9)] == [(f[s]["loss"], f[s]["lr"]) for s in (8, 9)]
    assert summary(cut)["branch_of"] == summary(run)["branch_of"]
    assert summary(cut)["final_val_loss"] == summary(run)["final_val_loss"]


def cpu_state(run_dir: Path, step: int) -> dict:
    """A TP=PP=1 CPU checkpoint's model and torch optimizer state."""
    from training.checkpoint import CPU_MODEL_FILE

    return torch.load(run_dir / "checkpoints" / f"step_{step:08d}" / CPU_MODEL_FILE, weights_only=False)


def test_a_branch_with_another_weight_decay_and_clip_applies_them_from_its_first_step(source, tmp_path):
    """Branches of A@6 (AdamW, weight decay 0, clip 1.0) that train step 7 at each group's peak (a
    1-step cooldown is step 8). Loading A's optimizer state restores every group's weight_decay
    (0); megatron's scheduler then writes optimizer.weight_decay x the group's wd_mult over it (its
    start_wd/end_wd are class values the override keeps). By hand, AdamW's step is
    p <- p (1 - lr wd) - u with u the same Adam step in both branches (same weights, moments and
    grads), so W7(wd 0.5) - W7(wd 0) = -max_lr_g x 0.5 x wd_mult_g x W6 per tensor, and 0 where
    wd_mult is 0 (biases, norms). The clip threshold is this run's: with optimizer.clip_grad=1e-8 the
    clipped gradient is ~0, so the moments only decay: exp_avg7 = beta1 exp_avg6, exp_avg_sq7 =
    beta2 exp_avg_sq6 (0.9, 0.95); with A's clip 1.0 they do not. Before, both were refused."""
    schedule = ("training.steps=8", "scheduler.wsd_decay_steps=1", "checkpoint.interval=1")
    runs = {"same": (), "decayed": ("optimizer.weight_decay=0.5",), "clipped": ("optimizer.clip_grad=1e-8",)}
    for name, overrides in runs.items():
        out = branch(source, tmp_path / name, *schedule, *overrides)
        assert out.returncode == 0, out.stderr[-3000:]
    a6 = cpu_state(source, BRANCH_AT)
    same, decayed, clipped = (cpu_state(tmp_path / name, 7) for name in runs)
    groups = decayed["optimizer"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.5 * g["wd_mult"] for g in groups]
    assert {g["weight_decay"] for g in same["optimizer"]["param_groups"]} == {0.0}
    assert [g["max_lr"] for g in groups] == [g["max_lr"] for g in a6["optimizer"]["param_groups"]]
    shrink = {g["max_lr"] * g["weight_decay"] for g in groups if g["weight_decay"] > 0}
    assert len(shrink) > 1  # depth-muP: decayed groups with different LR factors
    found, undecayed = set(), 0
    for name, w6 in a6["model"].items():
        if not isinstance(w6, torch.Tensor) or not torch.is_floating_point(w6):
            continue
        w6 = w6.double()
        diff = decayed["model"][name].double() - same["model"][name].double()
        if not diff.any():
            undecayed += 1
            continue
        big = w6.abs() > 0.1 * w6.abs().max()
        c = min(shrink, key=lambda k: abs(k - float((-diff[big] / w6[big]).median())))
        assert torch.allclose(diff, -c * w6, rtol=1e-3, atol=1e-6 * float(w6.abs().max())), name
        found.add(c)
    assert found == shrink and undecayed > 0
    moved = 0.0
    for i, a in a6["optimizer"]["state"].items():
        c, s = clipped["optimizer"]["state"][i], same["optimizer"]["state"][i]
        assert torch.allclose(c["exp_avg"], 0.9 * a["exp_avg"], rtol=1e-6, atol=1e-9), i
        assert torch.allclose(c["exp_avg_sq"], 0.95 * a["exp_avg_sq"], rtol=1e-6, atol=1e-15), i
        moved = max(moved, float((s["exp_avg"] - 0.9 * a["exp_avg"]).abs().max()))
    assert moved > 1e-4  # clip 1.0: the gradient enters the moments
    assert train_rows(tmp_path / "clipped")[7]["grad_norm"] == train_rows(source)[7]["grad_norm"]  # before clipping


FAKE_WANDB = """import json, os, types
def _write(row):
    with open(os.environ["FAKE_WANDB_LOG"], "a") as f:
        f.write(json.dumps(row, default=str) + "\\n")
def init(**kwargs):
    _write({"init": kwargs})
    return types.SimpleNamespace(log=lambda values, step: _write({"step": step}), finish=lambda: None)
util = types.SimpleNamespace(generate_id=lambda: "branch-id")
"""


def test_a_branch_forks_the_source_wandb_run_and_its_tensorboard_starts_after_the_branch_step(source, tmp_path):
    """The trainer, with logging.tensorboard and logging.wandb (a stand-in wandb module that writes
    what it is given), continuing A@6 where A's run directory names its W&B run (wandb_id):
    wandb.init gets fork_from="<A's id>?_step=6" and no resume, the first step it logs is 7; the
    TensorBoard loss curve is the branch's metrics.jsonl rows, steps 7-9, nothing before."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    planted = tmp_path / "A"
    shutil.copytree(source, planted)
    (planted / "wandb_id").write_text("source-id\n")
    fake = tmp_path / "fake"
    (fake / "wandb").mkdir(parents=True)
    (fake / "wandb" / "__init__.py").write_text(FAKE_WANDB)
    calls = tmp_path / "wandb_calls.jsonl"
    folder = planted / "checkpoints" / f"step_{BRANCH_AT:08d}"
    run = tmp_path / "B"
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run}", *WSD, "training.steps=9",
           f"checkpoint.init_from={folder}", "checkpoint.init_mode=continue", "logging.tensorboard=true",
           "logging.wandb=true", "logging.wandb_project=p"]  # fmt: skip
    environ = env()
    environ.update(PYTHONPATH=f"{fake}:{environ['PYTHONPATH']}", FAKE_WANDB_LOG=str(calls))
    out = subprocess.run(cmd, cwd=REPO, env=environ, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in calls.read_text().splitlines()]
    (init,) = [r["init"] for r in rows if "init" in r]
    assert init["fork_from"] == f"source-id?_step={BRANCH_AT}" and "resume" not in init
    assert init["id"] == "branch-id" and init["config"]["branch_of"]["wandb_id"] == "source-id"
    assert min(r["step"] for r in rows if "step" in r) == BRANCH_AT + 1
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    b = train_rows(run)
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == [
        (step, pytest.approx(b[step]["loss"], rel=1e-6)) for step in (7, 8, 9)
    ]


def test_a_branch_curve_is_its_source_rows_up_to_the_branch_step_then_its_own(source, tmp_path, capsys):
    """E continues A@6 to step 9 (3-step cooldown), G continues E@8 to step 10: G's whole curve
    (rundir.files.read_metrics_with_source) is A's rows 1-6 marked inherited_from A, E's rows 7-8
    marked inherited_from E, then G's own rows 9-10, row for row (losses, grad norms, LRs as
    written). `eval loss-curves` writes those rows, naming the source run of each; a source moved
    away is named in a warning and the curve starts after the branch step."""
    from eval.__main__ import main as eval_main
    from rundir.files import INHERITED_FROM, RunDirError, read_metrics, read_metrics_with_source

    e, g = tmp_path / "E", tmp_path / "G"
    out = branch(source, e, "training.steps=9", "scheduler.wsd_decay_steps=3", "checkpoint.interval=1")
    assert out.returncode == 0, out.stderr[-3000:]
    out = train(g, f"checkpoint.init_from={e / 'checkpoints' / 'step_00000008'}", "checkpoint.init_mode=continue",
                "training.steps=10", "scheduler.wsd_decay_steps=3")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    whole = read_metrics_with_source(g)
    want = (
        [{**r, INHERITED_FROM: str(source.resolve())} for r in read_metrics(source) if r["step"] <= BRANCH_AT]
        + [{**r, INHERITED_FROM: str(e.resolve())} for r in read_metrics(e) if r["step"] <= 8]
        + read_metrics(g)
    )
    assert whole == want
    assert [r["step"] for r in whole if r["kind"] == "train"] == list(range(1, 11))
    a, rows_e, rows_g = train_rows(source), train_rows(e), train_rows(g)
    assert [r["loss"] for r in whole if r["kind"] == "train"] == [a[s]["loss"] for s in range(1, 7)] + [
        rows_e[7]["loss"],
        rows_e[8]["loss"],
        rows_g[9]["loss"],
        rows_g[10]["loss"],
    ]
    assert read_metrics_with_source(source) == read_metrics(source)  # no branch_of: its own rows
    assert eval_main(["loss-curves", str(g), "--out", str(tmp_path / "curves")]) == 0
    assert (tmp_path / "curves" / "loss_curves.png").stat().st_size > 0
    lines = (tmp_path / "curves" / "loss_curves.csv").read_text().splitlines()
    assert lines[0] == "run_id,num_layers,lr,kind,step,loss,val_loss,inherited_from"
    train_lines = [line.split(",") for line in lines[1:] if line.split(",")[3] == "train"]
    assert [(int(c[4]), float(c[5]), c[7]) for c in train_lines] == [
        (r["step"], r["loss"], Path(r[INHERITED_FROM]).name if INHERITED_FROM in r else "")
        for r in whole
        if r["kind"] == "train"
    ]
    assert {c[7] for c in train_lines} == {source.name, "E", ""}
    moved = tmp_path / "G_moved"
    shutil.copytree(g, moved)
    data = summary(moved)
    data["branch_of"]["run_dir"] = str(tmp_path / "gone")  # neither where it was nor beside the copy
    data["branch_of"]["relative_run_dir"] = "../gone"
    (moved / "summary.json").write_text(json.dumps(data))
    with pytest.raises(RunDirError, match=f"continues {tmp_path / 'gone'} \\(step 8; summary.json branch_of\\)"):
        read_metrics_with_source(moved)
    capsys.readouterr()
    assert eval_main(["loss-curves", str(moved), "--out", str(tmp_path / "curves2"), "--no-figures"]) == 0
    assert "the source sweep moved or is gone" in capsys.readouterr().err
    assert len((tmp_path / "curves2" / "loss_curves.csv").read_text().splitlines()) == 1 + len(read_metrics(g))


def test_what_cannot_be_continued_is_refused_with_its_key(source, tmp_path):
    """Exit 2 before training, naming the source checkpoint and each key, with why."""
    folder = source / "checkpoints" / f"step_{BRANCH_AT:08d}"
    out = branch(
        source,
        tmp_path / "bad",
        "training.steps=20",
        "model.num_layers=3",
        "parametrization.block_multiplier=2.0",
        "optimizer.name=adam",
        "optimizer.adam_beta2=0.99",
        "optimizer.sgd_momentum=0.5",
        "training.global_batch_size=16",
        "data.seed=7",
    )
    assert out.returncode == 2, out.stderr[-3000:]
    err = out.stderr
    assert f"checkpoint.init_from={folder} (step {BRANCH_AT} of {source}) with checkpoint.init_mode=continue" in err
    for key in (
        "model.num_layers: 2 -> 3",
        "parametrization.block_multiplier: 1.0 -> 2.0",
        "optimizer.name: 'adamw' -> 'adam' (the optimizer state is the source optimizer's",
        "optimizer.adam_beta2: 0.95 -> 0.99 (loading the optimizer state restores each group's betas",
        "optimizer.sgd_momentum: 0.9 -> 0.5 (loading the optimizer state restores each group's momentum",
        "training.global_batch_size: 8 -> 16 (the data position is the step count",
        "data.seed: 1234 -> 7",
    ):
        assert key in err, (key, err[-2000:])
    assert not (tmp_path / "bad" / "checkpoints").exists()
    early = branch(source, tmp_path / "early", f"training.steps={BRANCH_AT}")
    assert early.returncode == 2
    assert f"training.steps: {BRANCH_AT} is not past the source's step {BRANCH_AT}" in early.stderr
    assert "earlier checkpoint" not in early.stderr  # A keeps none before step 6
    # the run directory names its latest checkpoint (12): the refusal names the one before 8 to give
    latest = train(
        tmp_path / "latest", f"checkpoint.init_from={source}", "checkpoint.init_mode=continue", "training.steps=8"
    )
    assert latest.returncode == 2
    assert (
        f"training.steps: 8 is not past the source's step {SOURCE_STEPS}: nothing to continue (give training.steps > "
        f"{SOURCE_STEPS}, or branch from an earlier checkpoint: checkpoint.init_from={folder} (the source keeps "
        f"checkpoints before step 8 at step(s) {BRANCH_AT}))"
    ) in latest.stderr, latest.stderr[-2000:]
    alone = train(tmp_path / "alone", "checkpoint.init_mode=continue")
    assert alone.returncode == 2
    assert "checkpoint.init_mode: continue needs checkpoint.init_from" in alone.stderr


def test_eval_points_before_the_branch_step_that_the_source_lacks_are_named(source, tmp_path):
    """G continues A@6 for 2 steps with eval.at [0.25, 1.0]: 0.25 of 8 is step 2, before the branch,
    where A (eval.at [1.0]) has no eval. G warns, naming the point, and records only its final eval."""
    run = tmp_path / "G"
    out = branch(source, run, "training.steps=8", "eval.at=[0.25, 1.0]")
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        f"eval point(s) fraction 0.25 (step 2) are at or before the branch step {BRANCH_AT} and the source "
        "recorded no eval there: this run has no eval at them"
    ) in out.stderr, out.stderr[-2000:]
    assert [(e["step"], e["fraction"]) for e in summary(run)["evals"]] == [(8, 1.0)]
    same = branch(source, tmp_path / "H", "training.steps=8")  # eval.at [1.0]: nothing before the branch
    assert same.returncode == 0 and "eval point(s)" not in same.stderr


def test_the_sample_order_check_sees_megatron_reshuffle_over_another_epoch(tmp_path, megatron):
    """training.data.same_sample_order on real megatron datasets (one prefix: a GPTDataset; two
    with weights: a BlendedDataset). 40 documents of 20-200 tokens at sequence 64 are about 80
    samples an epoch: 4 and 6 steps of 8 need one epoch and read the same first 32 samples; 40
    steps need several, and megatron shuffles over all of them: another order."""
    from tests.conftest import tiny_config
    from tests.test_training_data_checks import make_manifest, make_prefix, random_docs
    from training.data import TokenizerInfo, build_datasets, same_sample_order

    data = make_manifest(tmp_path / "one", random_docs(40, 0), random_docs(8, 1))
    cfg = tiny_config(f"data.manifest={data}", "model.vocab_size=null")
    build = {steps: build_datasets(cfg, str(tmp_path / "cache"), steps=steps).train for steps in (4, 6, 40)}
    assert type(build[4]).__name__ == "GPTDataset"
    assert same_sample_order(build[4], build[6], 32)
    assert not same_sample_order(build[4], build[40], 32)
    blend = tmp_path / "blend"
    blend.mkdir()
    prefixes = [str(make_prefix(blend / name, random_docs(40, seed))) for name, seed in (("a", 2), ("b", 3))]
    valid = str(make_prefix(blend / "valid", random_docs(8, 4)))
    cfg = tiny_config(
        "data.mock=false",
        f"data.train_prefixes=[{prefixes[0]}, {prefixes[1]}]",
        "data.train_weights=[1, 3]",
        f"data.valid_prefixes=[{valid}]",
        "model.vocab_size=512",
    )
    tok = TokenizerInfo(512, 511, "planted")
    build = {steps: build_datasets(cfg, str(tmp_path / "cache2"), tok, steps).train for steps in (4, 6, 80)}
    assert type(build[4]).__name__ == "BlendedDataset"
    assert same_sample_order(build[4], build[6], 32)
    assert not same_sample_order(build[4], build[80], 32)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("distributed", [True, False])
def test_a_gpu_branch_with_another_floor_and_peak_uses_the_branch_bounds(tmp_path, distributed):
    """The GPU path (megatron's optimizer, a dist checkpoint; distributed optimizer or not): the
    same hand computation as the CPU branch with another floor and peak."""
    gpu = ["parallel.device=cuda", f"parallel.use_distributed_optimizer={str(distributed).lower()}"]
    src, run = tmp_path / "A", tmp_path / "F"
    out = train(src, *gpu, f"training.steps={SOURCE_STEPS}", f"checkpoint.interval={BRANCH_AT}")
    assert out.returncode == 0, out.stderr[-3000:]
    out = branch(src, run, *gpu, "training.steps=9", "scheduler.wsd_decay_steps=3", "optimizer.min_lr_ratio=0.0",
                 "optimizer.lr=0.0015")  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    peaks, f = train_rows(src)[BRANCH_AT]["lr"], train_rows(run)
    assert len(set(peaks.values())) > 1
    for step, coeff in ((7, 1.0), (8, 2 / 3), (9, 1 / 3)):
        for group, peak in peaks.items():
            assert f[step]["lr"][group] == pytest.approx(coeff * 0.5 * peak, rel=1e-12), (step, group)


def test_another_layout_or_the_other_path_is_refused_saying_why(source, tmp_path, monkeypatch, megatron):
    """A CPU checkpoint's optimizer state is per rank, indexed by position: a continued run in
    another layout exits 2 naming the key and why, on every rank. A GPU (dist) checkpoint's
    optimizer state is megatron's: continued on the CPU path it exits 2 naming both formats
    (faked as test_init_from does: the source's weights saved by dist_checkpointing on CPU)."""
    from tests.test_init_from import _dist_copy

    folder = source / "checkpoints" / f"step_{BRANCH_AT:08d}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "train_gpt.py", "--config", str(TINY), f"run.dir={tmp_path / 'tp2'}", *WSD, f"checkpoint.init_from={folder}",
           "checkpoint.init_mode=continue", "training.steps=20", "parallel.tensor_model_parallel_size=2"]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode != 0
    why = (
        "parallel.tensor_model_parallel_size: 1 -> 2 (the optimizer state is loaded as a resume loads it, in the "
        "layout that wrote it: a CPU checkpoint holds one torch optimizer state per tensor-parallel rank"
    )
    assert out.stderr.count(why) == 2, out.stderr[-3000:]
    assert out.stderr.count("exitcode  : 2") == 2, out.stderr[-3000:]
    gpu_run = tmp_path / "gpu_run"
    _dist_copy(source, gpu_run, monkeypatch)
    out = train(
        tmp_path / "cpu", f"checkpoint.init_from={gpu_run}", "checkpoint.init_mode=continue", "training.steps=20"
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert (
        f"checkpoint.init_from={gpu_run / 'checkpoints' / f'step_{SOURCE_STEPS:08d}'} (step {SOURCE_STEPS} of "
        f"{gpu_run}) with checkpoint.init_mode=continue: a GPU (dist) checkpoint holds megatron's optimizer state "
        "(a dist_checkpointing folder), which the CPU path's torch optimizer does not read (this run is on cpu): "
        "continue it on the GPU path"
    ) in out.stderr
    assert not (tmp_path / "cpu" / "checkpoints").exists()


def torchrun2(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *WSD, *overrides]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)


# Two data-parallel ranks sum the global batch's gradients in another order than one process:
# float rounding at most (measured here: the losses equal as floats, but the order of the sums is
# torch's and gloo's to choose); a fresh optimizer or another step moves the loss by far more.
DP_LOSS_RTOL = 1e-5


def test_a_cpu_checkpoint_continues_and_resumes_at_another_data_parallel_size(source, tmp_path):
    """A CPU checkpoint's model and optimizer state are written by data-parallel rank 0 and are
    the same on every data-parallel rank (the CPU optimizer is not sharded): A@6 (one process)
    continued, and resumed, by two data-parallel ranks gives A's steps 7-12 to float rounding."""
    run = tmp_path / "dp2"
    out = torchrun2(
        run,
        f"checkpoint.init_from={source / 'checkpoints' / f'step_{BRANCH_AT:08d}'}",
        "checkpoint.init_mode=continue",
        f"training.steps={SOURCE_STEPS}",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "written with data-parallel size 1, this run's is 2" in out.stderr
    a, b = train_rows(source), train_rows(run)
    assert sorted(b) == list(range(BRANCH_AT + 1, SOURCE_STEPS + 1))
    for step in b:
        assert b[step]["loss"] == pytest.approx(a[step]["loss"], rel=DP_LOSS_RTOL, abs=0.0), step
        assert b[step]["lr"] == a[step]["lr"], step
    assert summary(run)["final_val_loss"] == pytest.approx(summary(source)["final_val_loss"], rel=DP_LOSS_RTOL)
    resumed = tmp_path / "resumed"  # A's own directory at step 6, rerun by two processes
    shutil.copytree(source, resumed)
    for step_dir in (resumed / "checkpoints").glob("step_*"):
        if step_dir.name != f"step_{BRANCH_AT:08d}":
            shutil.rmtree(step_dir)
    (resumed / "checkpoints" / "latest").write_text(f"step_{BRANCH_AT:08d}\n")
    (resumed / "summary.json").unlink()  # a completed run is not rerun
    out = torchrun2(resumed, f"training.steps={SOURCE_STEPS}", f"checkpoint.interval={BRANCH_AT}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"resumed from {resumed / 'checkpoints' / f'step_{BRANCH_AT:08d}'} (step {BRANCH_AT})" in out.stderr
    r = train_rows(resumed)
    for step in range(BRANCH_AT + 1, SOURCE_STEPS + 1):
        assert r[step]["loss"] == pytest.approx(a[step]["loss"], rel=DP_LOSS_RTOL, abs=0.0), step


def test_each_rank_takes_the_rng_of_its_tensor_parallel_rank_and_stage_at_data_parallel_rank_0():
    """megatron's rank order tp-cp-ep-dp-pp (rank = tp + TP x (dp + DP x stage)): with TP=2 PP=2
    and DP 1 -> 2, rank 5 (tp 1, dp 0, stage 1: 1 + 2 x (0 + 2 x 1)) takes the saved rank of tp 1,
    stage 1 (1 + 2 x (0 + 1 x 1) = 3), rank 7 (its dp 1 twin) too; the same layout keeps each
    rank's own, and so does another TP or PP size (not this function's to map)."""
    from training.checkpoint import rng_source_rank

    saved, now = {"tp": 2, "pp": 2, "dp": 1}, {"tp": 2, "pp": 2, "dp": 2}
    assert [rng_source_rank(saved, now, r) for r in range(8)] == [0, 1, 0, 1, 2, 3, 2, 3]
    assert [rng_source_rank(now, saved, r) for r in range(4)] == [0, 1, 4, 5]
    assert rng_source_rank(now, now, 6) == 6
    assert rng_source_rank({"tp": 1, "pp": 2, "dp": 2}, now, 5) == 5

"""The trainer's named parts (training/loop_parts.py) and the run-directory module (rundir/files.py),
each on its own: hand-computed numbers, no model."""

from __future__ import annotations

import json
import math

import pytest

from rundir import files as rd
from training.loop_parts import (
    Checkpointer,
    DivergenceGuard,
    EtaEstimate,
    EvalSchedule,
    ThroughputMeter,
    train_line,
)


def test_eval_schedule_maps_steps_to_fractions():
    sched = EvalSchedule(steps=120, at=[0.5, 1.0], interval=50)
    assert sched.points == {50: 50 / 120, 60: 0.5, 100: 100 / 120, 120: 1.0}
    assert sched.due(60) == 0.5 and sched.due(61) is None and sched.final_step == 120
    assert EvalSchedule(steps=3, at=[0.1]).points == {1: 0.1}  # never step 0


def test_divergence_guard_reasons():
    g = DivergenceGuard(bound=10.0, patience=2)
    assert g.check(11.0, 1.0, 1) is None  # one step above the bound is tolerated
    assert g.check(9.0, 1.0, 2) is None  # and the count restarts
    assert g.check(11.0, 1.0, 3) is None
    assert g.check(12.0, 1.0, 4) == "loss 12 above bound 10 at step 4"
    assert DivergenceGuard(10.0, 5).check(math.nan, 1.0, 7) == "loss is nan at step 7"
    assert DivergenceGuard(10.0, 5).check(1.0, math.inf, 8) == "grad norm is inf at step 8"


def test_divergence_bound_defaults_to_a_uniform_guess_plus_three_nats():
    class Cfg:
        class training:
            divergence_loss_bound = None
            divergence_patience = 4

    g = DivergenceGuard.of(Cfg, vocab_size=512)
    assert g.bound == pytest.approx(math.log(512) + 3.0) and g.patience == 4


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_throughput_meter_hand_computed():
    clock = FakeClock()
    m = ThroughputMeter(tokens_per_step=1000, world_size=2, flops_per_step=4e12, peak_flops=1e12, clock=clock)
    m.start(10)  # resumed at step 10
    clock.now += 2.5  # steps 11 and 12 (data loading included)...
    m.exclude(0.5)  # ...less an evaluation
    row = m.row(12)  # 2 s over 2 steps: 1000 tok/s; 4e12 / 1 s / 2 GPUs = 2 TFLOP/s per GPU; MFU 2
    assert row == {"step_time_s": 1.0, "tokens_per_s": 1000.0, "tflops_per_gpu": 2.0, "mfu": 2.0}
    clock.now += 1.0
    assert m.row(16)["step_time_s"] == 0.25  # a new window (and no exclusion) after each row
    cpu = ThroughputMeter(tokens_per_step=10, clock=clock)
    cpu.start(0)
    clock.now += 0.1
    assert cpu.row(1)["tflops_per_gpu"] is None


def test_throughput_meter_leaves_the_sessions_first_step_out():
    """Warm-up of 1.6 s then 4 steps of 0.1 s: the window of 5 steps reads 0.1 s a step (4000 tok/s
    of 400 per step), not (1.6 + 0.4) / 5 = 0.4 s; the next window is not touched."""
    clock = FakeClock()
    m = ThroughputMeter(tokens_per_step=400, flops_per_step=2e12, clock=clock)
    m.start(0)
    clock.now += 1.6
    assert m.warmed_up() == pytest.approx(1.6)
    clock.now += 4 * 0.1 + 0.7  # and an evaluation of 0.7 s, excluded
    m.exclude(0.7)
    row = m.row(5)
    assert row["step_time_s"] == pytest.approx(0.1) and row["tokens_per_s"] == pytest.approx(4000.0)
    assert row["tflops_per_gpu"] == pytest.approx(20.0) and row["mfu"] is None  # no peak known: no MFU
    clock.now += 5 * 0.2
    assert m.row(10)["step_time_s"] == pytest.approx(0.2)
    # logging.interval=1: the first step's window is that step alone, and reports it
    m.start(10)  # a resumed session
    clock.now += 1.3
    m.warmed_up()
    assert m.row(11)["step_time_s"] == pytest.approx(1.3)


def test_eta_leaves_the_sessions_first_step_out():
    """Resumed at step 10 of 100: a warm-up step of 1.6 s, then 9 steps of 0.1 s (step 20 logged):
    80 steps left at 0.1 s = 8 s. The session's mean, as the trainer took it before, read
    (1.6 + 0.9) / 10 x 80 = 20 s."""
    clock = FakeClock()
    eta = EtaEstimate(clock=clock)
    eta.start(10)
    assert eta.seconds_left(10, 100) is None  # no step yet
    clock.now += 1.6
    eta.warmed_up()
    assert eta.seconds_left(11, 100) == pytest.approx(1.6 * 89)  # the first step is all there is
    clock.now += 9 * 0.1
    assert eta.seconds_left(20, 100) == pytest.approx(8.0)
    clock.now += 0.5 + 10 * 0.1  # an evaluation of 0.5 s stays in: evaluations recur
    assert eta.seconds_left(30, 100) == pytest.approx((0.9 + 0.5 + 1.0) / 19 * 70)
    eta.start(30)  # a new session: a warm-up again
    clock.now += 2.0
    assert eta.seconds_left(31, 100) == pytest.approx(2.0 * 69)


def test_train_line_has_megatron_field_names():
    rates = {"step_time_s": 0.0352, "tokens_per_s": 14545.45, "tflops_per_gpu": None, "mfu": None}
    line = train_line(
        10, 40, global_batch_size=8, loss=5.4393, lr=2.5e-3, grad_norm=1.3747, rates=rates, elapsed_s=3661.4, eta_s=59.6
    )
    assert line == (
        "iteration 10/40 | consumed samples: 80 | elapsed time per iteration (ms): 35.2 | tokens/s: 14,545 | "
        "learning rate: 2.500000E-03 | global batch size: 8 | lm loss: 5.439300E+00 | grad norm: 1.375 | "
        "elapsed: 1:01:01 | ETA: 0:01:00"
    )
    gpu = {"step_time_s": 1.0, "tokens_per_s": 1000.0, "tflops_per_gpu": 412.34, "mfu": 0.41678}
    line = train_line(
        5, 100, global_batch_size=8, loss=1.0, lr=1.0, grad_norm=1.0, rates=gpu, elapsed_s=0, eta_s=None, skipped=2
    )
    assert "| throughput per GPU (TFLOP/s/GPU): 412.3 | MFU: 41.7% |" in line
    assert line.startswith("iteration   5/100 |") and "number of skipped iterations: 2" in line
    assert line.endswith("ETA: ?")


def test_checkpointer_saves_on_interval_but_not_at_the_last_step():
    saved = []
    c = Checkpointer(saved.append, interval=5, steps=10)
    assert [s for s in range(1, 11) if c.maybe_save(s)] == [5]
    assert saved == [5]
    assert not Checkpointer(saved.append, interval=0, steps=10).maybe_save(5)


def test_summary_round_trip_and_one_nan_convention(tmp_path):
    s = rd.RunSummary(
        status="diverged",
        reason="loss is nan at step 3",
        exit_code=3,
        steps=3,
        evals=(rd.EvalRecord(2, 0.5, math.inf),),
        final_val_loss=math.nan,
        lr=0.01,
    )
    rd.write_summary(tmp_path, s)
    raw = json.loads((tmp_path / rd.SUMMARY_FILE).read_text())  # valid JSON: no bare NaN
    assert raw["final_val_loss"] == "nan" and raw["evals"][0]["val_loss"] == "inf"
    back = rd.read_summary(tmp_path)
    assert back.final and not back.preempted and math.isnan(back.final_val_loss)
    assert back.evals == (rd.EvalRecord(2, 0.5, math.inf),) and back.lr == 0.01
    (tmp_path / rd.SUMMARY_FILE).write_text('{"status": "completed", "final_val_loss": "oops"}')
    assert rd.read_summary(tmp_path) is None  # unreadable: treated as not finished
    (tmp_path / rd.SUMMARY_FILE).write_text('{"status": "completed", "new_key": 1}')
    assert rd.read_summary(tmp_path).extra == {"new_key": 1}


def test_metrics_rows_truncate_and_stop_at_a_cut_line(tmp_path):
    lines = [rd.metrics_line({"kind": "train", "step": s, "loss": v}) for s, v in ((1, 2.0), (2, math.nan), (3, 1.0))]
    (tmp_path / rd.METRICS_FILE).write_text("".join(lines) + '{"kind": "tra')
    rows = rd.read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3] and math.isnan(rows[1]["loss"])
    rd.truncate_metrics(tmp_path, 2)
    assert [r["step"] for r in rd.read_metrics(tmp_path)] == [1, 2]


def test_latest_checkpoint_discovery(tmp_path):
    assert rd.latest_checkpoint(tmp_path) is None
    folder = rd.checkpoint_dir(tmp_path, 40)
    folder.mkdir(parents=True)
    (tmp_path / rd.CHECKPOINTS_DIR / rd.LATEST).write_text(folder.name + "\n")
    with pytest.raises(rd.RunDirError, match="not a complete checkpoint"):
        rd.latest_checkpoint(tmp_path)
    (folder / rd.COMMON_FILE).write_text("{}")
    assert rd.latest_checkpoint(tmp_path) == folder and folder.name == "step_00000040"


def test_without_its_pointer_the_latest_checkpoint_is_the_newest_complete_one_for_training_and_export(tmp_path):
    """A kill between a save's rename and its `latest` write leaves whole step folders and no
    pointer: the trainer, export and lm-eval all read the newest complete one (an incomplete
    newer folder, without its common file, is not a checkpoint)."""
    from training.checkpoint import CPU_MODEL_FILE, find_checkpoint

    for step in (20, 40):
        folder = rd.checkpoint_dir(tmp_path, step)
        folder.mkdir(parents=True)
        (folder / rd.COMMON_FILE).write_text(json.dumps({"step": step}))
        (folder / CPU_MODEL_FILE).write_bytes(b"")
    rd.checkpoint_dir(tmp_path, 60).mkdir()  # cut before its common file was written
    assert rd.latest_checkpoint(tmp_path) == rd.checkpoint_dir(tmp_path, 40)
    found = find_checkpoint(tmp_path)
    assert (found.step, found.path.name, found.format) == (40, "step_00000040", "cpu")


def test_eval_and_summary_lines_carry_perplexity_by_hand():
    from rundir.contract import Status
    from training.loop_parts import eval_line, perplexity, summary_line

    assert eval_line(5, 0.5, math.log(350.0)) == "step 5 (0.5 of training): val_loss 5.8579 | PPL 350"
    assert perplexity(1000.0) == math.inf and eval_line(1, 1.0, 1000.0).endswith("| PPL inf")
    assert math.isnan(perplexity(math.nan)) and eval_line(1, 1.0, math.nan).endswith("val_loss nan | PPL nan")
    done = rd.RunSummary(
        Status.COMPLETED, steps=10, target_steps=10, tokens=5120, final_val_loss=2.0, wall_time_s=3725.4
    )
    assert summary_line(done) == "completed: 10/10 steps, 5,120 tokens, 1:02:05 | final val_loss 2.0000 | PPL 7.389"
    why = "loss 1.474e+07 above bound 9.238 at step 3"
    diverged = rd.RunSummary(Status.DIVERGED, reason=why, steps=3, target_steps=4, tokens=1536, wall_time_s=10.2)
    assert summary_line(diverged) == f"diverged: 3/4 steps, 1,536 tokens, 0:00:10 | {why}"


def test_pipeline_note_gives_the_fill_and_drain_share_by_hand():
    """1F1B over P stages and m micro-batches: (P - 1) idle slots of (m + P - 1) per stage."""
    from training.loop_parts import pipeline_note

    assert "2 stages, 2 micro-batches per step: about 33% of each step" in pipeline_note(2, 2)  # 1/3
    assert "about 9% of each step" in pipeline_note(4, 32)  # 3/35 = 0.0857
    assert "about 50% of each step" in pipeline_note(8, 7)  # 7/14

"""The trainer's named parts (training/loop_parts.py) and the run-directory module (rundir/files.py),
each on its own: hand-computed numbers, no model."""

from __future__ import annotations

import json
import math

import pytest

from rundir import files as rd
from training.loop_parts import Checkpointer, DivergenceGuard, EvalSchedule, ThroughputMeter


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


def test_throughput_meter_hand_computed():
    m = ThroughputMeter(tokens_per_step=1000, world_size=2, flops_per_step=4e12, peak_flops=1e12)
    m.add(0.5)
    m.add(1.5)
    row = m.row()  # mean step 1.0 s: 1000 tok/s; 4e12 / 1 s / 2 GPUs = 2 TFLOP/s per GPU; MFU 2
    assert row == {"step_time_s": 1.0, "tokens_per_s": 1000.0, "tflops_per_gpu": 2.0, "mfu": 2.0}
    m.add(0.25)
    assert m.row()["step_time_s"] == 0.25  # a new window after each row
    cpu = ThroughputMeter(tokens_per_step=10)
    cpu.add(0.1)
    assert cpu.row()["tflops_per_gpu"] is None


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

"""A resumed run's TensorBoard curve has each step once, as its metrics.jsonl does, and its
W&B sessions log into one W&B run.

A hard kill after step 5 and a resume from the step-2 checkpoint log steps 3-5 twice; the
second session's writer must hide the first session's rows past the checkpoint.
"""

from __future__ import annotations

import itertools
import sys
import types

import pytest

from rundir.files import read_metrics, truncate_metrics
from training.metrics import RunLog


def _scalars(run_dir, tag):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_tensorboard_drops_what_a_killed_session_logged_past_the_checkpoint(tmp_path):
    pytest.importorskip("tensorboard")
    first = RunLog(tmp_path, tensorboard=True, wandb=False, wandb_project=None, config={})
    for step in range(1, 6):  # the killed session: steps 1-5, its last checkpoint at step 2
        first.write({"kind": "train", "step": step, "loss": 10.0 + step})
    first.close()
    truncate_metrics(tmp_path, 2)  # what the resumed session does to metrics.jsonl
    second = RunLog(tmp_path, tensorboard=True, wandb=False, wandb_project=None, config={}, resume_step=2)
    for step in range(3, 6):
        second.write({"kind": "train", "step": step, "loss": 20.0 + step})
    second.close()
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path)] == [
        (1, 11.0),
        (2, 12.0),
        (3, 23.0),
        (4, 24.0),
        (5, 25.0),
    ]
    assert _scalars(tmp_path, "train/loss") == [(1, 11.0), (2, 12.0), (3, 23.0), (4, 24.0), (5, 25.0)]


def test_every_session_of_a_run_logs_into_one_wandb_run(tmp_path, monkeypatch):
    """``wandb.init(resume="allow")`` without an id opened a new W&B run for each resume (W&B
    resumes only a run whose id it is given); a run started over from step 0 gets a new one."""
    inits: list[dict] = []
    ids = itertools.count()

    def init(**kwargs):
        inits.append(kwargs)
        return types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)

    fake = types.SimpleNamespace(init=init, util=types.SimpleNamespace(generate_id=lambda: f"id{next(ids)}"))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    for resume_step in (0, 2, 4, 0, 3):  # fresh, two resumes, --force (from step 0), a resume of that
        RunLog(tmp_path, tensorboard=False, wandb=True, wandb_project="p", config={}, resume_step=resume_step).close()
    assert [(i["id"], i["resume"]) for i in inits] == [
        ("id0", "allow"),
        ("id0", "allow"),
        ("id0", "allow"),
        ("id1", "allow"),
        ("id1", "allow"),
    ]
    assert (tmp_path / "wandb_id").read_text() == "id1\n"

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


def fake_wandb(monkeypatch, fail_fork: bool = False) -> list[dict]:
    """A stand-in ``wandb`` module recording each ``init``'s keyword arguments; ``fail_fork``: its
    init raises where ``fork_from`` is given (an older wandb, a server without forking)."""
    inits: list[dict] = []
    ids = itertools.count()

    def init(**kwargs):
        inits.append(kwargs)
        if fail_fork and "fork_from" in kwargs:
            raise RuntimeError("forking is not enabled for this entity")
        return types.SimpleNamespace(log=lambda *a, **k: None, finish=lambda: None)

    fake = types.SimpleNamespace(init=init, util=types.SimpleNamespace(generate_id=lambda: f"id{next(ids)}"))
    monkeypatch.setitem(sys.modules, "wandb", fake)
    return inits


def test_a_branch_forks_its_source_wandb_run_at_the_branch_step_and_resumes_its_own(tmp_path, monkeypatch):
    """The source logs as id0. The branch's first session (from the source's step-6 checkpoint:
    resume_step 6) is a new run id1 forked at the branch step, fork_from="id0?_step=6", with no
    ``resume`` (W&B refuses both); its config names the source. A later session of the branch
    (resumed from its own step-8 checkpoint) resumes id1 and forks nothing."""
    inits = fake_wandb(monkeypatch)
    source, branch = tmp_path / "A", tmp_path / "B"
    source.mkdir(), branch.mkdir()
    record = {"run_dir": str(source), "step": 6, "checkpoint": "x", "config_sha256": "y"}
    RunLog(source, tensorboard=False, wandb=True, wandb_project="p", config={}).close()
    RunLog(
        branch, tensorboard=False, wandb=True, wandb_project="p", config={"k": 1}, resume_step=6, branch=record
    ).close()
    RunLog(
        branch, tensorboard=False, wandb=True, wandb_project="p", config={"k": 1}, resume_step=8, branch=record
    ).close()
    assert [(i["id"], i.get("fork_from"), i.get("resume")) for i in inits] == [
        ("id0", None, "allow"),
        ("id1", "id0?_step=6", None),
        ("id1", None, "allow"),
    ]
    want = {"k": 1, "branch_of": {"run_dir": str(source), "step": 6, "wandb_id": "id0"}}
    assert inits[1]["config"] == want and inits[2]["config"] == want
    assert (branch / "wandb_id").read_text() == "id1\n"


def test_a_branch_whose_fork_fails_or_whose_source_has_no_wandb_run_logs_a_run_of_its_own(
    tmp_path, monkeypatch, caplog
):
    """wandb.init refusing fork_from: said once (naming fork_from and the error), then the same id
    opened as a run of its own. A source without a W&B run (no wandb_id): no fork is tried."""
    inits = fake_wandb(monkeypatch, fail_fork=True)
    (tmp_path / "A").mkdir(), (tmp_path / "B").mkdir(), (tmp_path / "C").mkdir(), (tmp_path / "D").mkdir()
    (tmp_path / "A" / "wandb_id").write_text("src\n")
    with caplog.at_level("WARNING", logger="train_gpt"):
        RunLog(tmp_path / "B", False, True, "p", {}, resume_step=6, branch={"run_dir": str(tmp_path / "A"), "step": 6})
    assert [(i["id"], i.get("fork_from"), i.get("resume")) for i in inits] == [
        ("id0", "src?_step=6", None),
        ("id0", None, "allow"),
    ]
    assert "could not fork the source's W&B run (fork_from=src?_step=6: RuntimeError: forking is not enabled" in (
        caplog.text
    )
    inits.clear()
    RunLog(tmp_path / "D", False, True, "p", {}, resume_step=6, branch={"run_dir": str(tmp_path / "C"), "step": 6})
    assert [(i.get("fork_from"), i.get("resume")) for i in inits] == [(None, "allow")]
    assert inits[0]["config"]["branch_of"]["wandb_id"] is None

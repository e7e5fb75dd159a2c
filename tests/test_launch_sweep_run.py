"""Running sweeps with the stand-in trainer: completion, kill + resume, retries, busy runs, SLURM arrays.

The stand-in (tests/launch_fixtures/fake_train.py) honours train_gpt.py's contract and logs
every start and end to RUN_DIR/fake_events.jsonl, so the tests count attempts exactly.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from launch import attempts
from launch.__main__ import main
from launch.errors import LaunchError
from launch.resources import cpu_count, make_slots
from launch.sweep_dir import read_plan, write_plan
from launch.sweep_spec import expand, load_spec
from rundir.contract import CANONICAL_KEYS, TAIL_COLUMNS
from rundir.files import latest_checkpoint
from tests.launch_fixtures.helpers import (
    REPO,
    derived_spec,
    dumping,
    dumps,
    env_with,
    events,
    read_csv,
    starts,
    stub_bin,
    use_fake_trainer,
)

TINY_GRID = {
    "model.num_layers": [2, 4],
    "parametrization.preset": ["sp", "depth_mup"],
    "optimizer.lr": {"log2_range": [-10, -6, 2]},  # 2^-6 > FAKE_DIVERGE_LR: diverges at step 3
    "run.seed": [0],
}


@pytest.fixture(autouse=True)
def fake_trainer(monkeypatch):
    use_fake_trainer(monkeypatch)


def _spec(tmp_path: Path, steps: int = 12, grid: dict | None = None, **changes) -> Path:
    overrides = {"training.steps": steps, "parametrization.base_num_layers": 2, "checkpoint.keep": 2}
    return derived_spec(tmp_path, grid=grid or TINY_GRID, overrides=overrides, **changes)


def _runs(sweep_dir: Path) -> dict[str, Path]:
    return {run.run_id: sweep_dir / "runs" / run.run_id for run in read_plan(sweep_dir).runs}


def _check_results(sweep_dir: Path, n_runs: int, fractions: int = 2) -> list[dict[str, str]]:
    rows = read_csv(sweep_dir / "results.csv")
    assert len(rows) == n_runs * fractions
    assert len({(r["run_id"], r["fraction"]) for r in rows}) == len(rows)  # no duplicate run/fraction
    header = (sweep_dir / "results.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "run_id" and tuple(header[1:8]) == CANONICAL_KEYS and tuple(header[-4:]) == TAIL_COLUMNS
    return rows


def test_tiny_sweep_completes_and_rerun_is_a_no_op(tmp_path, capsys):
    spec = _spec(tmp_path)
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "completed  8" in out and "diverged   4" in out and "failed     0" in out

    runs = _runs(sweep_dir)
    assert len(runs) == 12
    statuses = Counter(json.loads((rd / "summary.json").read_text())["status"] for rd in runs.values())
    assert statuses == {"completed": 8, "diverged": 4}
    threads = str(max(1, cpu_count() // 2))
    for rd in runs.values():
        assert [s["omp"] for s in starts(rd)] == [threads]  # exactly one start, OMP_NUM_THREADS = cores // K
        assert len(attempts.read(rd).attempts) == 1

    rows = _check_results(sweep_dir, 12)
    done = [r for r in rows if r["status"] == "completed"]
    assert len(done) == 16 and all(r["val_loss"] and r["step"] in ("6", "12") for r in done)
    diverged = [r for r in rows if r["status"] == "diverged"]
    assert len(diverged) == 8 and all(r["val_loss"] == "" and r["step"] == "" for r in diverged)
    assert {r["parametrization.base_num_layers"] for r in rows} == {"2"}
    assert {r["optimizer.lr"] for r in rows} == {repr(2.0**-10), repr(2.0**-8), repr(2.0**-6)}

    before = {rid: len(events(rd)) for rid, rd in runs.items()}
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    assert {rid: len(events(rd)) for rid, rd in runs.items()} == before  # nothing started, not even a skip
    _check_results(sweep_dir, 12)

    results = pytest.importorskip("eval.results")  # the analysis side reads the file as written
    assert len(results.read_results(sweep_dir).rows) == 24


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _pid_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_sigkilled_sweep_resumes_only_missing_runs_without_duplicates(tmp_path, monkeypatch):
    grid = {"model.num_layers": [2, 4], "optimizer.lr": {"log2_range": [-10, -6, 2]}}  # 6 runs, 2 diverge
    spec = _spec(tmp_path, steps=60, grid=grid)
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    runs = _runs(sweep_dir)
    env = env_with(FAKE_STEP_SECONDS="0.05")
    log = open(tmp_path / "executor.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch", "run", str(sweep_dir), "--max-parallel", "2", "--no-progress"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def final() -> list[str]:
        return [rid for rid, rd in runs.items() if (rd / "summary.json").exists()]

    def mid_run() -> list[dict]:
        """Runs still going with a checkpoint past the fake divergence (step 3) and at least 20
        steps (1 s) left, so that one is still going when the kill lands on a loaded machine (a
        run seen at step 2 may diverge, or one near its end finish, before it)."""
        out = []
        for rd in runs.values():
            ev, latest = events(rd), latest_checkpoint(rd)
            if ev and ev[-1]["event"] == "start" and latest is not None:
                try:
                    step = json.loads((latest / "state.json").read_text())["step"]
                except (OSError, ValueError):  # pruned (checkpoint.keep) or being written: look again
                    continue
                if 3 <= step <= 20:
                    out.append(ev[-1])
        return out

    _wait_for(lambda: len(final()) >= 2 and mid_run(), 120, "2 finished runs and one in flight")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    log.close()
    finished_before = set(final())
    in_flight = {rid: e["pid"] for rid, rd in runs.items() for e in events(rd)[-1:] if e["event"] == "start"}
    assert in_flight
    _wait_for(lambda: all(_pid_gone(pid) for pid in in_flight.values()), 30, "orphaned trainers to exit")
    # parent-death SIGTERM: each in-flight trainer wrote its end; the one seen mid-run checkpointed and
    # exited 75 (one a step from its last step or its planted divergence may end that way first)
    assert all(events(runs[rid])[-1]["event"] == "end" for rid in in_flight)
    interrupted = {rid for rid in in_flight if events(runs[rid])[-1].get("exit_code") == 75}
    assert interrupted

    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.01")
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    for rid, rd in runs.items():
        ev = events(rd)
        begun = [e for e in ev if e["event"] == "start"]
        ends = [e for e in ev if e["event"] == "end"]
        assert len(begun) == (2 if rid in interrupted else 1), rid
        assert len(ends) == len(begun)
        assert [e["exit_code"] for e in ends][-1] in (0, 3)
        assert sum(1 for e in ends if e["exit_code"] in (0, 3)) == 1  # finished exactly once
        for a, b in zip(ev[::2], ev[1::2]):  # start/end pairs never overlap
            assert a["event"] == "start" and b["event"] == "end" and a["time"] <= b["time"]
        if rid in interrupted:
            assert begun[1]["start_step"] == ends[0]["step"]  # resumed from the checkpoint written at SIGTERM
            log_ = attempts.read(rd)
            assert [a.outcome for a in log_.attempts][0] == "interrupted" and log_.failures == 0
        if rid in finished_before:
            assert len(begun) == 1
        metrics = [json.loads(x) for x in (rd / "metrics.jsonl").read_text().splitlines()]
        steps_seen = [m["step"] for m in metrics if m["kind"] == "train"]
        assert steps_seen == sorted(set(steps_seen))  # no duplicate steps after the resume
    assert len(finished_before) >= 2  # ... and were not started again
    assert any(starts(runs[rid])[1]["start_step"] > 0 for rid in interrupted)  # the one caught mid-run
    _check_results(sweep_dir, 6)


def test_sigterm_to_sweep_preempts_runs_without_counting_failures(tmp_path):
    spec = _spec(tmp_path, steps=200, grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001]})
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    runs = _runs(sweep_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch", "run", str(sweep_dir), "--max-parallel", "2", "--no-progress"],
        cwd=REPO, env=env_with(FAKE_STEP_SECONDS="0.02"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _wait_for(lambda: all((rd / "checkpoints" / "latest").exists() for rd in runs.values()), 120, "both runs to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 75
    for rd in runs.values():
        assert [e.get("exit_code") for e in events(rd) if e["event"] == "end"] == [75]
        log = attempts.read(rd)
        assert [a.outcome for a in log.attempts] == ["preempted"] and log.failures == 0
    assert main(["status", str(sweep_dir)]) == 75  # pending: rerun to resume
    rows = _check_results(sweep_dir, 2)
    assert {r["status"] for r in rows} == {"pending"}


def _launch_one_run(tmp_path: Path, stderr, **fake: str) -> tuple[Path, Path, subprocess.Popen]:
    """A one-run sweep started by ``launch run`` in a child process (the fake trainer's
    ``FAKE_*`` settings in ``fake``): its sweep dir, its run dir and the process."""
    spec = _spec(tmp_path, grid={"model.num_layers": [2], "optimizer.lr": [0.001]})
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    (rd,) = _runs(sweep_dir).values()
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch", "run", str(sweep_dir), "--no-progress"],
        cwd=REPO, env=env_with(**fake), stdout=subprocess.DEVNULL, stderr=stderr, text=True,
    )  # fmt: skip
    return sweep_dir, rd, proc


def test_trainer_stopped_before_its_handlers_exist_is_interrupted_not_failed(tmp_path):
    _, rd, proc = _launch_one_run(tmp_path, subprocess.DEVNULL, FAKE_STARTUP_SECONDS="60")
    _wait_for(lambda: len(attempts.read(rd).attempts) == 1, 60, "the trainer to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 75
    log = attempts.read(rd)
    assert [(a.exit_code, a.outcome) for a in log.attempts] == [(-signal.SIGTERM, "interrupted")]
    assert log.failures == 0 and events(rd) == []


def test_trainer_killed_in_its_teardown_after_its_summary_is_what_the_summary_says(tmp_path):
    """summary.json is the run's record: a SIGTERM that kills the trainer after it wrote a
    completed summary (the interpreter's exit restores default handlers) leaves it completed."""
    sweep_dir, rd, proc = _launch_one_run(tmp_path, subprocess.PIPE, FAKE_TEARDOWN_SECONDS="60")
    _wait_for(lambda: (rd / "summary.json").exists(), 60, "the trainer's summary")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    # launch was interrupted after its one run ended: nothing to resume, so 0, not 75 (an array task
    # exiting 75 there requeued itself only to find its runs done; docs/launch.md: exit codes)
    assert proc.returncode == 0
    assert "completed (exit 0)" in err and "interrupted" not in err
    log = attempts.read(rd)
    assert [(a.exit_code, a.outcome) for a in log.attempts] == [(0, "completed")]
    assert log.failures == 0
    assert main(["status", str(sweep_dir)]) == 0


def test_failed_runs_are_retried_up_to_the_limit_then_reported(tmp_path, monkeypatch, capsys):
    grid = {"model.num_layers": [2, 4], "optimizer.lr": [0.001]}
    spec = _spec(tmp_path, grid=grid, executor={"kind": "local", "max_parallel": 2, "max_retries": 2})
    sweep_dir = tmp_path / "sw"
    monkeypatch.setenv("FAKE_FAIL_MATCH", "/L4-")
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "completed  1" in out and "failed     1" in out and "gave up" in out
    runs = _runs(sweep_dir)
    (bad,) = [rd for rid, rd in runs.items() if rid.startswith("L4-")]
    (good,) = [rd for rid, rd in runs.items() if rid.startswith("L2-")]
    assert len(starts(bad)) == 3 and attempts.read(bad).failures == 3  # first try + max_retries=2
    assert len(starts(good)) == 1
    rows = _check_results(sweep_dir, 2)
    assert [r["status"] for r in rows if r["run_id"] == bad.name] == ["failed", "failed"]

    # A rerun does not retry a run that used up its attempts ...
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 1
    assert len(starts(bad)) == 3
    # ... unless the limit is raised; this time the injected failure is gone after 3 starts.
    monkeypatch.setenv("FAKE_FAIL_TIMES", "3")
    assert main(["run", str(sweep_dir), "--max-retries", "3", "--no-progress"]) == 0
    assert len(starts(bad)) == 4 and len(starts(good)) == 1
    assert json.loads((bad / "summary.json").read_text())["status"] == "completed"


def test_transient_failure_is_retried_in_the_same_invocation(tmp_path, monkeypatch):
    spec = _spec(tmp_path, grid={"model.num_layers": [2], "optimizer.lr": [0.001]})
    monkeypatch.setenv("FAKE_FAIL_MATCH", "/L2-")
    monkeypatch.setenv("FAKE_FAIL_TIMES", "1")
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    (rd,) = _runs(sweep_dir).values()
    assert [e["exit_code"] for e in events(rd) if e["event"] == "end"] == [1, 0]
    assert [a.outcome for a in attempts.read(rd).attempts] == ["failed", "completed"]


def test_run_locked_elsewhere_is_not_started_nor_counted(tmp_path, monkeypatch, capsys):
    spec = _spec(tmp_path, grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001]})
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    runs = _runs(sweep_dir)
    (held,) = [rd for rid, rd in runs.items() if rid.startswith("L4-")]
    held.mkdir(parents=True)
    with open(held / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "another sweep" owns this run
        assert main(["run", str(sweep_dir), "--no-progress"]) == 4
        assert "running    1" in capsys.readouterr().out
        assert starts(held) == [] and attempts.read(held).attempts == []
        # Same, when the lock is not visible to launch (another host): the trainer itself exits 4.
        monkeypatch.setattr("launch.executor_local.run_locked", lambda _path: False)
        assert main(["run", str(sweep_dir), "--no-progress"]) == 4
        log = attempts.read(held)
        assert [(a.exit_code, a.outcome) for a in log.attempts] == [(4, "busy")] and log.failures == 0
        rows = read_csv(sweep_dir / "results.csv")
        assert {r["status"] for r in rows if r["run_id"] == held.name} == {"pending"}
    assert main(["run", str(sweep_dir), "--no-progress"]) == 0
    assert len(starts(held)) == 1


def test_status_before_any_run_and_extra_swept_columns(tmp_path, capsys):
    grid = {"model.num_layers": [2, 4], "model.num_attention_heads": [2, 4], "optimizer.lr": [0.001]}
    spec = _spec(tmp_path, grid=grid)
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    assert main(["status", str(sweep_dir)]) == 75  # pending
    assert "pending    4" in capsys.readouterr().out
    rows = _check_results(sweep_dir, 4)
    header = (sweep_dir / "results.csv").read_text().splitlines()[0].split(",")
    assert header[8] == "model.num_attention_heads" and header[9] == "status"
    assert {r["status"] for r in rows} == {"pending"}
    assert {(r["model.num_layers"], r["model.num_attention_heads"]) for r in rows} == {
        ("2", "2"), ("2", "4"), ("4", "2"), ("4", "4")
    }  # fmt: skip
    assert {r["model.hidden_size"] for r in rows} == {"64"} and {r["fraction"] for r in rows} == {"0.5", "1.0"}

    # A run that logged an extra eval (eval.interval) and got half-way before failing.
    rid = read_plan(sweep_dir).runs[0].run_id
    rd = sweep_dir / "runs" / rid
    rd.mkdir(parents=True)
    lines = [
        {"kind": "eval", "step": 3, "fraction": 0.25, "tokens": 1, "val_loss": 5.0},
        {"kind": "train", "step": 6, "loss": 4.0},
        {"kind": "eval", "step": 6, "fraction": 0.5, "tokens": 2, "val_loss": 4.5},
        '{"kind": "eval", "step": 9, "fra',  # cut short by a hard kill
    ]
    (rd / "metrics.jsonl").write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    (rd / "summary.json").write_text(json.dumps({"status": "failed", "reason": "RuntimeError: boom", "exit_code": 1}))
    assert main(["status", str(sweep_dir)]) == 1  # a run failed
    assert "failed     1" in capsys.readouterr().out
    mine = [
        (r["status"], r["step"], r["fraction"], r["val_loss"])
        for r in read_csv(sweep_dir / "results.csv")
        if r["run_id"] == rid
    ]
    assert mine == [("failed", "6", "0.5", "4.5"), ("failed", "", "1.0", ""), ("failed", "3", "0.25", "5.0")]
    assert len(read_csv(sweep_dir / "results.csv")) == 9


def test_slurm_array_submission_and_tasks(tmp_path, capsys, monkeypatch):
    spec = _spec(tmp_path, grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001, 0.002]})
    sweep_dir = tmp_path / "my sweep's dir"
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    stubs = {"sbatch": dumping("sbatch"), "squeue": "true"}  # squeue: the array is no longer queued
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm", "--max-parallel", "3"]) == 0
    assert "submitted array job 4242: 4 runs" in capsys.readouterr().out
    (call,) = dumps(dump_dir, "sbatch")
    (folder,) = (sweep_dir / "slurm").iterdir()
    script = folder / "array.sbatch"
    assert call["argv"] == ["--parsable", f"--output={folder}/%A_%a.out", str(script)]
    text = script.read_text()
    assert "#SBATCH --array=0-3%3\n" in text and "#SBATCH --signal=B:TERM@120\n" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    ids = (folder / "runs.txt").read_text().split()
    assert ids == [r.run_id for r in read_plan(sweep_dir).runs]
    assert json.loads((folder / "job.json").read_text())["job_id"] == "4242"

    for task in (3, 0):  # what SLURM does for array tasks 3 and 0
        done = subprocess.run(["bash", str(script)], env=env_with(SLURM_ARRAY_TASK_ID=str(task)), capture_output=True)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert [len(starts(sweep_dir / "runs" / rid)) for rid in ids] == [1, 0, 0, 1]
    beyond = subprocess.run(
        ["bash", str(script)], env=env_with(SLURM_ARRAY_TASK_ID="4"), capture_output=True, text=True
    )
    assert beyond.returncode == 2 and "no run for array task 4" in beyond.stderr

    # Resubmitting sends only the two runs still pending, in a new submission folder.
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]) == 0
    second = [f for f in (sweep_dir / "slurm").iterdir() if f != folder]
    assert len(second) == 1 and (second[0] / "runs.txt").read_text().split() == [ids[1], ids[2]]
    assert "#SBATCH --array=0-1%2\n" in (second[0] / "array.sbatch").read_text()  # spec's max_parallel
    for rid in ids:
        (sweep_dir / "runs" / rid).mkdir(exist_ok=True)
        (sweep_dir / "runs" / rid / "summary.json").write_text('{"status": "completed"}')
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]) == 0
    assert "nothing to submit" in capsys.readouterr().err
    assert len(list((sweep_dir / "slurm").iterdir())) == 2


def test_slots_pin_gpus_or_split_cpu_threads():
    slots = make_slots(3, 2, gpus=["0", "1", "2", "3", "4"])
    assert [s.env for s in slots] == [{"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"}]
    assert [s.env["OMP_NUM_THREADS"] for s in make_slots(2, 1, gpus=[], cpus=5)] == ["2", "2"]
    assert [s.env["OMP_NUM_THREADS"] for s in make_slots(8, 1, gpus=[], cpus=2)] == ["1"] * 8
    assert make_slots(2, 0, gpus=["0", "1"], cpus=4)[0].env == {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"}
    with pytest.raises(LaunchError, match="gpus_per_run=4 but only 1 GPU"):
        make_slots(1, 4, gpus=["0"])


def test_concurrent_runs_get_distinct_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.1")  # 1.2 s a run: runs overlap even on a loaded machine
    grid = {"model.num_layers": [2, 4], "optimizer.lr": [0.001, 0.002]}
    spec = _spec(tmp_path, grid=grid, executor={"kind": "local", "max_parallel": 4, "gpus_per_run": 1})
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    spans = []
    for rd in _runs(sweep_dir).values():
        ev = events(rd)
        assert len(ev) == 2
        spans.append((ev[0]["time"], ev[1]["time"], ev[0]["gpus"]))
    assert {g for _, _, g in spans} <= {"5", "7"}  # 4 slots asked, 2 GPUs: 2 slots of one GPU each
    overlapping = [
        (ga, gb) for i, (a0, a1, ga) in enumerate(spans) for b0, b1, gb in spans[i + 1 :] if a0 < b1 and b0 < a1
    ]
    assert overlapping and all(ga != gb for ga, gb in overlapping)  # runs side by side never share a GPU


def test_missing_trainer_script_stops_the_sweep_before_any_run(tmp_path, monkeypatch, capsys):
    """A sweep moved to another checkout: no run may be started and recorded as an invalid config."""
    missing = tmp_path / "gone" / "train_gpt.py"
    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", f"{sys.executable} {missing}")
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(_spec(tmp_path)), "--sweep-dir", str(sweep_dir), "--no-progress"]) != 0
    err = capsys.readouterr().err
    assert f"trainer script not found: {str(missing)!r}" in err
    # a trainer the user gave is kept as given, even in the form of the toolkit's own: the message
    # names sweep.yaml's key and how to change it
    assert "sweep.yaml train_cmd:" in err and "set `train_cmd: null` in sweep.yaml" in err
    assert all(not (rd / "launch" / "attempts.json").exists() for rd in _runs(sweep_dir).values())
    # as it says: `train_cmd: null` is this checkout's trainer ($DEPTHMUP_TRAIN_CMD where set: the stand-in)
    data = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    assert data["train_cmd"] == [sys.executable, str(missing)] and data["train_cmd_given"] is True
    data["train_cmd"] = None
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    use_fake_trainer(monkeypatch)
    first, first_dir = next(iter(_runs(sweep_dir).items()))
    assert main(["run", str(sweep_dir), "--no-progress", "--only", first]) == 0
    assert len(starts(first_dir)) == 1


def _written_elsewhere(tmp_path: Path, train_cmd: list[str] | None, given: bool | None) -> Path:
    """A 2-run sweep directory as a checkout at another path wrote it: ``train_cmd`` in its sweep.yaml
    and ``train_cmd_given`` as ``given`` (None: no such key, as in a sweep expanded before it)."""
    grid = {"model.num_layers": [2], "parametrization.preset": ["sp", "depth_mup"], "optimizer.lr": [2.0**-10]}
    tmp_path.mkdir(exist_ok=True)
    spec = _spec(tmp_path, steps=6, grid=grid)
    sweep_dir = tmp_path / "node" / "sw"
    sweep_dir.mkdir(parents=True)
    write_plan(sweep_dir, expand(spec, load_spec(spec), sweep_dir=sweep_dir))
    data = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    data["train_cmd"] = train_cmd
    data.pop("train_cmd_given", None)
    if given is not None:
        data["train_cmd_given"] = given
    (sweep_dir / "sweep.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return sweep_dir


def test_a_sweep_moved_between_checkouts_runs_the_trainer_of_the_checkout_it_runs_in(tmp_path, monkeypatch):
    """No trainer given: sweep.yaml records none, and `launch run` takes the running checkout's (its
    python and train_gpt.py, or $DEPTHMUP_TRAIN_CMD set now); sweep.yaml files from before, which
    recorded the expanding checkout's absolute python and train_gpt.py, are read the same way."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD")
    spec = _spec(tmp_path, steps=6)
    plan = expand(spec, load_spec(spec), sweep_dir=tmp_path / "sw")
    assert plan.train_cmd is None and plan.train_cmd_given is False
    assert plan.trainer() == [sys.executable, str(REPO / "train_gpt.py")]
    # the run IDs do not depend on the trainer: the same with a trainer given
    given = expand(spec, load_spec(spec), "python /elsewhere/train_gpt.py", sweep_dir=tmp_path / "sw")
    assert given.train_cmd == ["python", "/elsewhere/train_gpt.py"] and given.train_cmd_given is True
    assert [r.run_id for r in given.runs] == [r.run_id for r in plan.runs] and len(plan.runs) == 12

    laptop = [sys.executable.replace("/bin/", "/laptop-bin/"), str(tmp_path / "laptop" / "depthmup" / "train_gpt.py")]
    for train_cmd, given_flag in ((None, False), (laptop, None)):
        sweep_dir = _written_elsewhere(tmp_path / str(given_flag), train_cmd, given_flag)
        assert read_plan(sweep_dir).trainer_is_given() is False
        use_fake_trainer(monkeypatch)  # this checkout's trainer, set now
        assert main(["run", str(sweep_dir), "--no-progress"]) == 0
        runs = _runs(sweep_dir)
        assert len(runs) == 2 and all(len(starts(rd)) == 1 for rd in runs.values())
        assert {r["status"] for r in read_csv(sweep_dir / "results.csv")} == {"completed"}
        monkeypatch.delenv("DEPTHMUP_TRAIN_CMD")


def test_a_trainer_given_in_another_form_is_kept_in_an_old_sweep_file(tmp_path, monkeypatch, capsys):
    """An old sweep.yaml's train_cmd that is not the old default's form (here a wrapper) is a trainer
    the user gave: kept, and refused where it is missing, naming sweep.yaml's key."""
    wrapper = str(tmp_path / "laptop" / "bin" / "my-trainer")
    sweep_dir = _written_elsewhere(tmp_path, [wrapper, "--fast"], None)
    assert read_plan(sweep_dir).trainer() == [wrapper, "--fast"]
    assert main(["run", str(sweep_dir), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"trainer command not found: {wrapper!r} (sweep.yaml train_cmd: [{wrapper!r}, '--fast']" in err
    assert not any(starts(rd) for rd in _runs(sweep_dir).values())

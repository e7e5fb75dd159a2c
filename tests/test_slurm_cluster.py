"""Sweeps, training jobs and data_prep on a real one-host SLURM cluster (tests/slurm_cluster.py).

Marked ``slurm``: not in the default selection; ``python -m pytest -m slurm`` (``.ci/run`` does)
runs them, each skipping with the reason where slurm-wlm and munge cannot be installed or
started. What a cluster user meets, for real: array jobs, ``scancel``, a time limit with its
early SIGTERM, ``--dependency=afterok`` chains, self-requeue, batch jobs whose PATH lacks
the environment's bin/. Where the assertion is about training results the real trainer runs
(configs/tiny_cpu.yaml sized); where only the run contract matters, the stand-in does.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_prep.api import load_data_prep_config
from data_prep.pipeline import manifest_without_run, run
from data_prep.slurm import load_frozen
from jobscripts import squeue
from launch import attempts
from launch.__main__ import main
from launch.processes import with_repo_on_path
from tests.data_prep_fixtures import english_doc, write_jsonl
from tests.launch_fixtures.helpers import FAKE_TRAIN_CMD, TINY_BASE, derived_spec, read_csv, starts
from tests.slurm_cluster import Cluster
from tests.test_data_prep_pipeline import planted_inputs, planted_overrides
from tests.test_data_prep_slurm import OUTPUTS

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[1]


def _wait(predicate, timeout: float, what: str, poll: float = 0.1) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def _arrays(sweep_dir: Path) -> list[tuple[str, list[str]]]:
    """(job id, run IDs) of each array submission of a sweep, oldest first."""
    out = []
    for folder in sorted((sweep_dir / "slurm").iterdir()):
        out.append((json.loads((folder / "job.json").read_text())["job_id"], (folder / "runs.txt").read_text().split()))
    return out


def _task_logs(sweep_dir: Path) -> str:
    return "".join(p.read_text() for p in sorted((sweep_dir / "slurm").glob("*/*.out")))


def _metrics(rd: Path) -> list[dict]:
    return [json.loads(line) for line in (rd / "metrics.jsonl").read_text().splitlines()]


def _numbers(rd: Path) -> list[dict]:
    """What a run computed, step by step (its metrics rows without the timings)."""
    keep = ("kind", "step", "tokens", "loss", "grad_norm", "lr", "fraction", "val_loss")
    return [{k: row[k] for k in keep if k in row} for row in _metrics(rd)]


# ----------------------------------------------------------------------------- (a) scancel + rerun


def test_sweep_scancelled_mid_run_and_rerun_matches_a_local_sweep(slurm: Cluster, tmp_path, monkeypatch):
    """Three real runs, one at a time; the array is cancelled while the second trains. A rerun
    submits the second (it resumes from the checkpoint written at the SIGTERM) and the third:
    no run is lost or trained twice, and every loss equals a local sweep's bit for bit."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # what a login shell may carry: the allocation must win
    spec = derived_spec(
        tmp_path,
        grid={"model.num_layers": [2], "optimizer.lr": [2.0**-9, 2.0**-8, 2.0**-7]},
        overrides={"training.steps": 80, "parametrization.base_num_layers": 2, "logging.interval": 5},
        executor={"kind": "slurm", "max_parallel": 1, "max_retries": 1, "gpus_per_run": 0},
        slurm={"time": "00:10:00"},
    )
    sweep_dir = tmp_path / "slurm_sweep"
    submit = ["sweep", str(spec), "--sweep-dir", str(sweep_dir)]
    assert main(submit) == 0
    ((job, ids),) = _arrays(sweep_dir)
    first, second, third = (sweep_dir / "runs" / rid for rid in ids)
    _wait(lambda: (second / "metrics.jsonl").exists() and len(_metrics(second)) >= 2, 300, "the second run to train")
    slurm.run("scancel", job)
    slurm.wait_gone([job], timeout=120)
    assert json.loads((first / "summary.json").read_text())["status"] == "completed"
    assert (
        not (second / "summary.json").exists() or json.loads((second / "summary.json").read_text())["exit_code"] == 75
    )
    assert [a.outcome for a in attempts.read(second).attempts] in (["preempted"], ["interrupted"])
    assert not third.exists() or not (third / "launch" / "attempts.json").exists()  # never started

    assert main(submit) == 0
    (_, again_ids), (job2, again) = _arrays(sweep_dir)
    assert again == [second.name, third.name]  # only what was not finished
    slurm.wait_gone([job2], timeout=300)
    assert "resumed from" in (second / "train.log").read_text()
    for rd, outcomes in ((first, ["completed"]), (second, [None, "completed"]), (third, ["completed"])):
        log = attempts.read(rd).attempts
        assert [a.outcome for a in log][1:] == outcomes[1:] and log[-1].outcome == "completed", rd.name
        assert all(a.ended <= b.started for a, b in zip(log, log[1:]))  # one trainer at a time
        steps = [r["step"] for r in _metrics(rd) if r["kind"] == "train"]
        assert len(steps) == len(set(steps)) and steps[-1] == 80
    assert main(["status", str(sweep_dir)]) == 0

    local_dir = tmp_path / "local_sweep"
    threads = len(os.sched_getaffinity(0))  # one thread per run, as SLURM's --cpus-per-task=1 gives
    local = [*submit[:2], "executor.start=fork", "--sweep-dir", str(local_dir), "--executor", "local"]
    assert main([*local, "--max-parallel", str(threads), "--no-progress"]) == 0  # fork: one import for 3 runs
    for rid in ids:
        assert _numbers(sweep_dir / "runs" / rid) == _numbers(local_dir / "runs" / rid), rid  # every loss, every bit
    strip = ("status",)
    slurm_rows = [{k: v for k, v in r.items() if k not in strip} for r in read_csv(sweep_dir / "results.csv")]
    local_rows = [{k: v for k, v in r.items() if k not in strip} for r in read_csv(local_dir / "results.csv")]
    assert slurm_rows == local_rows and all(r["val_loss"] for r in slurm_rows)
    logs = _task_logs(sweep_dir)
    assert "val_loss" in logs and "resumed from" in logs  # the trainers' output is in the task logs


# ----------------------------------------------------------------------------- (b) time limit


def test_time_limit_preempts_requeues_and_finishes(slurm: Cluster, tmp_path, monkeypatch):
    """A one-minute limit with a 30 s grace: SLURM's SIGTERM comes at its first time-limit check
    (they run every 30 s), the run checkpoints and exits 75, the task requeues itself and
    resumes, until the 40 s of training are done. No run of the job ends FAILED. Two tasks at
    once: the one that starts last keeps the array's own job id, which names both tasks, so it
    must requeue itself as ``ARRAY_TASK`` (as ``$SLURM_JOB_ID`` it was left FAILED)."""
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.5")
    spec = derived_spec(
        tmp_path,
        grid={"model.num_layers": [2], "optimizer.lr": [0.001, 0.002]},
        overrides={"training.steps": 80, "parametrization.base_num_layers": 2},
        executor={"kind": "slurm", "max_parallel": 2, "max_retries": 0, "gpus_per_run": 0},
        slurm={"time": "00:01:00", "signal_grace_s": 30},
        train_cmd=FAKE_TRAIN_CMD,
    )
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir)]) == 0
    ((job, rids),) = _arrays(sweep_dir)
    slurm.wait_gone([job], timeout=300)  # each requeue waits cred_expire (10 s on the test cluster) first
    requeues = 0
    for rid in rids:
        rd = sweep_dir / "runs" / rid
        assert json.loads((rd / "summary.json").read_text())["status"] == "completed"
        ends = [e["exit_code"] for e in (json.loads(x) for x in (rd / "fake_events.jsonl").read_text().splitlines())
                if e["event"] == "end"]  # fmt: skip
        assert ends[-1] == 0 and len(ends) >= 2 and set(ends[:-1]) == {75}  # preempted at least once
        assert [s["start_step"] for s in starts(rd)][0] == 0 and all(s["start_step"] > 0 for s in starts(rd)[1:])
        log = attempts.read(rd)
        assert [a.outcome for a in log.attempts] == ["preempted"] * (len(ends) - 1) + ["completed"]
        assert log.failures == 0
        requeues += len(ends) - 1
    text = _task_logs(sweep_dir)
    assert text.count("requeueing job") == requeues  # the log is appended to, not replaced, on requeue
    assert text.count("fake_train: completed 80 steps") == 2
    for task in ("0", "1"):
        states = [
            c["JobState"] for c in slurm.completions() if (c.get("ArrayJobId"), c.get("ArrayTaskId")) == (job, task)
        ]
        assert "FAILED" not in states and states[-1] == "COMPLETED", (task, states)  # a requeue is logged PENDING
    assert main(["status", str(sweep_dir)]) == 0


# ----------------------------------------------------------------------------- (c) data_prep


def test_data_prep_with_a_killed_array_task_writes_the_local_bytes(slurm: Cluster, tmp_path):
    """The chain of stage jobs, two tasks per array; the tokenize task that holds the one large
    shard is SIGKILLed while it writes (its ``.tmp`` file stays), so the merge is cancelled by
    its dependency; running the command again resubmits that task and the merge, and the
    output is byte-identical to a local run's, with no ``.tmp`` file left."""
    raw = tmp_path / "raw"
    planted_inputs(raw)
    write_jsonl(raw / "z_large.jsonl", [english_doc(1000 + i) for i in range(1500)])  # seconds to tokenize
    reference = run(load_data_prep_config(None, planted_overrides(raw, tmp_path / "local")))
    out = tmp_path / "slurm_out"
    cli = [sys.executable, "-m", "data_prep", *planted_overrides(raw, out), "--executor", "slurm"]
    cli.append("runtime.slurm.array_tasks=2")
    env = {**with_repo_on_path(REPO, os.environ), **slurm.env}
    first = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    (sub,) = (out / ".work" / "slurm").glob("*/submissions/*")
    jobs = json.loads((sub / "jobs.json").read_text())
    names = slurm.names()
    assert {names[j] for j in names if j.split("_")[0] == jobs["merge"]} == {"dp-merge"}  # its own name in squeue
    _, shards, tasks = load_frozen(sub.parent.parent)
    (large,) = [s for s in shards if s.source.path.endswith("z_large.jsonl")]
    victim = f"{jobs['tokenize']}_{large.index % tasks['tokenize']}"
    tokens = out / ".work" / "tokens"

    def writing() -> bool:
        return slurm.queued([victim]).get(victim) == "RUNNING" and any(tokens.glob(f".{large.shard_id}.*.tmp"))

    _wait(writing, 300, "the tokenize task of the large shard to write it", poll=0.01)
    slurm.run("scancel", "--signal=KILL", "--full", victim)  # everything of the task dies at once
    slurm.wait_gone(list(jobs.values()), timeout=300)
    assert not (out / "manifest.json").exists()  # the merge never ran: its dependency failed
    assert list(tokens.glob(f".{large.shard_id}.*.tmp"))  # the killed task's half-written files

    again = subprocess.run(cli, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "tokenize (1 of 2 tasks), merge (1 of 1 tasks)" in again.stdout  # only what was left
    (resubmitted,) = [p for p in sub.parent.glob("*/jobs.json") if p.parent != sub]
    jobs2 = json.loads(resubmitted.read_text())
    slurm.wait_gone(list(jobs2.values()), timeout=300)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run"]["executor"] == "slurm"
    assert manifest_without_run(manifest) == manifest_without_run(reference)
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    assert list(out.rglob("*.tmp")) == []
    merge_log = (resubmitted.parent / f"merge-{jobs2['merge']}.out").read_text()
    assert merge_log.splitlines()[-1].endswith(f"wrote {out / 'manifest.json'} (train {reference['train']['tokens']} "
                                               f"tokens, valid {reference['valid']['tokens']} tokens)")  # fmt: skip
    states = {c["JobId"]: c["JobState"] for c in slurm.completions()}
    assert states[jobs2["merge"]] == "COMPLETED"


# ----------------------------------------------------------------------------- (d) duplicate submission


def test_rerun_while_the_array_runs_submits_nothing(slurm: Cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.1")
    spec = derived_spec(
        tmp_path,
        grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001]},
        overrides={"training.steps": 20, "parametrization.base_num_layers": 2},
        executor={"kind": "slurm", "max_parallel": 1, "max_retries": 0, "gpus_per_run": 0},
        train_cmd=FAKE_TRAIN_CMD,
    )
    sweep_dir = tmp_path / "sw"
    argv = ["sweep", str(spec), "--sweep-dir", str(sweep_dir)]
    assert main(argv) == 0
    ((job, ids),) = _arrays(sweep_dir)
    assert slurm.queued([job])
    assert main(argv) == 4  # the array is queued or running: nothing new
    assert f"2 runs that need work are in array job {job}" in capsys.readouterr().err
    assert len(_arrays(sweep_dir)) == 1
    slurm.wait_gone([job], timeout=120)
    assert main(argv) == 0 and "every run is completed" in capsys.readouterr().err
    for rid in ids:
        assert len(starts(sweep_dir / "runs" / rid)) == 1  # each run trained by one task, once
    assert {r["status"] for r in read_csv(sweep_dir / "results.csv")} == {"completed"}


def test_a_rerun_beside_a_running_array_keeps_to_max_parallel(slurm: Cluster, tmp_path, monkeypatch, capsys):
    """``max_parallel: 1``: the sweep grows by a run while its first array trains. Before, the rerun's
    array got its own ``%1`` and ran beside the first (2 of the sweep's tasks RUNNING on this
    2-CPU node); now it waits for the first array (afterany) and squeue never shows 2 running."""
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.1")

    def spec(lrs: list[float]) -> Path:
        return derived_spec(
            tmp_path,
            grid={"model.num_layers": [2], "optimizer.lr": lrs},
            overrides={"training.steps": 20, "parametrization.base_num_layers": 2},
            executor={"kind": "slurm", "max_parallel": 1, "max_retries": 0, "gpus_per_run": 0},
            train_cmd=FAKE_TRAIN_CMD,
        )

    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec([0.001, 0.002])), "--sweep-dir", str(sweep_dir)]) == 0
    ((first, first_ids),) = _arrays(sweep_dir)
    _wait(lambda: "RUNNING" in slurm.queued([first]).values(), 60, f"array {first} to start")
    assert main(["sweep", str(spec([0.001, 0.002, 0.003])), "--sweep-dir", str(sweep_dir)]) == 0
    (_, ids), (second, second_ids) = _arrays(sweep_dir)
    assert ids == first_ids and len(second_ids) == 1 and second_ids[0] not in first_ids
    assert f"afterany:{first}" in slurm.job(second).get("Dependency", "")
    most = 0
    while states := slurm.queued([first, second]):
        most = max(most, sum(state == "RUNNING" for state in states.values()))
        time.sleep(0.2)
    assert most == 1
    for rid in first_ids + second_ids:
        assert len(starts(sweep_dir / "runs" / rid)) == 1
    assert {r["status"] for r in read_csv(sweep_dir / "results.csv")} == {"completed"}


# ----------------------------------------------------------------------------- launch job


def test_slurm_job_runs_torchrun_without_the_environment_on_path(slurm: Cluster, tmp_path, monkeypatch):
    """`launch job --launcher slurm` (srun, then torchrun on the node) from a shell whose PATH
    has only the system's bin/ (the job inherits it), in a directory outside the checkout:
    torchrun is the interpreter's module, the toolkit is found through PYTHONPATH."""
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(tmp_path)  # submitted from outside the checkout: the script must find it
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tmp_path / "job"
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=8", "--launcher", "slurm"]
    assert main([*argv, "--nproc-per-node", "1", "--master-port", str(port), "--train-cmd", FAKE_TRAIN_CMD]) == 0
    job = json.loads((run_dir / "launch" / "slurm_job.json").read_text())["job_id"]
    slurm.wait_gone([job], timeout=120)
    log = next((run_dir / "launch").glob("slurm-*.out")).read_text()
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed", log
    assert re.search(r"-m torch\.distributed\.run", (run_dir / "launch" / "slurm.sbatch").read_text())


# ----------------------------------------------------------------------------- a job that dies at once


def _status_from_another_host(sweep_dir: Path, env: dict) -> subprocess.CompletedProcess:
    """``launch status`` as a login node runs it: another host name (a UTS namespace), so the
    compute node's pids cannot be checked."""
    status = shlex.join([sys.executable, "-m", "launch", "status", str(sweep_dir)])
    argv = ["unshare", "--uts", "sh", "-c", f"hostname login-node && {status}"]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_status_after_the_job_died_at_once_says_pending_and_a_rerun_finishes(slurm: Cluster, tmp_path, monkeypatch):
    """Every process of an array task SIGKILLed together (what a node failure leaves): its
    attempt stays open in attempts.json. `status` on another host must not call the run
    running forever (exit 4): squeue says the attempt's job ended, so it is pending (75), and
    the rerun resubmits it and it completes."""
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --uts is not allowed here")
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.2")
    spec = derived_spec(
        tmp_path,
        grid={"model.num_layers": [2], "optimizer.lr": [0.001]},
        overrides={"training.steps": 200, "parametrization.base_num_layers": 2},
        executor={"kind": "slurm", "max_parallel": 1, "max_retries": 0, "gpus_per_run": 0},
        train_cmd=FAKE_TRAIN_CMD,
    )
    sweep_dir = tmp_path / "sw"
    argv = ["sweep", str(spec), "--sweep-dir", str(sweep_dir)]
    assert main(argv) == 0
    ((array, (rid,)),) = _arrays(sweep_dir)
    rd = sweep_dir / "runs" / rid
    _wait(lambda: starts(rd) and attempts.read(rd).attempts, 120, "the run to start")
    (attempt,) = attempts.read(rd).attempts
    assert attempt.job == f"{array}_0"  # the array task, as squeue names it alone
    raw = slurm.job(attempt.job)["JobId"]  # listpids takes no array form
    pids = [line.split()[0] for line in slurm.run("scontrol", "listpids", raw).stdout.splitlines()[1:]]
    subprocess.run(["kill", "-KILL", *pids], check=False)
    slurm.wait_gone([array], timeout=60)
    assert attempts.read(rd).attempts[-1].open  # nothing was left to close it
    assert squeue.active_jobs([attempt.job]) == set() and squeue.listed_array_jobs([array]) == set()

    env = {**with_repo_on_path(REPO, os.environ), **slurm.env}
    status = _status_from_another_host(sweep_dir, env)
    assert status.returncode == 75, status.stdout + status.stderr
    assert re.search(r"running\s+0\n\s+pending\s+1\n", status.stdout)
    assert "1 run(s) that need work are in no queued array" in status.stdout

    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.01")  # the job inherits it: the rest trains quickly
    assert main(argv) == 0
    (_, (job2, again)) = _arrays(sweep_dir)
    assert again == [rid]
    slurm.wait_gone([job2], timeout=120)
    assert [a.outcome for a in attempts.read(rd).attempts] == ["interrupted", "completed"]
    assert _status_from_another_host(sweep_dir, env).returncode == 0


# ----------------------------------------------------------------------------- (e) over MaxArraySize


def _three_runs_one_at_a_time(tmp_path: Path, monkeypatch, **changes) -> Path:
    """A spec of 3 fake-trainer runs, one array task at a time (spec keys ``changes`` added)."""
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0.05")
    return derived_spec(
        tmp_path,
        grid={"optimizer.lr": [0.001, 0.002, 0.003]},
        overrides={"training.steps": 8, "parametrization.base_num_layers": 2},
        executor={"kind": "slurm", "max_parallel": 1, "max_retries": 0, "gpus_per_run": 0},
        train_cmd=FAKE_TRAIN_CMD,
        **changes,
    )


def test_sweep_over_max_array_size_runs_as_chained_arrays(slurm: Cluster, tmp_path, monkeypatch, capsys):
    """More runs than MaxArraySize (scontrol's answer made 2 here; SLURM's default is 1001): two
    arrays, the second held by --dependency=afterany on the first, every run trained once."""
    real = shutil.which("scontrol")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$1 $2" = "show config" ]; then {real} "$@" | sed "s/^MaxArraySize .*/MaxArraySize = 2/"; '
        f'else exec {real} "$@"; fi\n'
    )
    (fake / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    spec = _three_runs_one_at_a_time(tmp_path, monkeypatch)
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir)]) == 0
    assert "more than MaxArraySize (2): submitting 2 arrays" in capsys.readouterr().err
    (first, first_ids), (second, second_ids) = _arrays(sweep_dir)
    assert len(first_ids) == 2 and len(second_ids) == 1
    assert f"afterany:{first}" in slurm.job(second).get("Dependency", "")
    slurm.wait_gone([first, second], timeout=240)
    for rid in first_ids + second_ids:
        assert len(starts(sweep_dir / "runs" / rid)) == 1
    assert main(["status", str(sweep_dir)]) == 0
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir)]) == 0  # nothing left: exit 0, nothing submitted
    assert len(_arrays(sweep_dir)) == 2


def test_max_array_tasks_and_a_lost_sbatch_answer(slurm: Cluster, tmp_path, monkeypatch, capsys):
    """``slurm.max_array_tasks: 2`` (the cluster's MaxArraySize is 1001): 3 runs in two chained
    arrays. The second array's job.json is removed while it waits, as when sbatch's answer is
    lost (a controller that timed out): the rerun finds the array in the real squeue by its
    script (``%o``), writes its job id back and submits nothing; every run trains once."""
    spec = _three_runs_one_at_a_time(tmp_path, monkeypatch, slurm={"max_array_tasks": 2})
    sweep_dir = tmp_path / "sw"
    argv = ["sweep", str(spec), "--sweep-dir", str(sweep_dir)]
    assert main(argv) == 0
    assert "more than slurm.max_array_tasks (2): submitting 2 arrays" in capsys.readouterr().err
    (first, first_ids), (second, second_ids) = _arrays(sweep_dir)
    assert len(first_ids) == 2 and len(second_ids) == 1
    assert f"afterany:{first}" in slurm.job(second).get("Dependency", "")
    (record,) = [f / "job.json" for f in (sweep_dir / "slurm").iterdir() if f.name.endswith("2of2")]
    record.unlink()
    assert main(argv) == 4  # every run left is in a live array: the second found again
    assert f"sbatch's answer was lost; squeue lists it as array job {second}" in capsys.readouterr().err
    assert json.loads(record.read_text())["job_id"] == second
    assert len(list((sweep_dir / "slurm").iterdir())) == 2
    slurm.wait_gone([first, second], timeout=240)
    for rid in first_ids + second_ids:
        assert len(starts(sweep_dir / "runs" / rid)) == 1
    assert main(["status", str(sweep_dir)]) == 0


# ----------------------------------------------------------------------------- srun mode: a rank's exit 2


def test_an_srun_job_whose_rank_refuses_ends_with_2_and_is_not_requeued(slurm: Cluster, tmp_path, monkeypatch):
    """`launch job --slurm-mode srun` on 2 tasks: rank 0 refuses its resume (exit 2, exit.json),
    rank 1 waits in the rendezvous; srun's --kill-on-bad-exit sends it SIGTERM and it exits 75
    (as train_gpt.py does while it starts), so srun exits 75, its tasks' highest code. The job ends FAILED with the trainer's 2, once (before: srun's code,
    and where that was 75 the job requeued itself to be refused again, up to max_requeues)."""
    from tests.conftest import free_port

    monkeypatch.setenv("FAKE_REFUSE_RANK", "0")
    run_dir = tmp_path / "job"
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=8", "--launcher", "slurm"]
    argv += ["--slurm-mode", "srun", "--nproc-per-node", "2", "--master-port", str(free_port())]
    assert main([*argv, "--train-cmd", FAKE_TRAIN_CMD]) == 0
    job = json.loads((run_dir / "launch" / "slurm_job.json").read_text())["job_id"]
    slurm.wait_gone([job], timeout=120)
    log = next((run_dir / "launch").glob("slurm-*.out")).read_text()
    ends = [c for c in slurm.completions() if c["JobId"] == job]
    assert [(c["JobState"], c["ExitCode"]) for c in ends] == [("FAILED", "2:0")], log
    assert "task 0: Exited with exit code 2" in log and "requeueing" not in log
    assert "task 1: Exited with exit code 75" in log  # as train_gpt.py exits on a SIGTERM while it starts
    assert f"srun exited 75; {run_dir / 'exit.json'} says 2: exiting 2" in log
    assert json.loads((run_dir / "exit.json").read_text())["exit_code"] == 2

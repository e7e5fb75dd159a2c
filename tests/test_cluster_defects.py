"""Issue 28's cluster defects, each checked here without SLURM (stub sbatch/squeue/scontrol where
needed); tests/test_slurm_cluster.py checks the same against a real one-host cluster.

1. a sweep rerun while its array is queued must not submit the same runs again, and no
   results.csv may be written from run states older than the write;
2. every launcher that runs torchrun runs this interpreter's own (a batch job's PATH may lack it);
3. a sweep's array tasks request CPUs, and the trainer's threads come from the allocation;
4. a sweep with failed runs exits 1 from ``sweep --executor slurm`` and from ``status``;
5. logs: a sweep task's log holds its trainer's output, a preempted task (exit 75) requeues
   itself instead of ending FAILED, data_prep's stages have short distinct job names.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from launch import attempts
from launch.__main__ import main
from launch.sweep_dir import read_plan, write_plan
from launch.sweep_spec import expand, load_spec
from tests.launch_fixtures.helpers import (
    FAKE_TRAIN_CMD,
    REPO,
    TINY_BASE,
    derived_spec,
    dumping,
    dumps,
    env_with,
    read_csv,
    starts,
    stub_bin,
    use_fake_trainer,
)

GRID = {"model.num_layers": [2, 4], "optimizer.lr": [0.001]}


@pytest.fixture(autouse=True)
def fake_trainer(monkeypatch):
    use_fake_trainer(monkeypatch)


@pytest.fixture
def stub_slurm(tmp_path, monkeypatch) -> dict:
    """sbatch records its calls (job id 4242); squeue prints the file ``live`` (job ids, one per line)."""
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    live = tmp_path / "squeue_out"
    live.write_text("")
    stubs = {"sbatch": dumping("sbatch"), "squeue": f'cat "{live}"', "scontrol": dumping("scontrol")}
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    return {"dumps": dump_dir, "live": live}


def _spec(tmp_path: Path, **changes) -> Path:
    overrides = {"training.steps": 12, "parametrization.base_num_layers": 2}
    return derived_spec(tmp_path, **{"grid": GRID, "overrides": overrides, **changes})


# ----------------------------------------------------------------------------- 1. duplicate arrays


def test_sweep_rerun_skips_runs_of_a_live_array(tmp_path, capsys, stub_slurm):
    spec = _spec(tmp_path)
    sweep_dir = tmp_path / "sw"
    argv = ["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]
    assert main(argv) == 0
    assert len(dumps(stub_slurm["dumps"], "sbatch")) == 1
    stub_slurm["live"].write_text("4242\n")  # the array is still queued or running
    assert main(argv) == 4
    err = capsys.readouterr().err
    assert "2 runs that need work are in array job 4242" in err and "nothing submitted" in err
    assert len(dumps(stub_slurm["dumps"], "sbatch")) == 1
    assert len(list((sweep_dir / "slurm").iterdir())) == 1

    # A run added to the grid while the array runs is submitted alone.
    spec = _spec(tmp_path, grid={**GRID, "model.num_layers": [2, 4, 8]})
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]) == 0
    newest = sorted((sweep_dir / "slurm").iterdir())[-1]
    assert [rid.split("-")[0] for rid in (newest / "runs.txt").read_text().split()] == ["L8"]
    assert "skipped 2 runs of live array job 4242" in capsys.readouterr().err


def test_results_are_written_from_states_read_under_the_results_lock(tmp_path):
    """A task's results.csv must not show a run as unfinished that finished before the write:
    the states are read while holding SWEEP_DIR/results.lock, so a writer that saw the run
    finish writes after (or before) this one, never in between. (`launch run` without --only
    waits for the lock; an array task's `--only` never waits: tests/test_sweep_scale.py.)"""
    spec = _spec(tmp_path)
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    other, mine = (r.run_id for r in read_plan(sweep_dir).runs)
    other_dir = sweep_dir / "runs" / other
    other_dir.mkdir(parents=True)
    with open(other_dir / ".lock", "a") as run_lock, open(sweep_dir / "results.lock", "a") as results_lock:
        fcntl.flock(run_lock, fcntl.LOCK_EX)  # `other` is running (another array task)
        fcntl.flock(results_lock, fcntl.LOCK_EX)  # ... and is about to write results.csv
        task = subprocess.Popen(
            [sys.executable, "-m", "launch", "run", str(sweep_dir), "--no-progress"],  # `other` is locked: not started
            cwd=REPO, env=env_with(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        deadline = time.time() + 60
        while not [a for a in attempts.read(sweep_dir / "runs" / mine).attempts if a.outcome]:
            assert time.time() < deadline and task.poll() is None, task.stdout.read() if task.poll() else "timeout"
            time.sleep(0.05)
        time.sleep(1.0)  # where the task would read the states and write results.csv without the lock
        (other_dir / "summary.json").write_text(json.dumps({"status": "completed", "steps": 12}))
    assert task.wait(timeout=60) == 0, task.stdout.read()
    status = {r["run_id"]: r["status"] for r in read_csv(sweep_dir / "results.csv")}
    assert status == {other: "completed", mine: "completed"}


# ----------------------------------------------------------------------------- 2. torchrun


def test_torchrun_jobs_run_without_torchrun_on_path(tmp_path, monkeypatch):
    """A batch job's PATH may lack the environment's bin/: torchrun must be this interpreter's."""
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    run_dir = tmp_path / "run"
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=8"]
    assert main([*argv, "--launcher", "torchrun", "--nproc-per-node", "1", "--train-cmd", FAKE_TRAIN_CMD]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    script = (run_dir / "launch" / "torchrun.sh").read_text()
    assert f"exec {sys.executable} -m torch.distributed.run --standalone" in script


def test_every_torchrun_command_is_the_interpreters_module(capsys):
    from launch.executor_local import _argv
    from launch.launchers import Topology, srun_torchrun_command, torchrun_command
    from launch.resources import Slot

    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    assert torchrun_command(Topology(), ["t"])[:3] == torchrun
    assert srun_torchrun_command(Topology(2, 4), ["t"])[3:6] == torchrun
    plan = expand(
        str(TINY_BASE.parent / "sweeps" / "tiny_cpu.yaml"), load_spec(TINY_BASE.parent / "sweeps" / "tiny_cpu.yaml")
    )
    assert _argv(plan, Path("/tmp/sw"), plan.runs[0], Slot(0, ("0", "1")))[:3] == torchrun


# ----------------------------------------------------------------------------- 3. CPUs and threads


def test_array_tasks_request_cpus(tmp_path, stub_slurm):
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(_spec(tmp_path)), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]) == 0
    (script,) = (sweep_dir / "slurm").glob("*/array.sbatch")
    assert "#SBATCH --cpus-per-task=1\n" in script.read_text()  # CPU runs: one thread each, as SLURM's default
    spec = _spec(tmp_path, slurm={"cpus_per_task": 3})
    assert main(["sweep", str(spec), "--sweep-dir", str(tmp_path / "sw3"), "--executor", "slurm"]) == 0
    (script,) = (tmp_path / "sw3" / "slurm").glob("*/array.sbatch")
    assert "#SBATCH --cpus-per-task=3\n" in script.read_text()


def test_cpu_threads_follow_the_allocation_not_the_affinity(monkeypatch):
    from launch.resources import make_slots

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))  # task/none: every core visible
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "2")
    assert [s.env["OMP_NUM_THREADS"] for s in make_slots(1, 0, gpus=[])] == ["2"]
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    assert [s.env["OMP_NUM_THREADS"] for s in make_slots(2, 0, gpus=[])] == ["4", "4"]


def test_trainer_threads_come_from_the_allocation(monkeypatch):
    import torch

    from tests.conftest import tiny_config
    from training.session import select_device

    before = torch.get_num_threads()
    try:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
        torch.set_num_threads(3)
        select_device(tiny_config("parallel.device=cpu"))
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # set by launch's executor for its slot: wins
        select_device(tiny_config("parallel.device=cpu"))
        assert torch.get_num_threads() == 2
        select_device(tiny_config("parallel.device=cpu", "parallel.cpu_threads=3"))  # the config wins over both
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- 4. exit codes


def test_failed_runs_make_sweep_and_status_exit_1(tmp_path, capsys, monkeypatch, stub_slurm):
    spec = _spec(tmp_path, executor={"kind": "local", "max_parallel": 2, "max_retries": 0})
    sweep_dir = tmp_path / "sw"
    monkeypatch.setenv("FAKE_FAIL_MATCH", "/L4-")
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 1
    capsys.readouterr()
    assert main(["status", str(sweep_dir)]) == 1
    assert "failed     1" in capsys.readouterr().out
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]) == 1
    assert "1 run failed and is out of retries" in capsys.readouterr().err
    assert dumps(stub_slurm["dumps"], "sbatch") == []


def test_status_exit_codes_follow_the_run_states(tmp_path, capsys):
    sweep_dir = tmp_path / "sw"
    spec = _spec(tmp_path)
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    assert main(["status", str(sweep_dir)]) == 75  # nothing ran yet: pending, resumable
    for run in read_plan(sweep_dir).runs:
        rd = sweep_dir / "runs" / run.run_id
        rd.mkdir(parents=True)
        (rd / "summary.json").write_text(json.dumps({"status": "completed"}))
    assert main(["status", str(sweep_dir)]) == 0


# ----------------------------------------------------------------------------- 5. logs and requeue


def test_sweep_task_log_holds_the_trainer_output(tmp_path, capfd):
    spec = _spec(tmp_path)
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    rid = read_plan(sweep_dir).runs[0].run_id
    assert main(["run", str(sweep_dir), "--only", rid, "--no-progress", "--echo-output"]) == 0
    out = capfd.readouterr().out
    log = (sweep_dir / "runs" / rid / "launch" / "output.log").read_text()
    assert "fake_train: completed 12 steps" in log and log in out
    assert len(starts(sweep_dir / "runs" / rid)) == 1


def _requeue(
    tmp_path: Path,
    code: int,
    restarts: int,
    state: str,
    writes: str = "",
    exit_file: Path | None = None,
    exit_files: Sequence[Path] = (),
) -> subprocess.CompletedProcess:
    """A command exiting ``code`` (after writing ``writes`` to ``exit_file``) under
    jobscripts.requeue with ``--exit-file`` ``exit_files`` (default: ``exit_file``), in SLURM
    job 31 that squeue shows as ``state``."""
    from jobscripts.requeue import requeue_command

    stubs = {"scontrol": f'echo "$@" >> "{tmp_path}/scontrol.calls"', "squeue": f"echo {state}"}
    env = env_with(
        PATH=f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}", SLURM_JOB_ID="31", SLURM_RESTART_COUNT=str(restarts)
    )
    write = f"printf %s '{writes}' > '{exit_file}'; " if writes else ""
    files = list(exit_files) or ([exit_file] if exit_file is not None else [])
    argv = requeue_command(["bash", "-c", f"{write}exit {code}"], max_requeues=2, on_exit=75, exit_files=files)
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_a_preempted_task_requeues_itself_while_slurm_runs_it(tmp_path):
    calls = tmp_path / "scontrol.calls"
    done = _requeue(tmp_path, 75, restarts=0, state="RUNNING")
    assert done.returncode == 0, done.stderr
    assert calls.read_text() == "requeue 31\n"
    assert "requeueing job 31 (requeue 1 of at most 2)" in done.stderr
    calls.unlink()
    # Not when the job is being cancelled (scancel: COMPLETING), nor past the limit, nor for other codes.
    for code, restarts, state in [(75, 0, "COMPLETING"), (75, 2, "RUNNING"), (1, 0, "RUNNING"), (0, 0, "RUNNING")]:
        assert _requeue(tmp_path, code, restarts, state).returncode == code
    assert not calls.exists()


def test_a_torchrun_job_is_requeued_on_the_code_its_trainer_wrote(tmp_path):
    """torchrun exits 1 whatever its ranks exit with; the summary rank 0 wrote says 75."""
    summary = tmp_path / "summary.json"
    done = _requeue(tmp_path, 1, 0, "RUNNING", '{"status": "preempted", "exit_code": 75}', summary)
    assert done.returncode == 0 and (tmp_path / "scontrol.calls").read_text() == "requeue 31\n", done.stderr
    assert "exited 1; " in done.stderr and "says 75: exiting 75" in done.stderr
    done = _requeue(tmp_path, 1, 0, "RUNNING", '{"status": "diverged", "exit_code": 3}', summary)
    assert done.returncode == 3
    old = time.time() - 60
    os.utime(summary, (old, old))  # a summary left by an earlier run of the job says nothing of this one
    assert _requeue(tmp_path, 1, 0, "RUNNING", exit_file=summary).returncode == 1
    summary.write_text("{not json")
    assert _requeue(tmp_path, 1, 0, "RUNNING", exit_file=summary).returncode == 1


def test_an_srun_job_whose_rank_refused_exits_2_and_is_not_requeued(tmp_path):
    """srun exits with its tasks' highest code: rank 0 refuses its resume (exit 2, exit.json),
    --kill-on-bad-exit sends the other ranks SIGTERM and they exit 75, so srun exits 75 (or 137
    where they were killed: measured on the test cluster). Before, the job wrapper passed no exit
    file in srun mode and took the 75 as a preemption: requeued, refused again, up to
    max_requeues times. The job's exit files (exit.json, then summary.json) give the 2."""
    from rundir.contract import EXIT_FILES

    exit_json, summary = (tmp_path / name for name in EXIT_FILES)
    summary.write_text('{"status": "preempted", "exit_code": 75}')
    old = time.time() - 60
    os.utime(summary, (old, old))  # an earlier run of the job's
    refused = '{"exit_code": 2, "status": "invalid", "reason": "the config differs from the checkpoint"}'
    for srun_code in (75, 137):
        done = _requeue(tmp_path, srun_code, 0, "RUNNING", refused, exit_json, [exit_json, summary])
        assert done.returncode == 2, done.stderr
        assert f"exited {srun_code}; {exit_json} says 2: exiting 2" in done.stderr
    assert not (tmp_path / "scontrol.calls").exists()
    # rank 0 wrote this attempt's summary (a crash when its peer left): 1, not srun's 75
    os.utime(exit_json, (old, old))
    done = _requeue(tmp_path, 75, 0, "RUNNING", '{"status": "failed", "exit_code": 1}', summary, [exit_json, summary])
    assert done.returncode == 1 and not (tmp_path / "scontrol.calls").exists()


# srun with --kill-on-bad-exit, as the test cluster measured it: 2 tasks; when one exits non-zero
# the other is killed, and srun exits with the highest code (a rank's 4 reads as 137).
SRUN = """while [[ "$1" == --* ]]; do shift; done
pids=()
for r in 0 1; do SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r "$@" & pids+=($!); done
wait -n "${pids[@]}"; code=$?
if [ $code -ne 0 ]; then kill -9 "${pids[@]}" 2>/dev/null; fi
for p in "${pids[@]}"; do wait $p; c=$?; if [ $c -gt $code ]; then code=$c; fi; done
exit $code"""
# srun --kill-on-bad-exit=0: every rank runs to its own end (no rank killed by the first bad exit,
# a race with the others' own exit); each rank's code logged in $SRUN_CODES
SRUN_WAIT_ALL = """while [[ "$1" == --* ]]; do shift; done
pids=()
for r in 0 1; do SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r "$@" & pids+=($!); done
code=0
for p in "${pids[@]}"; do wait $p; c=$?; echo $c >> "$SRUN_CODES"; if [ $c -gt $code ]; then code=$c; fi; done
exit $code"""


def _srun_job(tmp_path: Path, run_dir: Path, srun: str, **env: str):
    """A `launch job --launcher slurm --slurm-mode srun` script of 2 ranks (real train_gpt.py, a tiny
    model) written where it goes, and the environment to run it in: ``srun`` the stub srun's body,
    squeue says RUNNING, scontrol requeue calls logged in scontrol.calls, each rank's code in codes."""
    from launch.job import JobRequest, prepare_job
    from tests.conftest import free_port

    small = ["model.hidden_size=32", "parametrization.base_hidden_size=32", "model.num_layers=2",
             "parametrization.base_num_layers=2", "scheduler.warmup_steps=1", "training.steps=2"]  # fmt: skip
    req = JobRequest(str(TINY_BASE), [f"run.dir={run_dir}", *small], launcher="slurm", slurm_mode="srun",
                     nproc_per_node=2, master_port=free_port(), cwd=str(REPO))  # fmt: skip
    job = prepare_job(req)
    job.script_path.parent.mkdir(parents=True)
    job.script_path.write_text(job.script)
    stubs = {"srun": srun, "squeue": "echo RUNNING", "scontrol": f'''case "$1" in show) echo 127.0.0.1;;
             *) echo "$@" >> "{tmp_path}/scontrol.calls";; esac'''}  # fmt: skip
    return job, env_with(PATH=f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}", SLURM_JOB_NODELIST="localhost",
                         OMP_NUM_THREADS="1", SRUN_CODES=str(tmp_path / "codes"), **env)  # fmt: skip


def test_an_srun_job_locked_out_of_its_run_exits_4_and_is_not_requeued(tmp_path, monkeypatch):
    """A `launch job --launcher slurm --slurm-mode srun` script (2 ranks, real train_gpt.py) runs
    while another job's trainer holds the run lock: rank 0 exits 4 and writes nothing into the
    owner's run directory; rank 1 learns it from rank 0 and exits 4 too (before that: srun
    killed it, waiting for rank 0 in the rendezvous, and exited 137). Before, no exit file said
    otherwise: the job ended 137 (FAILED, as a killed job). Now the
    script names this run of the job's own file ($DEPTHMUP_ATTEMPT_EXIT, by job id and requeue
    count) and jobscripts.requeue reads it first: the job exits 4, not requeued."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)  # the real train_gpt.py
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    job, env = _srun_job(tmp_path, run_dir, SRUN_WAIT_ALL, SLURM_JOB_ID="31", SLURM_RESTART_COUNT="2")
    with open(run_dir / ".lock", "a") as held:  # the owner: another job's trainer
        fcntl.flock(held, fcntl.LOCK_EX)
        done = subprocess.run(["bash", str(job.script_path)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 4, done.stderr[-3000:]
    assert f'--exit-file "$DEPTHMUP_ATTEMPT_EXIT" --exit-file {run_dir}/exit.json' in job.script
    own = run_dir / "launch" / "exit-31-2.json"
    assert (tmp_path / "codes").read_text().split() == ["4", "4"]  # rank 0 told rank 1: both left with 4
    record = json.loads(own.read_text())
    assert (record["exit_code"], record["status"]) == (4, "busy") and record["rank"] in (0, 1)
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "launch"]  # nothing in the owner's directory
    assert not (tmp_path / "scontrol.calls").exists()  # not requeued


# srun --kill-on-bad-exit=1 as SLURM does it: when a task exits non-zero the others get SIGTERM
# (SIGKILL after KillWait, here 20 s); srun exits with the highest code. Task $SRUN_BROKEN_RANK
# runs on a broken node: $SRUN_BROKEN_PATH first on its PYTHONPATH. Each task's code in $SRUN_CODES.
SRUN_KILL_ON_BAD_EXIT = """while [[ "$1" == --* ]]; do shift; done
pids=()
for r in 0 1; do
  pp=$PYTHONPATH; [ "$r" = "$SRUN_BROKEN_RANK" ] && pp=$SRUN_BROKEN_PATH:$PYTHONPATH
  SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r PYTHONPATH=$pp "$@" & pids+=($!)
done
wait -n "${pids[@]}"; code=$?
killer=
if [ $code -ne 0 ]; then
  kill -TERM "${pids[@]}" 2>/dev/null; (sleep 20; kill -9 "${pids[@]}") >/dev/null 2>&1 & killer=$!
fi
for p in "${pids[@]}"; do wait $p; c=$?; echo $c >> "$SRUN_CODES"; if [ $c -gt $code ]; then code=$c; fi; done
[ -n "$killer" ] && kill $killer 2>/dev/null
exit $code"""


def test_an_srun_job_whose_rank_crashes_at_start_exits_1_and_is_not_requeued(tmp_path, monkeypatch):
    """A `launch job --launcher slurm --slurm-mode srun` script (2 ranks, real train_gpt.py) where
    rank 1's node is broken: importing the trainer fails (megatron's ImportError). --kill-on-bad-exit sends
    rank 0 SIGTERM while it starts: it exits 75 (interrupted while starting), or 137 where it was
    killed; srun exits that. Before, nothing said otherwise: the job took the 75 for a preemption
    and requeued itself, up to max_requeues (20) times, to crash again each time (or ended 137,
    read as killed). Now the crashing rank records exit 1 in this run of the job's own file
    ($DEPTHMUP_ATTEMPT_EXIT), which jobscripts.requeue reads first: the job exits 1, not requeued."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)  # the real train_gpt.py
    broken = tmp_path / "broken_node" / "megatron"  # shadows megatron-core (the script's folder comes first)
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        'raise ImportError("libcudart.so.12: cannot open shared object file: No such file or directory")\n'
    )
    run_dir = tmp_path / "run"
    job, env = _srun_job(tmp_path, run_dir, SRUN_KILL_ON_BAD_EXIT, SLURM_JOB_ID="32", SLURM_RESTART_COUNT="0",
                         SRUN_BROKEN_RANK="1", SRUN_BROKEN_PATH=str(broken.parent))  # fmt: skip
    done = subprocess.run(["bash", str(job.script_path)], env=env, capture_output=True, text=True, timeout=300)
    codes = (tmp_path / "codes").read_text().split()
    assert codes[1] == "1" and codes[0] in ("75", "137"), (codes, done.stderr[-3000:])
    assert done.returncode == 1, done.stderr[-3000:]
    record = json.loads((run_dir / "launch" / "exit-32-0.json").read_text())
    assert (record["exit_code"], record["status"], record["rank"]) == (1, "failed", 1)
    assert "ImportError: libcudart.so.12" in record["reason"]
    assert not (tmp_path / "scontrol.calls").exists()  # not requeued


@pytest.mark.parametrize("signal_first", [None, "SIGTERM"])
def test_a_rank_crashing_while_its_session_is_built_records_exit_1_unless_it_was_stopped(
    tmp_path, monkeypatch, signal_first
):
    """The same for a crash inside the Trainer's start-up (building the session) on rank 1, which
    writes no summary: this attempt's own file says 1. A rank that got a stop signal first writes
    nothing there (its crash may be the stop's doing: a preemption must still requeue)."""
    from runconfig import load_config
    from runconfig.schema import RunConfig
    from rundir.contract import ATTEMPT_EXIT_ENV
    from training import runner

    def broken_node(*_args, **_kwargs):
        raise RuntimeError("CUDA error: no CUDA-capable device is detected")

    own = tmp_path / "exit-7-0.json"
    monkeypatch.setenv(ATTEMPT_EXIT_ENV, str(own))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(runner, "build_session", broken_node)
    # in-process: the run's closing shutdown() would end megatron's state that this test worker's
    # other tests hold (its session-wide process group and parallel groups)
    monkeypatch.setattr("training.distributed.shutdown", lambda: None)
    cfg = load_config(RunConfig, str(TINY_BASE), [f"run.dir={tmp_path / 'run'}"])
    assert runner.Trainer(cfg, received=lambda: signal_first).run() == 1
    if signal_first:
        assert not own.exists()
    else:
        record = json.loads(own.read_text())
        assert (record["exit_code"], record["status"], record["rank"]) == (1, "failed", 1)
        assert (
            record["reason"] == "crashed while starting: RuntimeError: CUDA error: no CUDA-capable device is detected"
        )
    assert not (tmp_path / "run" / "summary.json").exists()  # rank 1 writes none


def test_data_prep_stages_have_short_distinct_job_names(tmp_path):
    from data_prep.api import load_data_prep_config
    from data_prep.slurm import plan_submission, stage_script
    from data_prep.stages import STAGES
    from tests.data_prep_fixtures import english_doc, write_jsonl

    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "a.jsonl", [english_doc(i) for i in range(5)])
    cfg = load_data_prep_config(None, [f"input.paths=[{raw}]", f"output.dir={tmp_path / 'out'}"])
    folder = plan_submission(cfg)[0]
    names = []
    for stage in STAGES:
        text = stage_script(cfg, folder, stage, [0], 1)
        names.append(next(x for x in text.splitlines() if x.startswith("#SBATCH --job-name="))[20:])
    assert all(len(n) <= 8 for n in names) and len(set(names)) == len(STAGES), names  # squeue shows 8 characters

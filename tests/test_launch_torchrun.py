"""A real 2-process torchrun job on CPU (gloo), through ``python -m launch job --launcher torchrun``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch.__main__ import main
from launch.launchers import torchrun_honours_grace
from tests.launch_fixtures.helpers import FAKE_TRAIN_CMD, TINY_BASE, starts

TORCHRUN_HONOURS_GRACE = torchrun_honours_grace()


def torch_minor() -> tuple[int, int]:
    """torch's (major, minor), e.g. (2, 11) for 2.11.0+cu130."""
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def test_two_process_torchrun_job_all_reduces_on_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0")
    run_dir = tmp_path / "torchrun run"
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={json.dumps(str(run_dir))}", "training.steps=8"]
    argv += ["--launcher", "torchrun", "--nproc-per-node", "2", "--train-cmd", FAKE_TRAIN_CMD]
    assert main(argv) == 0
    assert json.loads((run_dir / "dist.json").read_text()) == {"world_size": 2, "all_reduce_sum": 3.0}  # 1 + 2
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert len(starts(run_dir)) == 1  # rank 0 trained; rank 1 only joined the collective
    script = (run_dir / "launch" / "torchrun.sh").read_text()
    assert "\nexport TORCH_ELASTIC_SHUTDOWN_TIMEOUT=120\n" in script  # --signal-grace's default, not torchrun's 30 s
    assert (
        f"exec {sys.executable} -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 --no-python "
        in script
    )


def test_a_run_on_two_gpus_keeps_its_trainers_exit_code_through_torchrun(tmp_path, monkeypatch, capsys):
    """torchrun exits 1 whatever its ranks exit with: the executor reads rank 0's summary, so a
    diverged run (3) is final, not a failure retried, and a preempted one (75) costs no retry."""
    from launch import attempts
    from launch.sweep_dir import read_plan
    from tests.launch_fixtures.helpers import derived_spec, use_fake_trainer

    use_fake_trainer(monkeypatch, step_seconds=0.0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # two "GPUs": the stand-in never touches CUDA
    grid = {"model.num_layers": [2], "optimizer.lr": [0.001, 0.1]}  # 0.1 > FAKE_DIVERGE_LR: diverges
    executor = {"kind": "local", "max_parallel": 1, "gpus_per_run": 2, "max_retries": 2}
    overrides = {"training.steps": 6, "parametrization.base_num_layers": 2}
    spec = derived_spec(tmp_path, grid=grid, overrides=overrides, executor=executor)
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    assert "diverged   1" in capsys.readouterr().out
    for run in read_plan(sweep_dir).runs:
        log = attempts.read(sweep_dir / "runs" / run.run_id)
        want = ("diverged", 3) if run.run_id.startswith("L2-lr0.1-") else ("completed", 0)
        assert [(a.outcome, a.exit_code) for a in log.attempts] == [want], run.run_id
        assert json.loads((sweep_dir / "runs" / run.run_id / "dist.json").read_text())["world_size"] == 2
        (start,) = starts(sweep_dir / "runs" / run.run_id)
        assert start["shutdown_timeout"] == "120"  # the spec's slurm.signal_grace_s (default)


@pytest.mark.slow
@pytest.mark.skipif(not TORCHRUN_HONOURS_GRACE, reason="this torch's torchrun ignores TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
def test_a_stopped_run_on_two_gpus_gets_the_whole_grace_to_save(tmp_path, monkeypatch):
    """torchrun kills its ranks 30 s after forwarding a SIGTERM unless told otherwise: a save of
    35 s must still end as a preemption (exit 75, no retry used), not as a killed run."""
    from launch import attempts
    from launch.sweep_dir import read_plan, write_plan
    from launch.sweep_spec import expand, load_spec
    from tests.launch_fixtures.helpers import REPO, derived_spec, env_with, events, use_fake_trainer

    use_fake_trainer(monkeypatch)
    grid = {"model.num_layers": [2], "optimizer.lr": [0.001]}
    executor = {"kind": "local", "max_parallel": 1, "gpus_per_run": 2}
    spec = derived_spec(tmp_path, grid=grid, overrides={"training.steps": 5000}, executor=executor,
                        slurm={"signal_grace_s": 90})  # fmt: skip
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    (run,) = read_plan(sweep_dir).runs
    rd = sweep_dir / "runs" / run.run_id
    proc = subprocess.Popen(
        [sys.executable, "-m", "launch", "run", str(sweep_dir), "--no-progress"], cwd=REPO,
        env=env_with(CUDA_VISIBLE_DEVICES="0,1", FAKE_STEP_SECONDS="0.02", FAKE_SAVE_SECONDS="35"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.time() + 120
    while not (rd / "checkpoints" / "latest").exists() and time.time() < deadline:
        time.sleep(0.1)
    signalled = time.time()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 75
    assert time.time() - signalled > 35
    assert [e.get("exit_code") for e in events(rd) if e["event"] == "end"] == [75]
    log = attempts.read(rd)
    assert [(a.outcome, a.exit_code) for a in log.attempts] == [("preempted", 75)] and log.failures == 0


def test_an_older_torchrun_that_kills_at_30_s_is_warned_of(tmp_path, monkeypatch, capsys):
    from launch import launchers

    # torch >= 2.12 reads TORCH_ELASTIC_SHUTDOWN_TIMEOUT (the pinned 2.13 does; the GPU node's 2.11 does not)
    assert launchers.torchrun_honours_grace() == (torch_minor() >= (2, 12))
    monkeypatch.setattr(launchers, "torchrun_honours_grace", lambda: False)
    assert launchers.grace_note(30) is None  # torchrun's own 30 s is enough
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={tmp_path / 'r'}", "training.micro_batch_size=1", "--launcher", "slurm", "--nodes", "2",
            "--gpus-per-node", "4", "--signal-grace", "300", "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "kills the ranks 30 s after it forwards a SIGTERM, not the 300 s of signal_grace_s" in err
    assert "--slurm-mode srun has no such limit" in err
    assert main([*argv, "--slurm-mode", "srun"]) == 0
    assert "signal_grace_s" not in capsys.readouterr().err


def test_a_torchrun_job_exits_with_its_trainers_code(tmp_path, monkeypatch):
    """torchrun exits 1 whatever its ranks exit with; ``launch job`` exits with the code rank 0
    wrote in this attempt's summary.json (docs/launch.md: the trainer's code), so a script
    around it tells a divergence (3) or a preemption (75) from a crash."""
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0")
    run_dir = tmp_path / "run"
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=8", "optimizer.lr=0.1"]
    argv += ["--launcher", "torchrun", "--nproc-per-node", "2", "--train-cmd", FAKE_TRAIN_CMD]
    assert main(argv) == 3  # FAKE_DIVERGE_LR (0.01) < 0.1: diverged at step 3
    assert json.loads((run_dir / "summary.json").read_text())["exit_code"] == 3


# ----------------------------------------------------------------------------- the real trainer's exit 2
SMALL = {"model.hidden_size": 32, "parametrization.base_hidden_size": 32, "model.num_layers": 2,
         "parametrization.base_num_layers": 2, "scheduler.warmup_steps": 1, "logging.interval": 1}  # fmt: skip


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.2)


def _two_rank_sweep(tmp_path: Path, monkeypatch, steps: int):
    """A sweep of one run of the real train_gpt.py on 2 ranks (torchrun, CPU, gloo), planned:
    its spec, sweep directory, run and run directory."""
    from launch.sweep_dir import read_plan, write_plan
    from launch.sweep_spec import expand, load_spec
    from tests.launch_fixtures.helpers import derived_spec

    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)  # the real train_gpt.py
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # two "GPUs" for the slot: the ranks run on CPU (gloo)
    executor = {"kind": "local", "max_parallel": 1, "gpus_per_run": 2, "max_retries": 1}
    spec = derived_spec(tmp_path, grid={"optimizer.lr": [0.001]}, executor=executor,
                        overrides={**SMALL, "training.steps": steps, "parallel.device": "cpu"})  # fmt: skip
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    (run,) = read_plan(sweep_dir).runs
    return spec, sweep_dir, run, sweep_dir / "runs" / run.run_id


def test_a_refused_resume_under_torchrun_is_invalid_and_not_retried(tmp_path, monkeypatch, capsys):
    """A sweep run on 2 ranks (torchrun, CPU) is stopped mid-run (SIGTERM: checkpoint, preempted);
    then the toolkit's presets change (the checkpoint's resolved table differs: a
    branch_multiplier of 0.5 where the code now resolves 1.0). Every rank refuses the resume
    (exit 2) and torchrun exits 1. Before, the executor recorded that 1 as a crash and started
    the run again until max_retries (2 attempts here), each refused alike; now exit.json carries
    the trainer's 2: one attempt, `invalid`, not retried, and `status` names the reason."""
    from launch import attempts
    from tests.launch_fixtures.helpers import REPO, env_with

    spec, sweep_dir, run, rd = _two_rank_sweep(tmp_path, monkeypatch, steps=100000)
    proc = subprocess.Popen([sys.executable, "-m", "launch", "run", str(sweep_dir), "--no-progress"], cwd=REPO,
                            env=env_with(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    _wait_for(lambda: (rd / "metrics.jsonl").is_file() and (rd / "metrics.jsonl").stat().st_size, 300, "a step")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 75
    assert [(a.outcome, a.exit_code) for a in attempts.read(rd).attempts] == [("preempted", 75)]
    (ckpt,) = (rd / "checkpoints").glob("step_*")
    common = json.loads((ckpt / "common.json").read_text())
    assert common["parametrization"]["branch_multiplier"] == 1.0
    common["parametrization"]["branch_multiplier"] = 0.5  # what an older toolkit resolved
    (ckpt / "common.json").write_text(json.dumps(common))

    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 1
    out = capsys.readouterr()
    log = attempts.read(rd)
    assert [(a.outcome, a.exit_code) for a in log.attempts] == [("preempted", 75), ("invalid", 2)], out.err
    assert log.attempts[1].reason.startswith(f"{ckpt}: the resolved parametrization differs from the checkpoint's")
    assert "branch_multiplier: 0.5 -> 1.0" in log.attempts[1].reason
    exit_record = json.loads((rd / "exit.json").read_text())
    assert (exit_record["exit_code"], exit_record["status"]) == (2, "invalid")
    assert f"{run.run_id}: invalid (exit 2)" in out.err and "retrying" not in out.err
    assert f"{run.run_id}: last attempt: invalid (exit 2): {ckpt}: the resolved parametrization" in out.out
    assert "failed     1" in out.out


def test_a_torchrun_job_refused_for_a_changed_key_exits_2(tmp_path, monkeypatch, capfd):
    """A finished run started again on 2 ranks with another optimizer.weight_decay: both ranks
    refuse (exit 2, the key named) and torchrun exits 1; `launch job` exits with the trainer's
    2 from this attempt's own exit file (before: 1, a crash to a script around it). The finished
    run's directory is not written: no exit.json (before: both ranks wrote one there, without
    the run lock, where a live owner's launcher would read it as its own attempt's)."""
    from tests.conftest import free_port

    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run_dir = tmp_path / "run"
    small = [f"{k}={v}" for k, v in SMALL.items()]
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=2", *small]
    assert main([*argv, "--launcher", "local"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    rendezvous = ["--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    capfd.readouterr()
    assert (
        main([*argv, "optimizer.weight_decay=0.1", "--launcher", "torchrun", "--nproc-per-node", "2", *rendezvous]) == 2
    )
    assert "optimizer.weight_decay: 0.0 -> 0.1" in capfd.readouterr().err
    assert not (run_dir / "exit.json").exists() and list((run_dir / "launch").glob("exit-*.json")) == []
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"  # the run's record, kept


def test_a_refusal_of_a_finished_run_leaves_its_live_owners_files_alone(tmp_path, monkeypatch, capfd):
    """A finished run is being retrained (--force) by a live owner on another host, and a second
    submission with another optimizer.weight_decay starts: the trainer refuses (exit 2) before
    it takes the run lock. Before, it wrote RUN_DIR/exit.json anyway: the owner's launcher
    reads that file (first, before summary.json) as its own attempt's ending, so the owner's
    attempt read as `invalid`. Now the refusal goes to this attempt's own exit file: `launch
    job` exits 2 and the owner's directory is as it was."""
    from rundir import lock

    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run_dir = tmp_path / "run"
    small = [f"{k}={v}" for k, v in SMALL.items()]
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=2", *small, "--launcher", "local"]
    assert main(argv) == 0
    monkeypatch.setattr(lock, "PROC_LOCKS", tmp_path / "no such file")  # the owner runs on another host
    owner = _owner(run_dir)
    before = _files(run_dir)
    capfd.readouterr()
    try:
        assert main([*argv, "optimizer.weight_decay=0.1"]) == 2
    finally:
        owner.communicate("\n", timeout=60)
    assert "optimizer.weight_decay: 0.0 -> 0.1" in capfd.readouterr().err
    assert _files(run_dir) == before  # no exit.json in the owner's directory
    assert list((run_dir / "launch").glob("exit-*.json")) == []


def test_a_torchrun_refusal_before_the_run_dir_is_known_keeps_its_2(tmp_path, monkeypatch):
    """A config that no longer loads when the job starts (edited after submission): both ranks
    refuse before they know the run directory, torchrun exits 1. A `launch job` SLURM script
    (--slurm-mode torchrun) runs it as here, under jobscripts.requeue with this run of the job's
    own exit file first. Before, no file said 2 and the job ended 1, a crash; now each rank
    writes its 2 to the attempt's own file and the job exits 2 (bad input)."""
    from jobscripts.requeue import requeue_command
    from launch.launchers import Topology, torchrun_command
    from tests.conftest import REPO, env

    config = tmp_path / "edited.yaml"
    config.write_text(TINY_BASE.read_text() + "\nno_such_section:\n  key: 1\n")
    own = tmp_path / "exit-31-0.json"
    train = [sys.executable, str(REPO / "train_gpt.py"), "--config", str(config), f"run.dir={tmp_path / 'run'}"]
    exit_files = [str(own), str(tmp_path / "run" / "exit.json")]
    command = requeue_command(torchrun_command(Topology(1, 2), train), 0, 75, exit_files)  # --standalone
    done = subprocess.run(command, cwd=REPO, env={**env(), "DEPTHMUP_ATTEMPT_EXIT": str(own)},
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"exited 1; {own} says 2: exiting 2" in done.stderr
    record = json.loads(own.read_text())
    assert (record["exit_code"], record["status"]) == (2, "invalid") and "no_such_section" in record["reason"]


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan waits for its new parent to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ranks_of_a_sigkilled_torchrun_checkpoint_and_exit_75(tmp_path):
    """torchrun sets no parent-death signal: SIGKILLed (the OOM killer, a job step torn down),
    it left both ranks training on, orphaned, holding the run lock (before: still training
    when this test gives up). train_gpt.py asks for SIGTERM when its parent dies, so both
    ranks save and exit 75: a preempted summary at the checkpoint's step, the lock released."""
    from rundir.lock import run_locked
    from tests.conftest import REPO, env, free_port

    run_dir = tmp_path / "run"
    small = [f"{k}={v}" for k, v in SMALL.items()]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
           "train_gpt.py", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=100000", *small,
           "logging.progress_bar=false"]  # fmt: skip
    agent = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = run_dir / "metrics.jsonl"
    _wait_for(lambda: metrics.is_file() and metrics.stat().st_size, 300, "a step")
    ranks = [int(p) for p in (Path(f"/proc/{agent.pid}/task/{agent.pid}/children").read_text().split())]
    assert len(ranks) == 2
    agent.kill()
    agent.wait()
    _wait_for(lambda: not any(map(_running, ranks)), 120, "the orphaned ranks to exit")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["exit_code"]) == ("preempted", 75)
    assert (
        json.loads((run_dir / "checkpoints" / "step_{:08d}".format(summary["steps"]) / "common.json").read_text())[
            "step"
        ]
        == summary["steps"]
    )
    assert summary["steps"] >= 1 and not run_locked(run_dir)


# ----------------------------------------------------------------------------- a run another live process owns
# Holds RUN_DIR's lock as a trainer of another sweep task does, with that task's attempt open in
# attempts.json (so `status` says running); on a line from stdin it ends as preempted.
OWNER = """
import fcntl, sys
from pathlib import Path
from launch import attempts
rd = Path(sys.argv[1])
lock = open(rd / ".lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)
attempt = attempts.begin(rd, __import__("os").getpid())
print("owned", flush=True)
sys.stdin.readline()
attempts.finish(rd, attempt, 75, "preempted", held_lock=True)
"""


def _owner(rd: Path):
    from tests.launch_fixtures.helpers import REPO, env_with

    rd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(rd)], cwd=REPO, env=env_with(), text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
    assert proc.stdout.readline() == "owned\n"
    return proc


def _files(rd: Path) -> dict[str, float]:
    """Every file of the run directory but launch's own folder, with its modification time."""
    return {str(p.relative_to(rd)): p.stat().st_mtime for p in rd.rglob("*") if p.is_file() and "launch" not in p.parts}


def test_a_two_rank_run_locked_by_a_live_owner_is_busy_not_failed_and_uses_no_retry(tmp_path, monkeypatch, capsys):
    """Two sweep tasks race for one run (a requeued array task and a resubmitted one): the owner
    holds the run lock on another host (its lock not in this host's /proc/locks, so the executor
    starts the run), and this task's 2-rank torchrun (real train_gpt.py, CPU) finds it locked:
    rank 0 exits 4, torchrun exits 1. Before, that attempt was `failed` (exit 1) and retried:
    with max_retries 1, two failed attempts and the run given up, so once the owner was
    preempted a rerun skipped it (exit 1, nothing started). Now rank 0 writes its 4 into this
    attempt's own file (never into the owner's run directory): one attempt, `busy`, no retry,
    the run `running` as its owner is; after the owner's preemption a rerun trains it."""
    from launch import attempts
    from launch.run_state import run_state
    from rundir import lock

    monkeypatch.setattr(lock, "PROC_LOCKS", tmp_path / "no such file")  # the owner runs on another host
    _spec, sweep_dir, run, rd = _two_rank_sweep(tmp_path, monkeypatch, steps=2)
    owner = _owner(rd)
    before = _files(rd)
    try:
        assert main(["run", str(sweep_dir), "--no-progress"]) == 4  # running elsewhere
        err = capsys.readouterr().err
        log = attempts.read(rd)
        assert [(a.outcome, a.exit_code) for a in log.attempts] == [(None, None), ("busy", 4)], err
        assert log.failures == 0 and f"{run.run_id}: busy (exit 4)" in err and "retrying" not in err
        assert f"{rd} is in use by another process" in log.attempts[1].reason
        assert run_state(rd, 1).status == "running"  # the owner's, untouched
        assert _files(rd) == before  # no exit.json, summary.json or log of this attempt in the owner's directory
        assert list((rd / "launch").glob("exit-*.json")) == []  # this attempt's own file, read and removed
    finally:
        owner.communicate("\n", timeout=60)
    assert [a.outcome for a in attempts.read(rd).attempts] == ["preempted", "busy"]
    assert main(["run", str(sweep_dir), "--no-progress"]) == 0  # the owner stopped: this task trains the run
    assert json.loads((rd / "summary.json").read_text())["status"] == "completed"
    assert [a.outcome for a in attempts.read(rd).attempts] == ["preempted", "busy", "completed"]


def test_a_torchrun_job_locked_out_of_its_run_exits_4(tmp_path, monkeypatch, capfd):
    """`launch job --launcher torchrun` (2 ranks, real train_gpt.py) while another process on
    another host holds the run lock (so `launch job` cannot see it and starts the ranks):
    torchrun exits 1; the job exits 4 (before: 1, a crash to a script around it), and nothing
    is written into the owner's run directory, its launch script included (before: the owner's
    launch/torchrun.sh was replaced by this attempt's). Rank 0 tells rank 1 before either
    leaves, so both exit 4 at once; before, rank 1 waited for rank 0 in the rendezvous until
    torchrun killed it, 30 s after a SIGTERM it could not act on there."""
    from rundir import lock
    from tests.conftest import free_port

    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(lock, "PROC_LOCKS", tmp_path / "no such file")  # the owner runs on another host
    run_dir = tmp_path / "run"
    owner = _owner(run_dir)
    (run_dir / "launch" / "torchrun.sh").write_text("# the owner's script\n")
    before = _files(run_dir)
    launch_before = {p.name: p.stat().st_mtime for p in (run_dir / "launch").iterdir()}
    small = [f"{k}={v}" for k, v in SMALL.items()]
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=2", *small]
    argv += ["--launcher", "torchrun", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    try:
        assert main([*argv, "--master-port", str(free_port())]) == 4
    finally:
        owner.communicate("\n", timeout=60)
    err = capfd.readouterr().err
    assert "forcefully exiting via 9" not in err and err.count("exitcode  : 4") == 2, err[-3000:]  # both ranks: 4
    assert _files(run_dir) == before and (run_dir / "launch" / "torchrun.sh").read_text() == "# the owner's script\n"
    after = {p.name: p.stat().st_mtime for p in (run_dir / "launch").iterdir()}
    assert after.keys() == launch_before.keys()  # no torchrun-*.sh or exit-*.json of this attempt left
    assert after["torchrun.sh"] == launch_before["torchrun.sh"]


def test_a_job_locked_out_on_this_host_starts_nothing(tmp_path, monkeypatch, capsys):
    """`launch job` while a live process on this host holds the run lock (seen in /proc/locks):
    exit 4 at once, nothing started and nothing written into the owner's directory (before: the
    owner's launch/local.sh was replaced before the trainer found the run locked)."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    run_dir = tmp_path / "run"
    owner = _owner(run_dir)
    (run_dir / "launch" / "local.sh").write_text("# the owner's script\n")
    launch_before = {p.name: p.stat().st_mtime for p in (run_dir / "launch").iterdir()}
    try:
        assert main(["job", "--config", str(TINY_BASE), f"run.dir={run_dir}"]) == 4
    finally:
        owner.communicate("\n", timeout=60)
    assert f"[launch] {run_dir} is in use by another process on this host" in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime for p in (run_dir / "launch").iterdir() if p.name != "attempts.json"} == {
        k: v for k, v in launch_before.items() if k != "attempts.json"
    }  # attempts.json: the owner's own attempt, closed as it ends
    assert (run_dir / "launch" / "local.sh").read_text() == "# the owner's script\n"

"""The fork server's GPU path (launch.warm_start), on CPU.

No GPU here, so what is tested is the guard and the plumbing: the server never initialises
CUDA while importing; a GPU run is forked only after a forked child has shown it can use CUDA
(here it cannot, so the run is exec'd and the reason printed); with ``DEPTHMUP_GPU_FORK=on``
a run on a GPU slot (its config on the CPU device) is forked with its slot's environment and
trains exactly as the exec'd one. That a forked child initialises CUDA on an H100 is for the
GPU session (docs/gpu_runs.md, "Start-up").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch import executor_local, warm_start
from launch.__main__ import main
from launch.sweep_dir import read_plan
from tests.launch_fixtures.helpers import derived_spec, needs_train_gpt

pytestmark = needs_train_gpt


@pytest.fixture
def fresh_server(monkeypatch):
    """A fork server started by this test (the module's one is shared by the whole process)."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)
    warm_start._SERVER.close()
    yield warm_start._SERVER
    warm_start._SERVER.close()


def _sweep(tmp_path: Path, name: str) -> Path:
    overrides = {"training.steps": 6, "logging.interval": 1, "parallel.device": "cpu", "eval.at": [1.0]}
    executor = {"kind": "local", "max_parallel": 1, "max_retries": 0, "gpus_per_run": 1, "start": "fork"}
    spec = derived_spec(tmp_path, f"{name}.yaml", grid={"run.seed": [3]}, overrides=overrides, executor=executor)
    sweep_dir = tmp_path / name
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    return sweep_dir


def _losses(sweep_dir: Path) -> list:
    (run,) = read_plan(sweep_dir).runs
    rows = (sweep_dir / "runs" / run.run_id / "metrics.jsonl").read_text().splitlines()
    return [(r["kind"], r["step"], r.get("loss", r.get("val_loss"))) for r in map(json.loads, rows)]


@pytest.mark.slow  # ~1.5 min on 2 shared cores: a fork server and three trainer starts
def test_gpu_runs_fork_only_where_a_forked_child_can_use_cuda(tmp_path, monkeypatch, capsys, fresh_server):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # one (pretend) GPU: runs go to a GPU slot
    execs: list[list[str]] = []
    real_start_child = executor_local.start_child

    def start_child(argv, **kw):
        execs.append(argv)
        return real_start_child(argv, **kw)

    monkeypatch.setattr(executor_local, "start_child", start_child)

    status = fresh_server.status()  # the server's imports are done: CUDA must be untouched
    assert status["cuda_initialized"] is False and status[warm_start.NVML_CHECK_ENV] == "1"

    refused = _sweep(tmp_path, "auto")  # no CUDA here: the probe child fails, the run is exec'd
    assert len(execs) == 1
    err = capsys.readouterr().err
    assert "GPU runs start as new processes: a forked child could not use CUDA (" in err
    checks = fresh_server.status()["gpu_checks"]  # the probe ran once, and its reason is kept
    assert list(checks) == ["auto"] and "could not use CUDA" in checks["auto"]

    monkeypatch.setenv(warm_start.GPU_FORK_ENV, "on")  # trust the node: forked, with the slot's environment
    forked = _sweep(tmp_path, "on")
    assert len(execs) == 1  # nothing more was exec'd
    (run,) = read_plan(forked).runs
    log = (forked / "runs" / run.run_id / "launch" / "output.log").read_text()
    assert "slot 0:" in log and "INFO run " in log
    assert _losses(forked) == _losses(refused)  # forked or exec'd, the same training to the bit
    assert fresh_server.status()["cuda_initialized"] is False

    monkeypatch.setenv(warm_start.GPU_FORK_ENV, "off")
    _sweep(tmp_path, "off")
    assert len(execs) == 2
    assert f"GPU runs start as new processes: {warm_start.GPU_FORK_ENV}=off" in capsys.readouterr().err


def test_gpu_fork_check_refuses_a_bad_setting():
    assert "is not one of auto, on, off" in warm_start.gpu_fork_check({warm_start.GPU_FORK_ENV: "yes"})
    assert warm_start.gpu_fork_check({warm_start.GPU_FORK_ENV: "off"}) == f"{warm_start.GPU_FORK_ENV}=off"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the refusal where CUDA is absent")
def test_gpu_fork_probe_child_reports_why_cuda_is_unusable():
    """The probe forks a child that initialises CUDA; without CUDA it fails and says why."""
    refusal = warm_start.gpu_fork_check({})
    assert refusal is not None and refusal.startswith("a forked child could not use CUDA (")
    assert "CUDA" in refusal.split("(", 1)[1]  # torch's own reason, e.g. "Torch not compiled with CUDA enabled"


@pytest.mark.slow  # ~1 min on 2 shared cores
def test_sigterm_to_the_process_group_preempts_forked_runs(tmp_path):
    """`timeout` and batch systems signal the whole process group: the fork server must outlive
    that SIGTERM to report its trainers' exit 75 (dead, it left them recorded as killed: failed)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from launch import attempts
    from tests.launch_fixtures.helpers import REPO, env_with

    overrides = {"training.steps": 400, "logging.interval": 1, "parallel.device": "cpu", "checkpoint.interval": 1000}
    executor = {"kind": "local", "max_parallel": 1, "max_retries": 0, "gpus_per_run": 0, "start": "fork"}
    spec = derived_spec(tmp_path, grid={"run.seed": [0]}, overrides=overrides, executor=executor)
    sweep_dir = tmp_path / "sw"
    env = env_with()
    env.pop("DEPTHMUP_TRAIN_CMD", None)
    proc = subprocess.Popen([sys.executable, "-m", "launch", "sweep", str(spec), "--sweep-dir", str(sweep_dir),
                             "--no-progress"], cwd=REPO, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.time() + 180
    metrics = None
    while metrics is None or not metrics.exists() or "train" not in metrics.read_text():
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read() if proc.poll() is not None else ""
        time.sleep(0.2)
        runs = list((sweep_dir / "runs").glob("*/metrics.jsonl")) if (sweep_dir / "runs").exists() else []
        metrics = runs[0] if runs else None
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 75, out[-3000:]
    log = attempts.read(metrics.parent)
    assert [a.outcome for a in log.attempts] == ["preempted"] and log.failures == 0, out[-3000:]
    assert json.loads((metrics.parent / "summary.json").read_text())["exit_code"] == 75

"""The key launch tests against the real train_gpt.py (skipped until it exists).

Same scenarios as the stand-in tests (test_launch_sweep_run.py, test_launch_torchrun.py) with
assertions that do not depend on the stand-in's event log: attempts.json, summary.json,
metrics.jsonl and results.csv. The heavy ones are marked slow (``pytest -m slow``).
"""

from __future__ import annotations

import fcntl
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from launch import attempts
from launch.__main__ import main
from launch.sweep_dir import read_plan, write_plan
from launch.sweep_spec import expand, load_spec
from tests.launch_fixtures.helpers import REPO, TINY_BASE, TRAIN_GPT, derived_spec, env_with, needs_train_gpt, read_csv

pytestmark = needs_train_gpt


@pytest.fixture(autouse=True)
def real_trainer(monkeypatch):
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD", raising=False)


def _run_dirs(sweep_dir: Path) -> list[Path]:
    """The run directories under runs/ (not the shared .index_cache)."""
    return sorted(p for p in (sweep_dir / "runs").iterdir() if not p.name.startswith("."))


def _check_sweep(sweep_dir: Path, n_runs: int) -> None:
    plan = read_plan(sweep_dir)
    assert len(plan.runs) == n_runs
    for run in plan.runs:
        rd = sweep_dir / "runs" / run.run_id
        summary = json.loads((rd / "summary.json").read_text())
        assert summary["status"] in ("completed", "diverged")
        config = yaml.safe_load((rd / "config.yaml").read_text())
        assert config["run"]["dir"] == str(rd)
        assert config["model"]["num_layers"] == run.point.get("model.num_layers", config["model"]["num_layers"])
        train_steps = [r["step"] for r in map(json.loads, (rd / "metrics.jsonl").read_text().splitlines())
                       if r["kind"] == "train"]  # fmt: skip
        assert len(train_steps) == len(set(train_steps))  # no step logged twice, resumed or not
    rows = read_csv(sweep_dir / "results.csv")
    fractions = {len(r.resolved["eval.at"]) for r in plan.runs}
    assert len(rows) == n_runs * fractions.pop()
    assert len({(r["run_id"], r["fraction"]) for r in rows}) == len(rows)


def test_real_single_run_sweep_and_status(tmp_path):
    spec = derived_spec(tmp_path, grid={"model.num_layers": [2], "optimizer.lr": [0.001]},
                        overrides={"training.steps": 10, "parametrization.base_num_layers": 2})  # fmt: skip
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    _check_sweep(sweep_dir, 1)
    (rd,) = _run_dirs(sweep_dir)
    assert len(attempts.read(rd).attempts) == 1
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    assert len(attempts.read(rd).attempts) == 1  # a finished run is not started again


def test_runs_of_a_sweep_share_one_index_cache(tmp_path):
    # Each run wrote megatron's dataset index cache into its own RUN_DIR/.index_cache (38.8 MB for
    # the tiny config, whatever the steps: 388 GB for 10000 runs). Now launch points data.cache_dir
    # of every run at SWEEP_DIR/runs/.index_cache (not part of the run IDs), and runs started side
    # by side take turns building it (flock on its build.lock): one set of files for the sweep.
    spec = derived_spec(tmp_path, grid={"optimizer.lr": [0.001, 0.002]},
                        overrides={"training.steps": 6, "parametrization.base_num_layers": 2, "checkpoint.final": False})  # fmt: skip
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress", "--max-parallel", "2"]) == 0
    _check_sweep(sweep_dir, 2)
    shared = sweep_dir / "runs" / ".index_cache"
    runs = _run_dirs(sweep_dir)
    assert len(runs) == 2 and not any((rd / ".index_cache").exists() for rd in runs)
    for rd in runs:
        assert yaml.safe_load((rd / "config.yaml").read_text())["data"]["cache_dir"] == str(shared)
    files = sorted(p.name for p in shared.rglob("*") if p.is_file() and p.name != "build.lock")
    one_run = tmp_path / "alone"
    single = [sys.executable, str(TRAIN_GPT), "--config", str(TINY_BASE), f"run.dir={one_run}", "training.steps=6",
              "parametrization.base_num_layers=2", "checkpoint.final=false", "logging.progress_bar=false"]  # fmt: skip
    assert subprocess.run(single, cwd=REPO, capture_output=True).returncode == 0
    alone = sorted(p.name for p in (one_run / ".index_cache").rglob("*") if p.is_file() and p.name != "build.lock")
    assert files == alone and len(files) == 12  # one run's files (3 splits x 4), not two runs' worth
    # a spec that names its own cache keeps it
    own = derived_spec(tmp_path, name="own.yaml", overrides={"data.cache_dir": str(tmp_path / "mine")})
    plan = expand(own, load_spec(own))
    overrides = plan.train_invocation(tmp_path / "sw2", plan.runs[0]).overrides
    assert not plan.shared_index_cache
    assert [o for o in overrides if o.startswith("data.cache_dir=")] == [f'data.cache_dir="{tmp_path / "mine"}"']


def test_real_trainer_rejects_bad_key_and_busy_run_dir(tmp_path):
    bad = subprocess.run([sys.executable, str(TRAIN_GPT), "--config", str(TINY_BASE), "model.num_layerz=3"],
                         cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert bad.returncode == 2 and "num_layerz" in bad.stderr
    run_dir = tmp_path / "busy"
    run_dir.mkdir()
    with open(run_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        busy = subprocess.run([sys.executable, str(TRAIN_GPT), "--config", str(TINY_BASE), f"run.dir={run_dir}"],
                              cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert busy.returncode == 4
    assert not (run_dir / "summary.json").exists()


@pytest.mark.slow
def test_real_tiny_sweep_completes(tmp_path):
    sweep_dir = tmp_path / "sw"
    spec = REPO / "configs" / "sweeps" / "tiny_cpu.yaml"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    _check_sweep(sweep_dir, 16)
    for rd in _run_dirs(sweep_dir):
        assert len(attempts.read(rd).attempts) == 1


@pytest.mark.slow
def test_real_sigkilled_sweep_resumes(tmp_path):
    spec = derived_spec(tmp_path, overrides={"training.steps": 40, "parametrization.base_num_layers": 2,
                                             "checkpoint.interval": 5})  # fmt: skip
    sweep_dir = tmp_path / "sw"
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    proc = subprocess.Popen([sys.executable, "-m", "launch", "run", str(sweep_dir), "--no-progress"], cwd=REPO,
                            env=env_with(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.time() + 600

    def mid_run() -> bool:  # a run with a periodic checkpoint and no summary yet
        return any(not (p.parent.parent / "summary.json").exists() for p in sweep_dir.glob("runs/*/checkpoints/latest"))

    while not (list(sweep_dir.glob("runs/*/summary.json")) and mid_run()):
        assert time.time() < deadline, "no run finished in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(30)  # the orphaned trainers checkpoint and exit 75 (parent-death SIGTERM)
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
    _check_sweep(sweep_dir, 16)
    for rd in _run_dirs(sweep_dir):
        log = attempts.read(rd)
        assert log.failures == 0 and 1 <= len(log.attempts) <= 2
        if len(log.attempts) == 2:
            assert log.attempts[0].outcome in ("interrupted", "preempted")


@pytest.mark.slow
def test_real_two_process_torchrun_job(tmp_path):
    run_dir = tmp_path / "tr"
    argv = ["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", "training.steps=10"]
    assert main([*argv, "--launcher", "torchrun", "--nproc-per-node", "2"]) == 0
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


def _losses(sweep_dir: Path) -> dict[str, tuple]:
    out = {}
    for rd in _run_dirs(sweep_dir):
        rows = [json.loads(line) for line in (rd / "metrics.jsonl").read_text().splitlines()]
        summary = json.loads((rd / "summary.json").read_text())
        out[rd.name] = (summary["final_val_loss"], [r["loss"] for r in rows if r["kind"] == "train"])
    return out


def test_fork_start_trains_bit_identical_to_exec(tmp_path):
    """executor.start=fork (launch.warm_start) runs the same trainer: same losses to the bit."""
    common = {
        "grid": {"model.num_layers": [2, 3], "optimizer.lr": [0.002]},
        "overrides": {"training.steps": 6, "parametrization.base_num_layers": 2, "logging.interval": 1},
    }
    found = {}
    for start in ("exec", "fork"):
        executor = {"kind": "local", "max_parallel": 2, "max_retries": 0, "gpus_per_run": 0, "start": start}
        spec = derived_spec(tmp_path, name=f"{start}.yaml", executor=executor, **common)
        sweep_dir = tmp_path / start
        assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"]) == 0
        _check_sweep(sweep_dir, 2)
        found[start] = _losses(sweep_dir)
        for rd in _run_dirs(sweep_dir):  # the child's output reaches the run's output.log
            assert "INFO run " in (rd / "launch" / "output.log").read_text()
    assert found["fork"] == found["exec"]
    assert all(len(train) == 6 for _, train in found["fork"].values())


def test_forked_trainer_checkpoints_on_sigterm_and_resumes(tmp_path):
    """A forked child answers SIGTERM like an exec'd one: checkpoint, exit 75, resume on rerun.

    This process has run torch operations first (its OpenMP pool exists): forking it directly
    would hang the child at its first parallel region, which is why children come from the
    fork server.
    """
    import torch

    from launch.warm_start import fork_trainer

    assert float(torch.ones(256, 256).matmul(torch.ones(256, 256)).sum()) == 256.0**3  # start the pool
    run_dir = tmp_path / "run"
    argv = [sys.executable, str(TRAIN_GPT), "--config", str(TINY_BASE), f"run.dir={run_dir}",
            "training.steps=400", "checkpoint.interval=1000", "logging.progress_bar=false"]  # fmt: skip
    child = fork_trainer(argv, env=env_with(), log=tmp_path / "out.log")
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists() or "train" not in (run_dir / "metrics.jsonl").read_text():
        assert child.poll() is None and time.time() < deadline, (tmp_path / "out.log").read_text()
        time.sleep(0.1)
    child.terminate()
    assert child.wait(timeout=120) == 75
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 75 and 0 < summary["steps"] < 400
    assert (run_dir / "checkpoints" / "latest").exists()


def test_fork_server_dies_with_executor_and_its_trainers_checkpoint(tmp_path):
    """SIGKILL the process that owns the fork server: the server gets SIGTERM, its trainer
    gets SIGTERM in turn, checkpoints and exits 75 (nothing keeps training unowned)."""
    run_dir = tmp_path / "run"
    argv = [sys.executable, str(TRAIN_GPT), "--config", str(TINY_BASE), f"run.dir={run_dir}",
            "training.steps=400", "checkpoint.interval=1000", "logging.progress_bar=false"]  # fmt: skip
    owner_code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from launch.warm_start import fork_trainer\n"
        f"child = fork_trainer({argv!r}, env=dict(__import__('os').environ), log=Path({str(tmp_path / 'out.log')!r}))\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", owner_code], cwd=REPO, env=env_with(), stdout=subprocess.PIPE, text=True
    )
    trainer_pid = int(owner.stdout.readline())
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists() or "train" not in (run_dir / "metrics.jsonl").read_text():
        assert time.time() < deadline, (tmp_path / "out.log").read_text()
        time.sleep(0.1)
    owner.kill()
    owner.wait()
    deadline = time.time() + 120
    while not (run_dir / "summary.json").exists():
        assert time.time() < deadline, (tmp_path / "out.log").read_text()
        time.sleep(0.2)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 75 and 0 < summary["steps"] < 400
    while Path(f"/proc/{trainer_pid}").exists() and time.time() < deadline:  # exits after writing
        time.sleep(0.1)
    assert not Path(f"/proc/{trainer_pid}").exists() or "Z" in Path(f"/proc/{trainer_pid}/stat").read_text().split()[2]

"""Several runs per GPU (``executor.runs_per_gpu``): placement, the memory check, out-of-memory
retries, CUDA MPS detection, the SLURM array's packed tasks, and packing on CPU.

GPUs are simulated: ``$CUDA_VISIBLE_DEVICES`` names them, a stand-in ``nvidia-smi`` on PATH
prints the memory table a test writes, a stand-in ``nvidia-cuda-mps-control`` keeps its daemon
state in a file, and the stand-in trainer (tests/launch_fixtures/fake_train.py) logs each
start and end with its environment, so the tests count overlaps exactly.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from launch import attempts, gpu_share
from launch.__main__ import main
from launch.resources import cpu_count, make_slots
from launch.sweep_dir import read_plan
from tests.launch_fixtures.helpers import (
    FAKE_TRAIN_CMD,
    REPO,
    derived_spec,
    dumping,
    env_with,
    events,
    stub_bin,
    use_fake_trainer,
)

UUIDS = {"5": "GPU-5f0e0000-aaaa", "7": "GPU-7f0e0000-bbbb"}

# Query n >= $FAKE_LATER_FROM answers from $FAKE_GPU_TABLE_LATER (and records when it first did).
FAKE_NVIDIA_SMI = r"""
if [ "$1" = "-L" ]; then
  awk -F', ' '{print "GPU " $1 ": Fake H100 (UUID: " $2 ")"}' "$FAKE_GPU_TABLE"; exit 0
fi
n=$(( $(cat "$FAKE_GPU_TABLE.count" 2>/dev/null || echo 0) + 1 )); echo $n > "$FAKE_GPU_TABLE.count"
if [ -n "${FAKE_GPU_TABLE_LATER:-}" ] && [ "$n" -ge "${FAKE_LATER_FROM:-1000000}" ]; then
  [ -f "$FAKE_GPU_TABLE.freed" ] || date +%s.%N > "$FAKE_GPU_TABLE.freed"
  cat "$FAKE_GPU_TABLE_LATER"; exit 0
fi
cat "$FAKE_GPU_TABLE"
"""

# The daemon's state is a file in its pipe directory; every call is logged to $FAKE_MPS_CALLS.
FAKE_MPS_CONTROL = r"""
dir="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-d" ]; then
  echo "-d $dir" >> "$FAKE_MPS_CALLS"
  if [ -n "$FAKE_MPS_REFUSE" ]; then echo "$FAKE_MPS_REFUSE" >&2; exit 1; fi
  echo up > "$dir/fake_daemon"; exit 0
fi
read -r cmd
echo "$cmd $dir" >> "$FAKE_MPS_CALLS"
[ -f "$dir/fake_daemon" ] || { echo "Cannot find MPS control daemon process" >&2; exit 1; }
case "$cmd" in
  get_server_list) [ -z "$FAKE_MPS_NO_SERVER" ] && echo 4242; exit 0;;
  quit) rm -f "$dir/fake_daemon"; exit 0;;
esac
"""


@pytest.fixture(autouse=True)
def fake_trainer(monkeypatch):
    use_fake_trainer(monkeypatch, 0.05, unset=("FAKE_OOM_MATCH", "FAKE_OOM_TIMES", "CUDA_MPS_PIPE_DIRECTORY"))


def _gpus(tmp_path: Path, monkeypatch, free: dict[str, int], total: int = 81559, mps: bool = False) -> Path:
    """Simulated GPUs ``free`` (id -> free MiB) behind stand-in tools; returns the table file."""
    table = tmp_path / "gpu_table.csv"
    _write_table(table, free, total)
    stubs = {"nvidia-smi": FAKE_NVIDIA_SMI}
    if mps:
        stubs["nvidia-cuda-mps-control"] = FAKE_MPS_CONTROL
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_GPU_TABLE", str(table))
    monkeypatch.setenv("FAKE_MPS_CALLS", str(tmp_path / "mps_calls.txt"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(free))
    return table


def _write_table(table: Path, free: dict[str, int], total: int = 81559) -> None:
    table.write_text("".join(f"{g}, {UUIDS[g]}, {f}, {total}\n" for g, f in free.items()))


def _spec(tmp_path: Path, runs: int, steps: int = 6, **executor) -> Path:
    grid = {"optimizer.lr": [round(0.001 + 0.0001 * i, 6) for i in range(runs)]}
    overrides = {"training.steps": steps, "parametrization.base_num_layers": 2, "checkpoint.keep": 1}
    settings = {"kind": "local", "max_parallel": 1, "max_retries": 2, "gpus_per_run": 1, **executor}
    return derived_spec(tmp_path, grid=grid, overrides=overrides, executor=settings)


def _sweep(spec: Path, sweep_dir: Path) -> int:
    return main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress"])


def _spans(sweep_dir: Path) -> list[dict]:
    """One record per attempt: when the executor started its process and reaped it (``t0``,
    ``t1``: what packing is about, whatever the trainer's own start-up took), and from the
    stand-in's start event its GPUs, MPS pipe and OMP threads, and when it was past start-up."""
    out = []
    for run in read_plan(sweep_dir).runs:
        rd = sweep_dir / "runs" / run.run_id
        begun = [e for e in events(rd) if e["event"] == "start"]
        for a, e in zip(attempts.read(rd).attempts, begun):
            t0, t1 = (dt.datetime.fromisoformat(t).timestamp() for t in (a.started, a.ended))
            out.append({**e, "run": run.run_id, "t0": t0, "t1": t1, "trained": e["time"]})
    return out


def _most_at_once(spans: list[dict]) -> int:
    """The largest number of attempts running at the same moment."""
    edges = sorted([(s["t0"], 1) for s in spans] + [(s["t1"], -1) for s in spans], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, delta in edges:
        now += delta
        most = max(most, now)
    return most


def _per_gpu(spans: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for s in spans:
        out[s["gpus"]].append(s)
    return out


# ----------------------------------------------------------------------------- placement


def test_slots_hold_runs_per_gpu_runs():
    slots = make_slots(4, 1, gpus=["5", "7"], runs_per_gpu=3)
    assert [(s.gpus, s.capacity, s.env) for s in slots] == [
        (("5",), 3, {"CUDA_VISIBLE_DEVICES": "5"}),
        (("7",), 3, {"CUDA_VISIBLE_DEVICES": "7"}),
    ]
    cpu = make_slots(2, 0, gpus=[], cpus=16, runs_per_gpu=4)  # 8 runs at a time on 16 cores: 2 threads each
    assert [(s.capacity, s.env["OMP_NUM_THREADS"]) for s in cpu] == [(4, "2"), (4, "2")]
    assert make_slots(1, 0, gpus=[], cpus=2, runs_per_gpu=4)[0].env["OMP_NUM_THREADS"] == "1"


def test_packed_runs_never_exceed_runs_per_gpu(tmp_path, monkeypatch, capsys):
    """8 runs, 2 GPUs, 2 runs per GPU, max_parallel 4 (only 2 slots exist): never a third run on a GPU."""
    _gpus(tmp_path, monkeypatch, {"5": 80000, "7": 80000})
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 8, max_parallel=4, runs_per_gpu=2), sweep_dir) == 0
    spans = _spans(sweep_dir)
    assert len(spans) == 8
    per_gpu = _per_gpu(spans)
    assert set(per_gpu) == {"5", "7"}
    assert max(_most_at_once(v) for v in per_gpu.values()) == 2  # packed ...
    assert all(_most_at_once(v) <= 2 for v in per_gpu.values())  # ... but never more than 2 per GPU
    assert _most_at_once(spans) <= 4
    assert "CUDA MPS not used: nvidia-cuda-mps-control is not on PATH" in capsys.readouterr().err


def test_cpu_slots_pack_runs_and_split_their_threads(tmp_path):
    """CPU packing: one slot of 2 runs; each run gets half the slot's threads."""
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 4, gpus_per_run=0, runs_per_gpu=2, max_parallel=1), sweep_dir) == 0
    spans = _spans(sweep_dir)
    assert len(spans) == 4 and _most_at_once(spans) == 2
    assert {s["omp"] for s in spans} == {str(max(1, cpu_count() // 2))}


# ----------------------------------------------------------------------------- memory


def test_runs_wait_for_gpu_memory_and_start_once_it_is_free(tmp_path, monkeypatch, capsys):
    """1000 MiB free, runs need 4000: nothing starts until nvidia-smi says 79000 (from its 3rd
    query: the 1st is the MPS check's, the 2nd the first start's, which must wait)."""
    table = _gpus(tmp_path, monkeypatch, {"5": 1000})
    later = tmp_path / "later.csv"
    _write_table(later, {"5": 79000})
    monkeypatch.setenv("FAKE_GPU_TABLE_LATER", str(later))
    monkeypatch.setenv("FAKE_LATER_FROM", "3")
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 3, runs_per_gpu=2, gpu_memory_mib=4000), sweep_dir) == 0
    freed = float(Path(f"{table}.freed").read_text())
    spans = _spans(sweep_dir)
    assert len(spans) == 3 and min(s["t0"] for s in spans) >= freed
    err = capsys.readouterr().err
    assert "waiting for GPU memory: slot 0 (GPU 5) has 1000 MiB free and none of this sweep's runs" in err
    assert "a run needs 4000 MiB (executor.gpu_memory_mib)" in err


def test_a_run_needing_more_memory_than_the_gpu_has_stops_the_sweep(tmp_path, monkeypatch, capsys):
    _gpus(tmp_path, monkeypatch, {"5": 80000})
    assert _sweep(_spec(tmp_path, 1, runs_per_gpu=2, gpu_memory_mib=90000), tmp_path / "sw") == 2
    assert "executor.gpu_memory_mib=90000 is more than GPU 5 has (81559 MiB)" in capsys.readouterr().err


def _estimate(sweep_dir: Path):
    """The memory estimate of the sweep's first run, from its config as the executor loads it."""
    from launch.run_configs import load_run_config

    plan = read_plan(sweep_dir)
    call = plan.train_invocation(sweep_dir, plan.runs[0])
    return gpu_share.run_memory(load_run_config(call.config, call.overrides), 1)


@pytest.mark.parametrize("runs_per_gpu", [1, 2])
def test_a_run_whose_estimate_exceeds_the_gpu_is_refused_before_it_starts(tmp_path, monkeypatch, capsys, runs_per_gpu):
    """The tiny config needs its CUDA context's 600 MiB and a few more: on a GPU of 500 MiB
    no run starts, packed or not, and the message names the keys to change."""
    _gpus(tmp_path, monkeypatch, {"5": 500}, total=500)
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 2, runs_per_gpu=runs_per_gpu), sweep_dir) == 2
    err = capsys.readouterr().err
    estimate = _estimate(sweep_dir)
    assert f"training.micro_batch_size=4 (model.recompute=none): estimated {estimate.peak_mib + 600} MiB per GPU" in err
    assert "is more than GPU 5 has (500 MiB); lower training.micro_batch_size or set model.recompute" in err
    assert _spans(sweep_dir) == []


def test_packed_runs_wait_for_their_estimated_memory(tmp_path, monkeypatch, capsys):
    """executor.gpu_memory_mib unset: a packed run waits for its estimate x 1.1 + the CUDA
    context (here about 0.7 GiB), not for 90% of the GPU / runs_per_gpu (36.7 GiB): 20000 MiB
    free lets both runs start at once (with 90% / 2 they would wait until nvidia-smi's 6th
    answer says 79000 MiB free)."""
    table = _gpus(tmp_path, monkeypatch, {"5": 20000})
    later = tmp_path / "later.csv"
    _write_table(later, {"5": 79000})
    monkeypatch.setenv("FAKE_GPU_TABLE_LATER", str(later))
    monkeypatch.setenv("FAKE_LATER_FROM", "6")
    monkeypatch.setenv("FAKE_STARTUP_SECONDS", "0.5")
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 2, runs_per_gpu=2), sweep_dir) == 0
    estimate = _estimate(sweep_dir)
    assert estimate.need_mib == int(1.1 * estimate.peak_mib) + 1 + 600 < 20000 // 2
    spans = _spans(sweep_dir)
    freed = Path(f"{table}.freed")
    assert len(spans) == 2 and (not freed.exists() or max(s["t0"] for s in spans) < float(freed.read_text()))
    assert _most_at_once(spans) == 2  # the second started while the first was still starting
    assert "waiting for GPU memory" not in capsys.readouterr().err


def test_runs_still_starting_count_as_holding_their_memory(tmp_path, monkeypatch):
    """9000 MiB free, 4000 per run, 3 seats: the second run starts at once (9000 - 4000 >= 4000);
    the third waits until one of the first two is past its start-up (it has logged a step)."""
    _gpus(tmp_path, monkeypatch, {"5": 9000})
    monkeypatch.setenv("FAKE_STARTUP_SECONDS", "1.0")  # no metrics row for a second after the process starts
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 3, runs_per_gpu=3, gpu_memory_mib=4000), sweep_dir) == 0
    launched = {}  # run -> when the executor started its process
    for run in read_plan(sweep_dir).runs:
        (attempt,) = attempts.read(sweep_dir / "runs" / run.run_id).attempts
        launched[run.run_id] = dt.datetime.fromisoformat(attempt.started).timestamp()
    first, second, third = sorted(launched, key=launched.get)
    trained = {s["run"]: s["trained"] for s in _spans(sweep_dir)}  # past start-up: about to log a step
    assert launched[second] < trained[first]  # started while the first was still starting
    assert launched[third] >= min(trained[first], trained[second])  # waited for one to settle


def test_out_of_memory_beside_packed_runs_is_retried_later_and_not_counted(tmp_path, monkeypatch, capsys):
    """A run that runs out of GPU memory while another shares its GPU is started again (no
    failure counted, nothing lost) and its GPU takes one run at a time from then on."""
    _gpus(tmp_path, monkeypatch, {"5": 80000})
    monkeypatch.setenv("FAKE_OOM_MATCH", "lr0.001-")  # the first run of the grid, on its first start
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 4, steps=8, runs_per_gpu=2, max_retries=0), sweep_dir) == 0
    plan = read_plan(sweep_dir)
    (oom_run,) = [r.run_id for r in plan.runs if "lr0.001-" in r.run_id]
    log = attempts.read(sweep_dir / "runs" / oom_run)
    assert [a.outcome for a in log.attempts] == ["no_memory", "completed"] and log.failures == 0
    summaries = [json.loads((sweep_dir / "runs" / r.run_id / "summary.json").read_text()) for r in plan.runs]
    assert [s["status"] for s in summaries] == ["completed"] * 4
    spans = sorted(_spans(sweep_dir), key=lambda s: s["t0"])
    oom_end = next(s["t1"] for s in spans if s["run"] == oom_run)
    assert _most_at_once([s for s in spans if s["t0"] > oom_end]) == 1  # one at a time afterwards
    err = capsys.readouterr().err
    assert f"{oom_run}: no_memory (exit 1), retrying" in err
    assert "ran out of GPU memory beside 1 other run(s) on slot 0 (GPU 5): at most 1 at a time there" in err


def test_out_of_memory_alone_on_its_gpu_is_a_failure(tmp_path, monkeypatch, capsys):
    """Nothing else was on the GPU: the run itself does not fit, and that counts."""
    _gpus(tmp_path, monkeypatch, {"5": 80000})
    monkeypatch.setenv("FAKE_OOM_MATCH", "lr0.001-")
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 1, runs_per_gpu=2, max_retries=1), sweep_dir) == 0
    (run,) = read_plan(sweep_dir).runs
    log = attempts.read(sweep_dir / "runs" / run.run_id)
    assert [a.outcome for a in log.attempts] == ["failed", "completed"] and log.failures == 1
    assert "failed attempt 1 of 2, retrying" in capsys.readouterr().err


def test_memory_probe_reads_the_slot_gpus_from_nvidia_smi(tmp_path, monkeypatch):
    _gpus(tmp_path, monkeypatch, {"5": 1234, "7": 999})
    probe = gpu_share.MemoryProbe()
    assert probe.slot_memory(("7",)) == (999, 81559) and probe.method == "nvidia-smi"
    assert probe.slot_memory(("5", "7")) == (999, 81559)  # the fullest GPU of the slot
    assert probe.slot_memory((UUIDS["5"][:12],)) == (1234, 81559)  # a UUID prefix names a GPU too


def test_memory_probe_without_nvidia_smi_or_cuda_says_so(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(gpu_share, "torch_memory", lambda gpu: None)  # what a machine without CUDA answers
    probe = gpu_share.MemoryProbe()
    assert probe.slot_memory(("0",)) is None and probe.method == "none"
    assert "GPU memory is not checked before starts" in probe.note


# ----------------------------------------------------------------------------- MPS


def _mps_calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "mps_calls.txt"
    return [line.split()[0] for line in path.read_text().splitlines()] if path.exists() else []


def test_mps_not_on_path_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    mps = gpu_share.start_mps(tmp_path / "sw", {})
    assert not mps.active and mps.env == {} and "nvidia-cuda-mps-control is not on PATH" in mps.message


def test_mps_daemon_that_cannot_start_is_reported(tmp_path, monkeypatch):
    _gpus(tmp_path, monkeypatch, {"5": 80000}, mps=True)
    monkeypatch.setenv("FAKE_MPS_REFUSE", "An instance of this daemon is already running")
    mps = gpu_share.start_mps(tmp_path / "sw", {})
    assert not mps.active and mps.env == {}
    assert "`nvidia-cuda-mps-control -d` failed (An instance of this daemon is already running)" in mps.message


def test_mps_daemon_whose_client_gets_no_server_is_stopped(tmp_path, monkeypatch):
    _gpus(tmp_path, monkeypatch, {"5": 80000}, mps=True)
    monkeypatch.setattr(gpu_share, "probe_client", lambda env: None)
    monkeypatch.setenv("FAKE_MPS_NO_SERVER", "1")
    mps = gpu_share.start_mps(tmp_path / "sw", {})
    assert not mps.active and "the daemon started no MPS server for a CUDA client" in mps.message
    assert _mps_calls(tmp_path) == ["get_server_list", "-d", "get_server_list", "quit"]


def test_mps_client_that_cannot_connect_is_reported(tmp_path, monkeypatch):
    """On this machine (no CUDA driver) the real probe fails: the daemon is stopped again."""
    _gpus(tmp_path, monkeypatch, {"5": 80000}, mps=True)
    mps = gpu_share.start_mps(tmp_path / "sw", {**os.environ})
    assert not mps.active and "CUDA MPS not used: daemon in" in mps.message
    assert _mps_calls(tmp_path)[-1] == "quit"


def test_mps_started_and_stopped_with_directories_under_the_sweep(tmp_path, monkeypatch):
    _gpus(tmp_path, monkeypatch, {"5": 80000}, mps=True)
    seen: list[dict] = []
    monkeypatch.setattr(gpu_share, "probe_client", lambda env: seen.append(dict(env)))
    sweep_dir = tmp_path / "sw"
    mps = gpu_share.start_mps(sweep_dir, {"CUDA_VISIBLE_DEVICES": UUIDS["5"]})
    pipe, logs = gpu_share.mps_dirs(sweep_dir)
    assert mps.active and mps.env == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    assert logs == sweep_dir.resolve() / "mps" / "log" and (pipe / "fake_daemon").exists()
    assert seen[0]["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe) and seen[0]["CUDA_VISIBLE_DEVICES"] == UUIDS["5"]
    mps.stop()
    assert not (pipe / "fake_daemon").exists()
    assert _mps_calls(tmp_path) == ["get_server_list", "-d", "get_server_list", "quit"]


def test_mps_pipe_directory_too_long_for_sockets_moves_to_tmp(tmp_path):
    deep = tmp_path / ("d" * 90)
    pipe, logs = gpu_share.mps_dirs(deep)
    assert len(str(pipe)) <= gpu_share.MAX_PIPE_DIR_CHARS and pipe.name.startswith("depthmup-mps-")
    assert logs == deep.resolve() / "mps" / "log"


def test_packed_gpu_runs_use_mps_and_name_their_gpu_by_uuid(tmp_path, monkeypatch, capsys):
    _gpus(tmp_path, monkeypatch, {"5": 80000, "7": 80000}, mps=True)
    monkeypatch.setattr(gpu_share, "probe_client", lambda env: None)
    sweep_dir = tmp_path / "sw"
    assert _sweep(_spec(tmp_path, 4, max_parallel=2, runs_per_gpu=2), sweep_dir) == 0
    pipe, _ = gpu_share.mps_dirs(sweep_dir)
    spans = _spans(sweep_dir)
    assert {s["gpus"] for s in spans} == {UUIDS["5"], UUIDS["7"]} and {s["mps"] for s in spans} == {str(pipe)}
    assert "CUDA MPS on: started a control daemon" in capsys.readouterr().err
    assert _mps_calls(tmp_path)[-1] == "quit"  # stopped when the executor ended


def test_mps_off_or_unpacked_starts_no_daemon(tmp_path, monkeypatch):
    _gpus(tmp_path, monkeypatch, {"5": 80000}, mps=True)
    monkeypatch.setattr(gpu_share, "probe_client", lambda env: None)
    assert _sweep(_spec(tmp_path, 2, runs_per_gpu=2, mps="off"), tmp_path / "a") == 0
    assert _sweep(_spec(tmp_path, 2, runs_per_gpu=1), tmp_path / "b") == 0
    assert _mps_calls(tmp_path) == []
    assert {s["gpus"] for s in _spans(tmp_path / "a")} == {"5"}


def test_bad_executor_packing_values_name_the_key(tmp_path, capsys):
    for bad, key in (({"runs_per_gpu": 0}, "runs_per_gpu"), ({"mps": "always"}, "mps")):
        assert _sweep(_spec(tmp_path, 1, **bad), tmp_path / "sw") == 2
        assert f"executor.{key}" in capsys.readouterr().err


# ----------------------------------------------------------------------------- SLURM


def test_slurm_array_tasks_take_runs_per_gpu_runs_each(tmp_path, monkeypatch, capsys):
    """7 runs, 3 per task: an array of 3 tasks; task 2 runs the last run alone, task 0 packs 3."""
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, {'sbatch': dumping('sbatch')})}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    spec = _spec(tmp_path, 7, gpus_per_run=0, runs_per_gpu=3, max_parallel=2)
    sweep_dir = tmp_path / "sw"
    assert main(["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm"]) == 0
    assert "7 runs, 3 runs per task, at most 2 tasks at a time" in capsys.readouterr().out
    (folder,) = (sweep_dir / "slurm").iterdir()
    script = folder / "array.sbatch"
    assert "#SBATCH --array=0-2%2\n" in script.read_text()
    ids = (folder / "runs.txt").read_text().split()
    for task in (2, 0):
        env = env_with(SLURM_ARRAY_TASK_ID=str(task), FAKE_STEP_SECONDS="0.4")  # runs long enough to overlap
        done = subprocess.run(["bash", str(script)], env=env, capture_output=True)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    started = [bool(events(sweep_dir / "runs" / rid)) for rid in ids]
    assert started == [True, True, True, False, False, False, True]
    processes = []  # when the executor started and reaped each of task 0's trainers
    for rid in ids[:3]:
        (a,) = attempts.read(sweep_dir / "runs" / rid).attempts
        processes.append({"t0": dt.datetime.fromisoformat(a.started), "t1": dt.datetime.fromisoformat(a.ended)})
    assert _most_at_once(processes) == 3  # task 0's three runs shared its slot


# ----------------------------------------------------------------------------- real trainer


def _losses(sweep_dir: Path) -> dict[str, list]:
    out = {}
    for run in read_plan(sweep_dir).runs:
        rd = sweep_dir / "runs" / run.run_id
        rows = [json.loads(line) for line in (rd / "metrics.jsonl").read_text().splitlines()]
        out[run.run_id] = [(r["kind"], r["step"], r.get("loss", r.get("val_loss"))) for r in rows]
    return out


@pytest.mark.slow  # ~1.5 min on 2 shared cores: 3 trainer processes started twice
def test_packed_runs_train_exactly_as_unpacked_runs(tmp_path, monkeypatch):
    """The real trainer, tiny config, 3 seeds: packed 3 to a slot (forked from the warm server)
    against one per slot (exec'd), one thread per run either way: the same losses to the bit."""
    monkeypatch.delenv("DEPTHMUP_TRAIN_CMD")
    overrides = {"training.steps": 6, "eval.at": [0.5, 1.0], "logging.interval": 1, "parallel.device": "cpu"}
    losses = []
    for name, executor in (
        ("unpacked", {"max_parallel": 3, "runs_per_gpu": 1, "start": "exec"}),
        ("packed", {"max_parallel": 1, "runs_per_gpu": 3, "start": "fork"}),
    ):
        settings = {"kind": "local", "max_retries": 0, "gpus_per_run": 0, **executor}
        spec = derived_spec(tmp_path, f"{name}.yaml", grid={"run.seed": [0, 1, 2]}, overrides=overrides,
                            executor=settings)  # fmt: skip
        monkeypatch.setattr("launch.resources.cpu_count", lambda: 3)  # one thread per run in both layouts
        assert _sweep(spec, tmp_path / name) == 0
        summaries = [json.loads((tmp_path / name / "runs" / r.run_id / "summary.json").read_text())
                     for r in read_plan(tmp_path / name).runs]  # fmt: skip
        assert [s["status"] for s in summaries] == ["completed"] * 3
        losses.append(_losses(tmp_path / name))
    assert losses[0] == losses[1]
    assert len({tuple(v) for v in losses[0].values()}) == 3  # the seeds differ: the comparison can fail


# ----------------------------------------------------------------------------- the benchmark


def _benchmark(extra: list[str], env: dict) -> tuple[str, dict]:
    argv = [sys.executable, str(REPO / "benchmarks" / "gpu_packing.py"), "--runs", "2", "--per-gpu", "2",
            "--rounds", "1", *extra]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads(done.stdout.strip().splitlines()[-1])


def test_packing_benchmark_measures_the_gain_on_cpu():
    """The stand-in trainer sleeps per step, so two runs packed take about half the wall time
    of two in a row: the benchmark's ratio must show it (and would be ~1 if nothing packed)."""
    env = env_with(DEPTHMUP_TRAIN_CMD=FAKE_TRAIN_CMD, FAKE_STEP_SECONDS="0.3", CUDA_VISIBLE_DEVICES="")
    out, result = _benchmark(["--steps", "8", "--start", "exec"], env)
    med = result["medians"]
    assert result["device"].startswith("CPU") and set(med) == {"one_at_a_time", "packed"}
    assert med["one_at_a_time"]["most_at_once"] == 1 and med["packed"]["most_at_once"] == 2
    ratio = med["packed"]["runs_per_hour"] / med["one_at_a_time"]["runs_per_hour"]
    assert ratio > 1.2  # 2.4 s of sleep per run, run side by side; start-up noise on a shared machine aside
    assert f"packed / one_at_a_time: runs/hour x{ratio:.2f}" in out


def test_packing_benchmark_under_a_time_limit_runs_fewer_rounds_and_still_reports():
    """A round takes seconds here; a 1 s limit lets the first run and stops before the second."""
    env = env_with(DEPTHMUP_TRAIN_CMD=FAKE_TRAIN_CMD, FAKE_STEP_SECONDS="0.1", CUDA_VISIBLE_DEVICES="")
    out, result = _benchmark(["--steps", "6", "--start", "exec", "--rounds", "3", "--time-limit", "1"], env)
    assert result["rounds"] == 1 and set(result["medians"]) == {"one_at_a_time", "packed"}
    assert "time limit (1 s): 1 of 3 rounds ran" in out and "medians over 1 round(s)" in out
    assert "round 1 " not in out


@pytest.mark.slow
def test_packing_benchmark_runs_the_real_trainer_on_cpu():
    env = env_with(CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")
    env.pop("DEPTHMUP_TRAIN_CMD", None)
    out, result = _benchmark(["--steps", "6", "parallel.device=cpu", "scheduler.warmup_steps=1"], env)
    assert all(m["tokens_per_s"] > 0 for m in result["medians"].values()), out


def test_the_benchmark_starts_its_fork_server_before_the_rounds(monkeypatch, capsys):
    """benchmarks/gpu_packing.py runs every sweep in one process with one fork server: started by
    the first sweep, the first mode of round 0 (one at a time) paid its start alone (on CPU here:
    13.0 s against 6.4 s for the same runs in round 1), overstating packing's gain."""
    import importlib.util

    from launch import warm_start

    spec = importlib.util.spec_from_file_location(
        "gpu_packing_bench", Path(__file__).parents[1] / "benchmarks" / "gpu_packing.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    events = []
    monkeypatch.setattr(warm_start._SERVER, "status", lambda: events.append("server") or {})
    row = {"wall_s": 1.0, "runs_per_hour": 1.0, "tokens_per_s": 1.0, "run_tokens_per_s": 1.0, "most_at_once": 1}
    monkeypatch.setattr(bench, "measure", lambda spec, sweep_dir: events.append(spec.stem) or row)
    monkeypatch.setattr(bench, "visible_gpus", lambda: [])
    monkeypatch.setattr(sys, "argv", ["gpu_packing.py", "--runs", "2", "--rounds", "2"])
    assert bench.main() == 0
    assert events == ["server", "one_at_a_time0", "packed0", "packed1", "one_at_a_time1"]
    assert "fork server ready in" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["gpu_packing.py", "--runs", "2", "--rounds", "1", "--start", "exec"])
    events.clear()
    assert bench.main() == 0 and events == ["one_at_a_time0", "packed0"]  # exec: no server to start

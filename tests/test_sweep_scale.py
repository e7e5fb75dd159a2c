"""A large sweep's bookkeeping: the files ``status`` and re-expansion read for every run, at scale.

Run directories are written through the toolkit's own writers (``runconfig.dump_yaml``,
``rundir.files``, ``launch.attempts``), so these tests exercise the real readers.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launch import attempts
from launch.__main__ import main
from launch.errors import LaunchError
from launch.run_configs import load_run_config
from launch.sweep_dir import read_plan, run_dir, write_plan
from launch.sweep_spec import expand, load_spec
from runconfig import dump_yaml, load_config, load_yaml
from runconfig.schema import RunConfig
from tests.launch_fixtures.helpers import REPO, derived_spec, env_with, read_csv, stub_bin, use_fake_trainer

GRID = {"model.num_layers": [2, 4], "optimizer.lr": {"log2_range": [-10, -6, 1]}}


@pytest.fixture(autouse=True)
def fake_trainer(monkeypatch):
    use_fake_trainer(monkeypatch)


def _sweep(tmp_path: Path, grid: dict | None = None) -> tuple[Path, Path]:
    spec = derived_spec(
        tmp_path, grid=grid or GRID, overrides={"training.steps": 8, "parametrization.base_num_layers": 2}
    )
    return spec, tmp_path / "sw"


def _no_python_yaml_parser(monkeypatch) -> None:
    """Any YAML parsed by PyYAML's pure-Python reader fails (libyaml's parser does not use it)."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("YAML parsed with PyYAML's pure-Python parser")

    monkeypatch.setattr(yaml.reader.Reader, "__init__", refuse)


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_status_parses_sweep_and_run_configs_with_libyaml(tmp_path, monkeypatch, capsys):
    # The pure-Python parser took ~33 ms per config.yaml: `status` over 2000 runs spent 44 s of
    # its time there (benchmarks/status_scale.py); libyaml's parser gives the same values.
    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    write_plan(sweep_dir, plan)
    first = plan.runs[0]
    cfg = load_config(RunConfig, sweep_dir / "base_config.yaml", plan.train_invocation(sweep_dir, first).overrides)
    cfg.model.hidden_size = 128  # what the run's own config.yaml says wins over the expansion's value
    run_dir(sweep_dir, first.run_id).mkdir(parents=True)
    (run_dir(sweep_dir, first.run_id) / "config.yaml").write_text(dump_yaml(cfg))
    _no_python_yaml_parser(monkeypatch)
    assert main(["status", str(sweep_dir)]) == 75
    assert "pending    10" in capsys.readouterr().out
    rows = read_csv(sweep_dir / "results.csv")
    assert {r["model.hidden_size"] for r in rows if r["run_id"] == first.run_id} == {"128"}
    assert {r["model.hidden_size"] for r in rows if r["run_id"] != first.run_id} == {"64"}
    assert len(read_plan(sweep_dir).runs) == 10


def test_results_csv_parses_each_version_of_a_runs_config_once(tmp_path, monkeypatch, capsys):
    # Every results.csv writer (status, the end of sweep/run, each array task) parsed every run's
    # config.yaml again: 12 of the 16 s of a build over 10000 runs (benchmarks/sweep_scale.py).
    # Now the values are kept in results.configs.json under each file's stat.
    import launch.status as status

    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    write_plan(sweep_dir, plan)
    started = plan.runs[:3]
    for run in started:
        cfg = load_config(RunConfig, sweep_dir / "base_config.yaml", plan.train_invocation(sweep_dir, run).overrides)
        run_dir(sweep_dir, run.run_id).mkdir(parents=True)
        (run_dir(sweep_dir, run.run_id) / "config.yaml").write_text(dump_yaml(cfg))
    parsed = []
    monkeypatch.setattr(status, "load_yaml", lambda text: parsed.append(text) or load_yaml(text))

    def status_csv() -> bytes:
        parsed.clear()
        assert main(["status", str(sweep_dir)]) == 75
        assert "pending    10" in capsys.readouterr().out
        return (sweep_dir / "results.csv").read_bytes()

    first = status_csv()
    assert len(parsed) == 3  # the three runs that have a config.yaml
    assert status_csv() == first and parsed == []  # none changed: none parsed
    cfg.model.hidden_size = 128  # the last started run's config.yaml rewritten
    (run_dir(sweep_dir, started[-1].run_id) / "config.yaml").write_text(dump_yaml(cfg))
    status_csv()
    assert len(parsed) == 1
    rows = read_csv(sweep_dir / "results.csv")
    assert len(rows) == 20  # 10 runs x eval.at [0.5, 1.0]
    assert {r["model.hidden_size"] for r in rows if r["run_id"] == started[-1].run_id} == {"128"}
    assert {r["model.hidden_size"] for r in rows if r["run_id"] != started[-1].run_id} == {"64"}
    (sweep_dir / "results.configs.json").write_text("{")  # a broken cache is rebuilt
    again = status_csv()
    assert len(parsed) == 3 and again == (sweep_dir / "results.csv").read_bytes()
    assert again != first and status_csv() == again and parsed == []


def test_status_names_twenty_failed_runs_and_counts_the_others(tmp_path, capsys):
    # status printed one line per failed run: a sweep of 10000 runs that all failed the same way
    # (a bad module on the nodes) printed 10000 lines under the counts. Now it names 20 and
    # counts the others by their detail.
    spec, sweep_dir = _sweep(
        tmp_path, grid={"model.num_layers": [2, 4, 8], "optimizer.lr": {"log2_range": [-12, -3, 1]}}
    )
    plan = expand(spec, load_spec(spec))
    write_plan(sweep_dir, plan)
    assert len(plan.runs) == 30
    for i, run in enumerate(plan.runs):
        rd = run_dir(sweep_dir, run.run_id)
        rd.mkdir(parents=True)
        for _ in range(3 if i < 25 else 1):  # 25 out of retries, the last 5 refused their config once
            attempts.finish(
                rd,
                attempts.begin(rd, os.getpid()),
                1 if i < 25 else 2,
                "failed" if i < 25 else "invalid",
                held_lock=True,
            )
    assert main(["status", str(sweep_dir)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "  failed     30" in lines
    start = lines.index("failed runs (their trainer output: runs/<ID>/launch/output.log):")
    gave_up = "last attempt: failed (exit 1); 3 failed attempt(s), limit 2: gave up"
    assert lines[start + 1 : start + 21] == [f"  {r.run_id}: {gave_up}" for r in plan.runs[:20]]
    assert lines[start + 21 : start + 24] == [
        "  ... 10 more (column status of results.csv names them all):",
        f"      5 x {gave_up}",
        "      5 x last attempt: invalid (exit 2); 1 failed attempt(s), limit 2",
    ]
    assert sum(1 for r in read_csv(sweep_dir / "results.csv") if r["status"] == "failed") == 60  # 30 runs x 2 evals


def test_sweep_yaml_is_parsed_once_per_version(tmp_path, monkeypatch):
    # status and each array task parsed sweep.yaml: 4.6 s for 10000 runs. Its parse is kept as JSON
    # under its stat (sweep.cache.json): the same plan, a rewritten sweep.yaml read afresh.
    import launch.sweep_dir as sweep_dir_module

    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    write_plan(sweep_dir, plan)
    parsed = []
    plan_text = (sweep_dir / "sweep.yaml").read_text
    monkeypatch.setattr(
        sweep_dir_module, "load_yaml", lambda text: (text == plan_text() and parsed.append(text)) or load_yaml(text)
    )
    reads = [read_plan(sweep_dir) for _ in range(3)]
    assert len(parsed) == 1 and (sweep_dir / "sweep.cache.json").is_file()
    assert [r.to_dict() for r in reads] == [plan.to_dict()] * 3
    plan.runs = plan.runs[:4]
    write_plan(sweep_dir, plan)  # another expansion: a new sweep.yaml
    assert [r.run_id for r in read_plan(sweep_dir).runs] == [r.run_id for r in plan.runs] and len(parsed) == 2
    (sweep_dir / "sweep.cache.json").write_text('{"stamp": 1}')  # broken: passed by and rewritten
    assert len(read_plan(sweep_dir).runs) == 4 and len(read_plan(sweep_dir).runs) == 4 and len(parsed) == 3


def test_expansion_reads_and_merges_the_base_config_once(tmp_path, monkeypatch):
    # Re-expanding a 2000-point spec (every `launch sweep` rerun) took 227 s on the 2-core
    # machine, ~0.1 s per point, most of it building the schema's defaults and merging the base
    # file again for each point and each grid value; now they are built once (63 s). Each point
    # then still merged its overrides into a deep copy of the whole tree (53 s for 2000 points in
    # benchmarks/sweep_scale.py, ~25 ms each in OmegaConf's merge, from_dotlist, to_object); now
    # the loaded base config is built again with the point's typed values (every __post_init__
    # check, the cross-section ones included): one merge per grid value, whatever the points.
    from omegaconf import OmegaConf

    built, merges = [], []
    structured, merge = OmegaConf.structured, OmegaConf.merge
    monkeypatch.setattr(OmegaConf, "structured", lambda *a, **k: built.append(a) or structured(*a, **k))
    monkeypatch.setattr(OmegaConf, "merge", lambda *a, **k: merges.append(a) or merge(*a, **k))
    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    assert len(plan.runs) == 10
    assert len(built) == 2  # the spec's schema (load_spec) and the run config's, once each
    # the spec file, the base file, the fixed overrides, then 2 + 5 grid values: 10 (was 20: one more per point)
    assert len(merges) == 10
    # the same values and the same refusals as one load per point
    point = plan.runs[-1]
    args = [f"{k}={v}" for k, v in {**plan.fixed, **point.point}.items()]
    one = load_config(RunConfig, plan.base_config_source, args)
    assert one.model.num_layers == 4 and one.optimizer.lr == 2.0**-6 == point.resolved["optimizer.lr"]
    fixed = {"training.steps": 8, "parametrization.base_num_layers": 2, "parallel.pipeline_model_parallel_size": 2}
    bad = derived_spec(tmp_path, name="bad.yaml", grid={"model.num_layers": [2, 3]}, overrides=fixed)
    with pytest.raises(LaunchError) as refused:
        expand(bad, load_spec(bad))
    with pytest.raises(LaunchError) as alone:
        load_run_config(plan.base_config_source, [*(f"{k}={v}" for k, v in fixed.items()), "model.num_layers=3"])
    assert str(refused.value) == (
        f"sweep spec {bad}: grid entry 'model.num_layers' value 3: command-line overrides: "
        "parallel.pipeline_model_parallel_size: 2 does not divide model.num_layers=3"
    )
    assert str(refused.value).endswith(str(alone.value))
    # a combination refused by a cross-key check: the message of a full load, naming the point
    grid = {"training.global_batch_size": [12, 8], "training.micro_batch_size": [3, 4]}
    allow = ["training.global_batch_size", "training.micro_batch_size"]
    bad2 = derived_spec(tmp_path, name="bad2.yaml", grid=grid, overrides={"training.steps": 8}, allow_grid_keys=allow)
    with pytest.raises(LaunchError) as refused_point:
        expand(bad2, load_spec(bad2))
    with pytest.raises(LaunchError) as point_alone:
        load_run_config(
            plan.base_config_source, ["training.steps=8", "training.global_batch_size=8", "training.micro_batch_size=3"]
        )
    assert str(refused_point.value).startswith(
        f"sweep spec {bad2}: grid point {{training.global_batch_size=8, training.micro_batch_size=3}}: "
    )
    assert str(refused_point.value).endswith(str(point_alone.value))
    assert "training.global_batch_size" in str(point_alone.value)


SBATCH_COUNTING = """n=$(( $(cat "$DUMP_DIR/n" 2>/dev/null || echo 0) + 1 )); echo $n > "$DUMP_DIR/n"
if [ -n "$FAIL_AT" ] && [ "$n" = "$FAIL_AT" ]; then echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2; exit 1; fi
echo "$@" >> "$DUMP_DIR/sbatch.txt"; echo "$((700 + n));cluster\""""


def test_slurm_sweep_over_max_array_size_is_split_into_chained_arrays(tmp_path, monkeypatch, capsys):
    # A sweep needing more array tasks than the cluster's MaxArraySize (1001 by default) was
    # refused ("split the grid into several sweep specs"), which splits its results.csv too. Now
    # it goes in several arrays, each starting after the one before ends, so that at most
    # max_parallel tasks run at a time. MaxArraySize 4 here (scontrol's answer), 10 runs.
    dump = tmp_path / "dump"
    dump.mkdir()
    stubs = {"sbatch": SBATCH_COUNTING, "squeue": "true", "scontrol": 'echo "MaxArraySize            = 4"'}
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump))
    spec, sweep_dir = _sweep(tmp_path)
    args = ["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--executor", "slurm", "--max-parallel", "2"]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert "10 runs need 10 array tasks, more than MaxArraySize (4): submitting 3 arrays" in err
    folders = sorted((sweep_dir / "slurm").iterdir())
    assert [f.name[-4:] for f in folders] == ["1of3", "2of3", "3of3"]
    lists = [(f / "runs.txt").read_text().split() for f in folders]
    assert [len(x) for x in lists] == [4, 4, 2]
    assert sum(lists, []) == [r.run_id for r in read_plan(sweep_dir).runs]
    arrays = [re.search(r"#SBATCH --array=(\S+)", (f / "array.sbatch").read_text()).group(1) for f in folders]
    assert arrays == ["0-3%2", "0-3%2", "0-1%2"]
    calls = (dump / "sbatch.txt").read_text().splitlines()
    assert ["--dependency=afterany:701" in calls[1], "--dependency=afterany:702" in calls[2]] == [True, True]
    assert "--dependency" not in calls[0]
    assert [json.loads((f / "job.json").read_text())["job_id"] for f in folders] == ["701", "702", "703"]
    assert "submitted array job 702: 4 runs, at most 2 tasks at a time, after job 701 ends" in out

    # sbatch refusing the second array once (a submit limit): it is tried again at half its size,
    # and the rest goes in arrays of that size (tests/test_slurm_limits.py: a limit that stays).
    monkeypatch.setenv("FAIL_AT", "5")
    shutil.rmtree(sweep_dir / "slurm")
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "sbatch refused an array of 4 tasks: QOSMaxSubmitJobPerUserLimit" in err
    folders = sorted((sweep_dir / "slurm").iterdir())
    assert [len((f / "runs.txt").read_text().split()) for f in folders] == [4, 2, 2, 2]
    assert [json.loads((f / "job.json").read_text())["job_id"] for f in folders] == ["704", "706", "707", "708"]


def test_max_array_size_falls_back_to_slurms_default(tmp_path, monkeypatch):
    from launch.executor_slurm import MAX_ARRAY_SIZE, max_array_size

    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, {'scontrol': 'exit 1'})}:{os.environ['PATH']}")
    assert max_array_size() == MAX_ARRAY_SIZE == 1001
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert max_array_size() == 1001


def _attempts(sweep_dir: Path) -> dict[str, list[tuple]]:
    return {
        run.run_id: [(a.outcome, a.exit_code) for a in attempts.read(run_dir(sweep_dir, run.run_id)).attempts]
        for run in read_plan(sweep_dir).runs
    }


def test_trainer_failing_on_a_full_disk_stops_the_sweep_without_using_retries(tmp_path, monkeypatch, capsys):
    # A quota that fills mid-sweep made every trainer fail (exit 1): each run used up its
    # retries within seconds and the sweep went on to fail the next ones, ending "gave up" for
    # all of them. Now the first such failure stops the sweep (exit 75), its attempt does not
    # count, and a rerun once there is space finishes every run.
    spec, sweep_dir = _sweep(tmp_path, grid={"optimizer.lr": [0.001, 0.002, 0.003]})
    monkeypatch.setenv("FAKE_FAIL_MATCH", "lr0.002")
    monkeypatch.setenv("FAKE_FAIL_TIMES", "1")
    monkeypatch.setenv("FAKE_FAIL_REASON", "OSError: [Errno 122] Disk quota exceeded: 'checkpoints/step_00000002'")
    args = ["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress", "--max-parallel", "1"]
    assert main(args) == 75
    captured = capsys.readouterr()
    assert "lr0.002-" in captured.err and "Disk quota exceeded" in captured.err
    assert "no new runs are started" in captured.err and "stopped: disk full" in captured.out
    (first, second, third) = _attempts(sweep_dir).values()
    assert first == [("completed", 0)] and second == [("interrupted", 1)] and third == []
    assert main(args) == 0
    assert [len(a) for a in _attempts(sweep_dir).values()] == [1, 2, 1]
    assert "completed  3" in capsys.readouterr().out


def test_full_disk_in_launchs_own_bookkeeping_stops_cleanly(tmp_path, monkeypatch, capsys):
    # launch could not write a run's attempts.json (ENOSPC) and died with a traceback, its
    # trainers killed by their parent-death signal. Now it stops starting runs, stops the running
    # ones and exits 75 with the reason. The trainer whose attempt could not be closed had
    # finished: its summary.json is the run's record, so the rerun leaves it alone.
    spec, sweep_dir = _sweep(tmp_path, grid={"optimizer.lr": [0.001, 0.002, 0.003]})
    real_finish = attempts.finish

    def finish(rd, *args, **kwargs):
        if "lr0.002" in rd.name:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_finish(rd, *args, **kwargs)

    monkeypatch.setattr(attempts, "finish", finish)
    args = ["sweep", str(spec), "--sweep-dir", str(sweep_dir), "--no-progress", "--max-parallel", "1"]
    assert main(args) == 75
    assert "disk full ([Errno 28] No space left on device)" in capsys.readouterr().err
    (first, second, third) = _attempts(sweep_dir).values()
    assert first == [("completed", 0)] and second == [(None, None)] and third == []
    monkeypatch.setattr(attempts, "finish", real_finish)
    assert main(args) == 0
    assert [len(a) for a in _attempts(sweep_dir).values()] == [1, 1, 1]
    assert "completed  3" in capsys.readouterr().out


def test_array_task_does_not_queue_behind_another_results_writer(tmp_path, monkeypatch, capsys):
    # Each array task (`launch run SWEEP --only ID`) rebuilt results.csv for the whole sweep
    # while holding results.lock, waiting its turn: at 2000 runs a build took ~13 s, so tasks
    # ending together queued for minutes holding their allocation. Now a task that finds the
    # lock held marks the file stale and ends; the holder writes it again with the new state.
    from launch import status

    spec, sweep_dir = _sweep(tmp_path, grid={"optimizer.lr": [0.001, 0.002, 0.003]})
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    ids = [r.run_id for r in read_plan(sweep_dir).runs]
    with open(sweep_dir / "results.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another writer (a slow status, another task)
        argv = [sys.executable, "-m", "launch", "run", str(sweep_dir), "--only", ids[0], "--no-progress"]
        try:
            task = subprocess.run(argv, cwd=REPO, env=env_with(), capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the array task waited for results.lock")
        assert task.returncode == 0, task.stderr[-2000:]
        assert (sweep_dir / "results.stale").exists() and not (sweep_dir / "results.csv").exists()
    assert "results.csv: left to the process writing it now" in task.stdout

    # A writer that finds the marker again after writing (a task turned away while it read the
    # states) writes once more; the file then holds every state.
    reads = []
    collect = status.collect_states

    def collect_and_turn_one_away(*args, **kwargs):
        reads.append(1)
        if len(reads) == 1:
            (sweep_dir / "results.stale").touch()
        return collect(*args, **kwargs)

    monkeypatch.setattr(status, "collect_states", collect_and_turn_one_away)
    assert main(["run", str(sweep_dir), "--only", ids[1], "--no-progress"]) == 0
    assert len(reads) == 2 and not (sweep_dir / "results.stale").exists()
    rows = read_csv(sweep_dir / "results.csv")
    assert {r["run_id"]: r["status"] for r in rows} == {ids[0]: "completed", ids[1]: "completed", ids[2]: "pending"}


def test_status_reads_each_runs_summary_and_attempts_once(tmp_path, monkeypatch, capsys):
    # `status` over 10000 runs read every summary.json twice (the run's state, then results.csv's
    # evals) and every attempts.json (squeue's jobs), then the unfinished runs' attempts again for
    # their state: 20000 + 12500 reads, 10000 + 2500 now (benchmarks/status_scale.py's sweep,
    # 4.06 -> 3.27 s in one process). squeue is asked once, about the open attempts of unfinished runs.
    from benchmarks.sweep_scale import write_runs
    from rundir.attempts import Attempt

    spec, sweep_dir = _sweep(tmp_path)
    plan = expand(spec, load_spec(spec))
    write_plan(sweep_dir, plan)
    write_runs(sweep_dir, 8, 2)  # runs 3 and 7 preempted (metrics, no final summary), the others completed
    ids = [r.run_id for r in plan.runs]

    def leave_open(run_id: str, job: str) -> None:  # an attempt a dead node left open on another host
        log = attempts.read(run_dir(sweep_dir, run_id))
        log.attempts.append(Attempt("x" + job, "node-1", 1, "2026-01-01T00:00:00+00:00", job=job))
        text = json.dumps({"attempts": [a.__dict__ for a in log.attempts]})
        (run_dir(sweep_dir, run_id) / attempts.ATTEMPTS_FILE).write_text(text)

    leave_open(ids[3], "77_0")  # its job ended: pending
    leave_open(ids[7], "78_0")  # its job runs: running
    leave_open(ids[0], "79_0")  # completed: its attempts are not read, squeue is not asked about it
    asked = tmp_path / "asked"
    squeue = f'echo "$@" >> {asked}; echo "78_0 RUNNING"'
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, {'squeue': squeue})}:{os.environ['PATH']}")
    reads: dict[str, int] = {}
    read_text = Path.read_text

    def counting(self, *args, **kwargs):
        reads[self.name] = reads.get(self.name, 0) + 1
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counting)
    assert main(["status", str(sweep_dir)]) == 4
    out = capsys.readouterr().out
    assert re.search(r"completed\s+8\n.*running\s+1\n\s+pending\s+1\n", out, re.S), out
    assert reads["summary.json"] == 10 and reads["attempts.json"] == 2
    assert asked.read_text().split() == ["-h", "-j", "77_0,78_0", "-o", "%i", "%T"]
    rows = read_csv(sweep_dir / "results.csv")
    assert len(rows) == 20 and [r["status"] for r in rows if r["run_id"] in (ids[3], ids[7])] == ["pending"] * 4
    done = [r for r in rows if r["run_id"] == ids[0]]
    assert [(r["step"], r["fraction"]) for r in done] == [("4", "0.5"), ("8", "1.0")]  # from its summary
    loss = 3.0 + 0.05 * (-10 - (-9.0 + 0.1)) ** 2  # benchmarks.sweep_scale.planted_loss: depth 2, lr 2^-10, seed 0
    assert [float(r["val_loss"]) for r in done] == pytest.approx([loss, loss])
    assert [r["step"] for r in rows if r["run_id"] == ids[3]] == ["4", ""]  # half-way: metrics.jsonl's eval


def test_status_notes_run_dirs_of_an_earlier_expansion_not_dot_folders(tmp_path, capsys):
    """status names the run directories sweep.yaml does not list (rundir.files.run_dirs): the
    trainers' shared runs/.index_cache is not one of them."""
    spec, sweep_dir = _sweep(tmp_path)
    write_plan(sweep_dir, expand(spec, load_spec(spec)))
    for name in ("old1", "old2", ".index_cache"):
        (sweep_dir / "runs" / name).mkdir()
    assert main(["status", str(sweep_dir)]) == 75
    out = capsys.readouterr().out
    assert "note: 2 run dir(s) under runs/ are not in sweep.yaml (an earlier expansion): old1, old2\n" in out

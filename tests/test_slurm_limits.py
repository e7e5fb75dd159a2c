"""A big sweep on a shared cluster's limits, with stub sbatch/squeue/scontrol (the one-host test
SLURM has no accounting, so no QOS limit, and its controller is never busy):

- a per-user submit limit (QOS/association ``MaxSubmitJobs``, every array task counting):
  what fits is queued, the rest is left for a rerun once jobs have ended, and no run twice;
- a busy controller (``Socket timed out on send/recv operation``): sbatch, squeue and scontrol
  are retried; an sbatch whose answer was lost is found in squeue by its script instead of
  being submitted a second time, now or on a rerun.

tests/test_slurm_cluster.py checks ``slurm.max_array_tasks`` against the real SLURM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobscripts import slurm_cli, squeue
from launch.__main__ import main
from launch.sweep_dir import read_plan
from tests.launch_fixtures.helpers import derived_spec, stub_slurm

TIMEOUT = "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation"
LIMIT = "sbatch: error: QOSMaxSubmitJobPerUserLimit"

# sbatch: job ids 701, 702, ... (one per call, refused or not). It refuses a submission that
# takes this user's queued tasks (file "used") above $LIMIT, like MaxSubmitJobsPerUser; with
# $FAIL_TIMES it first fails that often as a timed-out controller ($QUEUED_ANYWAY: after
# queueing the job, as when only the answer is lost).
SBATCH = r"""d="$STUB_DIR"; n=$(( $(cat "$d/n" 2>/dev/null || echo 0) + 1 )); echo $n > "$d/n"
script="${@: -1}"; tasks=$(( $(sed -n 's/^#SBATCH --array=0-\([0-9]*\).*/\1/p' "$script") + 1 ))
used=$(cat "$d/used" 2>/dev/null || echo 0)
if [ -n "$LIMIT" ] && [ $((used + tasks)) -gt "$LIMIT" ]; then
  echo "sbatch: error: QOSMaxSubmitJobPerUserLimit" >&2
  echo "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)" >&2
  exit 1
fi
queue() { echo $((used + tasks)) > "$d/used"; echo "$((700 + n))" >> "$d/live"; echo "$((700 + n))|$script" >> "$d/mine"; echo "$@" >> "$d/queued.txt"; }
f=$(cat "$d/failed" 2>/dev/null || echo 0)
if [ "$f" -lt "${FAIL_TIMES:-0}" ]; then
  echo $((f + 1)) > "$d/failed"
  if [ -n "$QUEUED_ANYWAY" ]; then queue "$@"; fi
  echo "sbatch: error: Batch job submission failed: Socket timed out on send/recv operation" >&2; exit 1
fi
queue "$@"; echo "$((700 + n));cluster"
"""
# squeue: the ids in "live" for -j (%F), "jobid|script" lines of "mine" for -u (%F|%o); while
# the file "down" exists it times out like a busy controller ("down" holding a count: that often).
SQUEUE = r"""d="$STUB_DIR"; echo "$@" >> "$d/squeue.calls"
if [ -e "$d/down" ]; then
  left=$(cat "$d/down"); if [ -n "$left" ]; then [ "$left" -le 1 ] && rm "$d/down" || echo $((left - 1)) > "$d/down"; fi
  echo "squeue: error: slurm_load_jobs error: Socket timed out on send/recv operation" >&2; exit 1
fi
case " $* " in *" -u "*) cat "$d/mine" 2>/dev/null;; *) cat "$d/live" 2>/dev/null;; esac; true
"""


@pytest.fixture
def cluster(tmp_path, monkeypatch) -> Path:
    """Stub sbatch/squeue/scontrol (MaxArraySize 4) and the fake trainer; their state folder."""
    stubs = {"sbatch": SBATCH, "squeue": SQUEUE, "scontrol": 'echo "MaxArraySize            = 4"'}
    state = stub_slurm(tmp_path, monkeypatch, stubs)
    for var in ("LIMIT", "FAIL_TIMES", "QUEUED_ANYWAY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(slurm_cli, "RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    return state


def _sweep(tmp_path: Path, lrs: int, **slurm) -> list[str]:
    grid = {"model.num_layers": [2], "optimizer.lr": [0.001 * (i + 1) for i in range(lrs)]}
    spec = derived_spec(
        tmp_path, grid=grid, overrides={"training.steps": 8, "parametrization.base_num_layers": 2}, slurm=slurm
    )
    return ["sweep", str(spec), "--sweep-dir", str(tmp_path / "sw"), "--executor", "slurm", "--max-parallel", "2"]


def _submissions(sweep_dir: Path) -> list[tuple[str, list[str]]]:
    """``(job id, its runs)`` of every submission folder with a job id, by job id."""
    out = []
    for folder in (sweep_dir / "slurm").iterdir():
        job = json.loads((folder / "job.json").read_text())["job_id"] if (folder / "job.json").exists() else None
        if job:
            out.append((str(job), (folder / "runs.txt").read_text().split()))
    return sorted(out, key=lambda x: int(x[0]))


def _tasks(folder: Path) -> str:
    return re.search(r"#SBATCH --array=(\S+)", (folder / "array.sbatch").read_text()).group(1)


def test_a_submit_limit_queues_what_fits_and_a_rerun_the_rest(tmp_path, cluster, monkeypatch, capsys):
    # 10 runs, MaxArraySize 4, at most 5 queued tasks per user. Before, sbatch's refusal of the
    # second array of 4 ended the command with 4 runs queued, and every later array of 4 was
    # refused as well while any was queued; now 4 + 1 are queued (the refused array halved down
    # to what fits), the message names the limit and says to rerun once jobs have ended.
    monkeypatch.setenv("LIMIT", "5")
    argv = _sweep(tmp_path, 10)
    sweep_dir = tmp_path / "sw"
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "sbatch refused an array of 4 tasks: QOSMaxSubmitJobPerUserLimit" in err
    assert "QOSMaxSubmitJobPerUserLimit refuses even a one-task array now: 5 of 10 runs are queued in array " \
           "job(s) 701, 704. Run this command again once some of your queued jobs have ended: it submits the " \
           "other 5" in err  # fmt: skip
    first = _submissions(sweep_dir)
    assert [(job, len(runs)) for job, runs in first] == [("701", 4), ("704", 1)]
    assert len((cluster / "queued.txt").read_text().splitlines()) == 2  # calls 2, 3 and 5 were refused
    assert len(list((sweep_dir / "slurm").iterdir())) == 2  # refused arrays leave no folder behind

    # Rerun while both arrays are queued: nothing fits, nothing is submitted twice.
    assert main(argv) == 1
    assert "no run was queued" in capsys.readouterr().err
    assert _submissions(sweep_dir) == first

    # The queued runs ran and ended (their tasks as SLURM would run them); the quota is free.
    for _, runs in first:
        for rid in runs:
            assert main(["run", str(sweep_dir), "--only", rid, "--max-parallel", "1", "--no-progress"]) == 0
    (cluster / "live").write_text("")
    (cluster / "used").write_text("0")
    assert main(argv) == 0
    submitted = [rid for _, runs in _submissions(sweep_dir) for rid in runs]
    assert sorted(submitted) == sorted(r.run_id for r in read_plan(sweep_dir).runs)  # each run once
    assert [len(runs) for _, runs in _submissions(sweep_dir)] == [4, 1, 4, 1]


def test_max_array_tasks_sets_a_smaller_array_size(tmp_path, cluster, capsys):
    # slurm.max_array_tasks below the cluster's MaxArraySize (4): arrays of 3, chained.
    assert main(_sweep(tmp_path, 7, max_array_tasks=3)) == 0
    assert "7 runs need 7 array tasks, more than slurm.max_array_tasks (3): submitting 3 arrays" in (
        capsys.readouterr().err
    )
    folders = sorted((tmp_path / "sw" / "slurm").iterdir())
    assert [_tasks(f) for f in folders] == ["0-2%2", "0-2%2", "0-0%2"]
    calls = (cluster / "queued.txt").read_text().splitlines()
    assert ["--dependency=afterany:701" in calls[1], "--dependency=afterany:702" in calls[2]] == [True, True]


def test_a_dry_run_names_the_chained_arrays_as_the_submission_does(tmp_path, cluster, capsys):
    """--dry-run of 7 runs in arrays of 3 shows the folders <stamp>-1of3, -2of3, -3of3 that a
    submission writes, each after the one before (before: -1of3, -1of2 and the bare stamp, the
    dry run not counting the arrays it had shown)."""
    assert main([*_sweep(tmp_path, 7, max_array_tasks=3), "--dry-run"]) == 0
    err = capsys.readouterr().err
    shown = re.findall(r"dry run: would write \S+/slurm/\d{8}T\d{6}\.\d{6}Z(-\dof\d)?/array\.sbatch", err)
    assert shown == ["-1of3", "-2of3", "-3of3"], err[-2000:]
    assert len(re.findall(r"afterany:<array \d{8}T\d{6}\.\d{6}Z-[12]of3>", err)) == 2, err[-2000:]


def test_max_array_tasks_must_be_positive(tmp_path, cluster, capsys):
    assert main(_sweep(tmp_path, 2, max_array_tasks=0)) == 2
    assert "slurm.max_array_tasks: must be a positive integer, got 0" in capsys.readouterr().err
    assert not (cluster / "n").exists()


def test_sbatch_timing_out_is_retried_when_nothing_was_queued(tmp_path, cluster, monkeypatch, capsys):
    # Before: the first "Socket timed out" ended the command (exit 1, nothing queued).
    monkeypatch.setenv("FAIL_TIMES", "2")
    assert main(_sweep(tmp_path, 3)) == 0
    err = capsys.readouterr().err
    assert err.count("[slurm] sbatch exited 1: " + TIMEOUT + ": trying again") == 2
    assert [(job, len(runs)) for job, runs in _submissions(tmp_path / "sw")] == [("703", 3)]


def test_sbatch_whose_answer_is_lost_is_not_submitted_twice(tmp_path, cluster, monkeypatch, capsys):
    # The controller queued the array but sbatch timed out waiting for its answer. Before, the
    # command failed with no job.json, and its rerun queued a second array for the same runs.
    monkeypatch.setenv("FAIL_TIMES", "1")
    monkeypatch.setenv("QUEUED_ANYWAY", "1")
    argv = _sweep(tmp_path, 3)
    assert main(argv) == 0  # squeue lists a job of this user running the submission's script
    assert [(job, len(runs)) for job, runs in _submissions(tmp_path / "sw")] == [("701", 3)]
    assert (cluster / "n").read_text().strip() == "1"  # one sbatch call
    assert main(argv) == 4  # the runs are in array 701
    assert (cluster / "n").read_text().strip() == "1"


def test_sbatch_lost_while_squeue_is_down_is_found_by_the_rerun(tmp_path, cluster, monkeypatch, capsys):
    # sbatch times out and squeue cannot tell either: the command fails saying so, keeps the
    # submission's folder, and the rerun finds the array in squeue instead of submitting again.
    monkeypatch.setenv("FAIL_TIMES", "1")
    monkeypatch.setenv("QUEUED_ANYWAY", "1")
    argv = _sweep(tmp_path, 3)
    (cluster / "live").write_text("")
    real = squeue.jobs_of_scripts
    armed = [True]

    def busy_once(scripts):  # squeue is first asked after sbatch's timeout: the controller is busy then
        if armed.pop() if armed else False:
            (cluster / "down").write_text("")
        return real(scripts)

    monkeypatch.setattr(squeue, "jobs_of_scripts", busy_once)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Socket timed out on send/recv operation; whether" in err and "was queued is unknown" in err
    assert "is looked for in squeue (by its script) before anything is submitted again" in err
    (folder,) = (tmp_path / "sw" / "slurm").iterdir()
    assert not (folder / "job.json").exists() and (folder / "runs.txt").is_file()
    (cluster / "down").unlink()
    assert main(argv) == 4
    assert "sbatch's answer was lost; squeue lists it as array job 701" in capsys.readouterr().err
    assert json.loads((folder / "job.json").read_text())["job_id"] == "701"
    assert (cluster / "n").read_text().strip() == "1"


def test_squeue_timing_out_is_retried(tmp_path, cluster, capsys):
    # squeue times out twice before the rerun's check: retried, and the rerun sees the live array.
    argv = _sweep(tmp_path, 3)
    assert main(argv) == 0
    (cluster / "down").write_text("2")
    assert main(argv) == 4
    assert capsys.readouterr().err.count("[slurm] squeue: error: slurm_load_jobs error: Socket timed out") == 2
    assert (cluster / "n").read_text().strip() == "1"

"""``--max-parallel N`` across all of a sweep's arrays (a shared cluster's "at most N GPUs at a time").

A rerun, or an adaptive study's next round, submits a new array while the sweep's older ones are
still queued or running. Before, each new array got ``%N`` of its own, so 2N (or more) of the
sweep's tasks could run at once. Now the new array's throttle is N less what the queued arrays
may still run at once (their tasks squeue lists, at most their throttle), and where they leave
nothing it waits for them with ``--dependency=afterany``. sbatch/squeue are stubs here;
tests/test_slurm_cluster.py checks the same against the real one-host SLURM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from jobscripts import squeue
from launch.__main__ import main
from tests.launch_fixtures.helpers import derived_spec, stub_slurm

# sbatch: job ids 701, 702, ...; each call's argv, one word a line, in argv.<n>.
SBATCH = r"""d="$STUB_DIR"; n=$(( $(cat "$d/n" 2>/dev/null || echo 0) + 1 )); echo $n > "$d/n"
printf '%s\n' "$@" > "$d/argv.$n"; echo "$((700 + n))"
"""
# squeue -j: the file "queue", written by the test as the real squeue -o '%F %K' prints it.
SQUEUE = r"""cat "$STUB_DIR/queue" 2>/dev/null; true"""


@pytest.fixture
def stubs(tmp_path, monkeypatch) -> Path:
    return stub_slurm(tmp_path, monkeypatch, {"sbatch": SBATCH, "squeue": SQUEUE, "scontrol": "true"})


def _sweep(tmp_path: Path, lrs: int) -> list[str]:
    """The same sweep grown to ``lrs`` learning rates (the earlier ones keep their run IDs)."""
    grid = {"model.num_layers": [2], "optimizer.lr": [0.001 * (i + 1) for i in range(lrs)]}
    spec = derived_spec(tmp_path, grid=grid, overrides={"training.steps": 8, "parametrization.base_num_layers": 2})
    return ["sweep", str(spec), "--sweep-dir", str(tmp_path / "sw"), "--executor", "slurm", "--max-parallel", "4"]


def _call(state: Path, n: int, sweep_dir: Path) -> tuple[list[str], str, list[str]]:
    """sbatch call ``n``: its argv (the submission folder written as DIR), its ``--array=`` and its runs."""
    argv = (state / f"argv.{n}").read_text().splitlines()
    folder = Path(argv[-1]).parent
    assert folder.parent == sweep_dir / "slurm"
    argv = [a.replace(str(folder), "DIR") for a in argv]
    array = re.search(r"^#SBATCH --array=(\S+)$", (folder / "array.sbatch").read_text(), re.MULTILINE).group(1)
    return argv, array, (folder / "runs.txt").read_text().split()


def test_new_arrays_share_max_parallel_with_the_sweeps_queued_arrays(tmp_path, stubs, capsys):
    sweep_dir = tmp_path / "sw"
    plain = ["--parsable", "--output=DIR/%A_%a.out", "DIR/array.sbatch"]

    # 6 runs, nothing queued: one array of 6 tasks, 4 at a time.
    assert main(_sweep(tmp_path, 6)) == 0
    argv, array, first = _call(stubs, 1, sweep_dir)
    assert (argv, array, len(first)) == (plain, "0-5%4", 6)

    # 701 runs tasks 0-3, 4-5 wait (%4): it may run 4 at once = N, no room. Before, the new run got
    # its own %4 at once (8 tasks of the sweep could run); now it waits for 701 to end.
    (stubs / "queue").write_text("701 4-5%4\n701 0\n701 1\n701 2\n701 3\n")
    assert main(_sweep(tmp_path, 7)) == 0
    argv, array, second = _call(stubs, 2, sweep_dir)
    assert argv == ["--parsable", "--output=DIR/%A_%a.out", "--dependency=afterany:701", "DIR/array.sbatch"]
    assert (array, len(second)) == ("0-0%4", 1) and not set(second) & set(first)
    err = capsys.readouterr().err
    assert "array job(s) 701 still queued or running may run 4 task(s) at once, of --max-parallel 4: " \
           "the new array waits for them to end (--dependency=afterany)" in err  # fmt: skip

    # 701 runs its last task, 702's one task runs: 1 + 1 = 2 of 4 taken, so 3 new runs at %2.
    (stubs / "queue").write_text("701 5\n702 0\n")
    assert main(_sweep(tmp_path, 10)) == 0
    argv, array, third = _call(stubs, 3, sweep_dir)
    assert (argv, array, len(third)) == (plain, "0-2%2", 3)
    assert "may run 2 task(s) at once, of --max-parallel 4: the new array runs at most 2 at a time (%2)" in \
           capsys.readouterr().err  # fmt: skip
    folder = Path((stubs / "argv.3").read_text().splitlines()[-1]).parent
    assert json.loads((folder / "job.json").read_text())["throttle"] == 2  # what later rounds read back

    # 702 is gone without finishing its run (scancel); 703 runs task 0, tasks 1-2 wait (%2): it may run
    # 2 at once. 701's last task + 2 = 3 of 4: 702's run and the new one go in an array of 2 at %1.
    (stubs / "queue").write_text("701 5\n703 1-2%2\n703 0\n")
    assert main(_sweep(tmp_path, 11)) == 0
    argv, array, fourth = _call(stubs, 4, sweep_dir)
    assert (argv, array) == (plain, "0-1%1") and set(fourth) == {*second, fourth[-1]}
    assert fourth[-1] not in {*first, *second, *third}

    # With one task left pending squeue shows no throttle (703_2, not 2%2): that task counts as
    # if it could start (3, not 2); 1 + 3 + 704's 1 (%1) = 5 >= 4, so the next array waits for all three.
    (stubs / "queue").write_text("701 5\n703 2\n703 0\n703 1\n704 0-1%1\n")
    assert main(_sweep(tmp_path, 12)) == 0
    argv, array, fifth = _call(stubs, 5, sweep_dir)
    assert argv[2] == "--dependency=afterany:701:703:704" and (array, len(fifth)) == ("0-0%4", 1)


def test_a_sweep_over_max_array_size_beside_a_queued_array(tmp_path, stubs, monkeypatch, capsys):
    # slurm.max_array_tasks 2, 5 new runs while 701 (one task left) is queued: the first new array
    # takes the room (%3), the next ones wait for the one before them and for 701 (%4).
    assert main(_sweep(tmp_path, 1)) == 0
    (stubs / "queue").write_text("701 0\n")
    spec_argv = _sweep(tmp_path, 6)
    spec = Path(spec_argv[1])
    spec.write_text(spec.read_text() + "slurm:\n  max_array_tasks: 2\n")
    assert main(spec_argv) == 0
    got = [_call(stubs, n, tmp_path / "sw")[:2] for n in (2, 3, 4)]
    assert got == [
        (["--parsable", "--output=DIR/%A_%a.out", "DIR/array.sbatch"], "0-1%3"),
        (["--parsable", "--output=DIR/%A_%a.out", "--dependency=afterany:702:701", "DIR/array.sbatch"], "0-1%4"),
        (["--parsable", "--output=DIR/%A_%a.out", "--dependency=afterany:703:701", "DIR/array.sbatch"], "0-0%4"),
    ]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        ("12 3-9%4\n12 0\n12 1\n", {"12": (9, 4)}),  # 2 running + 7 pending, throttle 4
        ("12 2,5-6%2\n13 N/A\n", {"12": (3, 2), "13": (1, None)}),  # a plain job: one task
        ("12 0-10:5\n", {"12": (3, None)}),  # stepped range: 0, 5, 10
        ("12 2\n12 0\n12 1\n", {"12": (3, None)}),  # one pending: squeue shows no throttle
    ],
)
def test_squeue_array_fields_are_counted(stubs, lines, expected):
    (stubs / "queue").write_text(lines)
    got = squeue.array_jobs(["12", "13"])
    assert {j: (a.tasks, a.throttle) for j, a in got.items()} == expected
    assert got["12"].at_once() == min(expected["12"][0], expected["12"][1] or expected["12"][0])

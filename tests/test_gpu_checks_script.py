"""benchmarks/gpu_checks.sh rehearse: the three GPU stages' commands run on CPU at a tiny shape, in
the node's image (packages it lacks unimportable), before a GPU session spends device time on
them (slow: about 5 minutes), and the stage's time limits with a stand-in python3."""

import os
import subprocess
import time

import pytest

from tests.conftest import REPO


def rehearse(budget: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "REHEARSE_BUDGET": str(budget), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "benchmarks/gpu_checks.sh", "rehearse"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


@pytest.mark.slow
def test_every_stage_runs_and_writes_its_files_on_cpu():
    done = rehearse(300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "rehearsal: every step ran" in done.stdout
    assert [line for line in done.stdout.splitlines() if line.startswith("=== rehearse")] == [
        "=== rehearse a", "=== rehearse b", "=== rehearse c",
    ]  # fmt: skip


@pytest.mark.slow
def test_a_budget_too_short_for_the_steps_fails_and_names_what_is_missing():
    done = rehearse(8)  # every step's share is a few seconds: killed, or past its time limit at the start
    assert done.returncode == 1
    assert "pytest exit 124 (124, 137: the time limit)" in done.stdout and "stage a: a step failed" in done.stdout
    assert "a/vs_plain_124m.json: [{'size': '124m', 'error': 'time limit'}]" in done.stdout
    assert "stage b: vs_plain_1b.json missing or empty" in done.stdout
    assert "stage c: copies_megatron.txt missing or empty" in done.stdout
    assert "rehearsal: FAILED" in done.stdout


STUBBORN_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *pytest*|*gpu_vs_plain.py*) trap '' TERM; echo "ignoring SIGTERM"; sleep 120 ;;  # a step stuck in C code
  *"import TINY"*) echo model.num_layers=2 ;;
  *) echo "stand-in python3" ;;
esac
"""


def test_a_step_that_ignores_sigterm_is_killed_so_the_stage_keeps_to_its_budget(tmp_path):
    """A step that does not end on its part's SIGTERM (stuck in a compile or a CUDA call) is
    killed KILL_AFTER seconds later, so the next step and the device call's own limit keep their
    time; before, `timeout` waited for it without end (here: 2 x 120 s of a 10 s budget)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(STUBBORN_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DEVICE": "cpu", "BUDGET": "10",
           "KILL_AFTER": "2", "OUT": str(tmp_path / "out")}  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(["bash", "benchmarks/gpu_checks.sh", "a"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=200)  # fmt: skip
    took = time.monotonic() - t0
    # parts of 4 s (pytest) and 5 s (124M), each plus 2 s to SIGKILL
    assert took < 40, (took, done.stdout[-2000:])
    assert "pytest exit 137 (124, 137: the time limit)" in done.stdout
    assert (tmp_path / "out" / "pytest_gpu.log").read_text() == "ignoring SIGTERM\n"
    assert (tmp_path / "out" / "vs_plain_124m.log").read_text() == "ignoring SIGTERM\n"

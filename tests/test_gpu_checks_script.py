"""benchmarks/gpu_checks.sh rehearse: the three GPU stages' commands run on CPU at a tiny shape, in
the node's image (packages it lacks unimportable), before a GPU session spends device time on
them. Slow: about 2 minutes."""

import os
import subprocess

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def rehearse(budget: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "REHEARSE_BUDGET": str(budget), "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "benchmarks/gpu_checks.sh", "rehearse"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip


def test_every_stage_runs_and_writes_its_files_on_cpu():
    done = rehearse(300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "rehearsal: every step ran" in done.stdout
    assert [line for line in done.stdout.splitlines() if line.startswith("=== rehearse")] == [
        "=== rehearse a", "=== rehearse b", "=== rehearse c",
    ]  # fmt: skip


def test_a_budget_too_short_for_the_steps_fails_and_names_what_is_missing():
    done = rehearse(8)  # every step's share is a few seconds: killed, or past its time limit at the start
    assert done.returncode == 1
    assert "pytest exit 124 (124: the time limit)" in done.stdout and "stage a: a step failed" in done.stdout
    assert "a/vs_plain_124m.json: [{'size': '124m', 'error': 'time limit'}]" in done.stdout
    assert "stage b: vs_plain_1b.json missing or empty" in done.stdout
    assert "stage c: copies_megatron.txt missing or empty" in done.stdout
    assert "rehearsal: FAILED" in done.stdout

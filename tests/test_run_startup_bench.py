"""benchmarks/run_startup.py passes the caller's PYTHONPATH on to every process it starts.

On the GPU node megatron-core and omegaconf are carried as wheels into /tmp/site and put on
PYTHONPATH; the script once replaced PYTHONPATH with the repo, so its children could not
import omegaconf (seen on the H100, 2026-11-25)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launch.processes import with_repo_on_path
from tests.conftest import REPO, TINY


def test_with_repo_on_path_puts_the_repo_first_and_keeps_the_rest():
    env = with_repo_on_path("/r", {"PYTHONPATH": f"/a{os.pathsep}/b", "X": "1"})
    assert env == {"PYTHONPATH": f"/r{os.pathsep}/a{os.pathsep}/b", "X": "1"}
    assert with_repo_on_path("/r", {})["PYTHONPATH"] == "/r"


@pytest.mark.slow
def test_every_process_of_the_startup_benchmark_sees_the_callers_pythonpath(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    # imported at start-up by every interpreter that has `site` on its path: one file per process
    (site / "sitecustomize.py").write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(marks)!r}, str(os.getpid())).write_text(' '.join(__import__('sys').argv))\n"
    )
    # as benchmarks/gpu_study.sh sets it on the GPU node: the carried packages, then the repo
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "benchmarks/run_startup.py", "--config", str(TINY), "--rounds", "1", "--time-limit", "900",
                          "--steps", "2"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    argvs = [p.read_text() for p in marks.iterdir()]
    # the benchmark, the warm server, the phases child, the exec'd trainer (the forked one is the server's fork)
    assert sum("--phases-child" in a for a in argvs) == 1, argvs
    assert sum("train_gpt.py" in a for a in argvs) == 1, argvs
    assert sum("launch.warm_start" in a or a.endswith("-m") for a in argvs) >= 1, argvs
    assert "fork/exec" in out.stdout

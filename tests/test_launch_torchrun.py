"""A real 2-process torchrun job on CPU (gloo), through ``python -m launch job --launcher torchrun``."""

from __future__ import annotations

import json
import sys

from launch.__main__ import main
from tests.launch_fixtures.helpers import FAKE_TRAIN_CMD, TINY_BASE, starts


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
    assert (
        f"exec {sys.executable} -m torch.distributed.run --standalone --nnodes=1 --nproc-per-node=2 --no-python "
        in script
    )

"""`launch demo --executor slurm`: the study planner submits job arrays round by round.

sbatch and squeue are stubs; finished runs are simulated by writing their summary.json, so
the test checks the driver (what is submitted when), not SLURM or the trainer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from study.spec import load_study
from study.sweep import AdaptiveSweep
from tests.launch_fixtures.helpers import FAKE_TRAIN_CMD, TINY_BASE, dumping, stub_bin


def _submissions(sweep_dir: Path) -> list[list[str]]:
    return [(f / "runs.txt").read_text().split() for f in sorted((sweep_dir / "slurm").iterdir())]


def test_slurm_rounds_submit_each_run_once_and_follow_the_planner(tmp_path, monkeypatch):
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    live = tmp_path / "squeue_lists"  # squeue prints this file (the live job ids), empty: none
    live.write_text("")
    bin_dir = stub_bin(tmp_path, {"sbatch": dumping("sbatch"), "squeue": f'cat "{live}"'})
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    spec = tmp_path / "demo_sweep.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "quick",
                "base_config": str(TINY_BASE),
                "executor": {"kind": "slurm", "max_parallel": 4, "max_retries": 1, "gpus_per_run": 0},
                "slurm": {"partition": "cpu", "time": "00:30:00"},
            }
        )
    )
    s = load_study("quick")
    sweep_dir = tmp_path / "sweep"

    def driver() -> AdaptiveSweep:  # a fresh process each time, as when the command is rerun
        return AdaptiveSweep(sweep_dir, spec, s, workers=4)

    assert driver().run_slurm(wait=False, poll_s=0) is False
    (first,) = _submissions(sweep_dir)
    assert len(first) == len(s.base_lrs_log2)  # the base depth's scan, trained once for both presets
    assert "#SBATCH --partition=cpu" in next((sweep_dir / "slurm").glob("*/array.sbatch")).read_text()

    live.write_text("4242\n")  # the array is queued: a rerun submits nothing new
    assert driver().run_slurm(wait=False, poll_s=0) is False
    assert len(_submissions(sweep_dir)) == 1

    live.write_text("")
    rounds = 1
    while True:  # finish every submitted run, then let the planner add the next points
        for rid in _submissions(sweep_dir)[-1]:
            rd = sweep_dir / "runs" / rid
            rd.mkdir(parents=True, exist_ok=True)
            summary = {"status": "completed", "final_val_loss": 5.0 + 0.01 * (sum(map(ord, rid)) % 7), "steps": 30}
            (rd / "summary.json").write_text(json.dumps(summary))
        if driver().run_slurm(wait=False, poll_s=0):
            break
        rounds += 1
        assert rounds < 40, "the study did not finish"
    submitted = [rid for sub in _submissions(sweep_dir) for rid in sub]
    assert len(submitted) == len(set(submitted))  # no run submitted twice
    sweep = driver()
    assert sorted(submitted) == sorted(sweep.points.values())  # every planned run went through SLURM
    assert sweep.planner.next_points(sweep.results()) == []
    assert rounds >= len(s.depths)  # a depth's window waits on the previous depth's optimum

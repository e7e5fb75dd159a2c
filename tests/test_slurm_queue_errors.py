"""A ``squeue`` that cannot answer (slurmctld restarting, failing over, or timing out) must stop
a resubmission, not read as "nothing queued": the sweep, the study and data_prep would
otherwise put a second array in the queue for the runs a live one holds.

squeue exits 1 both for a job it forgot and for a controller it cannot reach; a real
controller that times out while ``sbatch`` still works cannot be staged on the one-host test
cluster, so squeue is a stub here (tests/test_slurm_cluster.py checks the real squeue's answers).
"""

from __future__ import annotations

import os

import pytest

from data_prep.api import load_data_prep_config
from data_prep.slurm import submit
from data_prep.stages import DataPrepError
from jobscripts import squeue
from launch.__main__ import main
from tests.launch_fixtures.helpers import derived_spec, dumping, dumps, stub_bin, use_fake_trainer
from tests.test_data_prep_pipeline import planted_inputs, planted_overrides

TIMEOUT = "slurm_load_jobs error: Socket timed out on send/recv operation"


@pytest.fixture
def slurm_stubs(tmp_path, monkeypatch) -> dict:
    """sbatch records its calls (job id 4242); squeue prints the file ``live``, or fails like a
    controller that timed out while the file ``down`` exists."""
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    live, down = tmp_path / "live", tmp_path / "down"
    live.write_text("")
    body = f'if [ -e "{down}" ]; then echo "{TIMEOUT}" >&2; exit 1; fi; cat "{live}"'
    bin_dir = stub_bin(tmp_path, {"sbatch": dumping("sbatch"), "squeue": body})
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    return {"dumps": dump_dir, "live": live, "down": down}


def test_squeue_failure_is_an_error_not_an_empty_queue(slurm_stubs):
    slurm_stubs["live"].write_text("4242\n")
    assert squeue.listed_array_jobs(["4242", "17"]) == {"4242"}
    slurm_stubs["down"].touch()
    with pytest.raises(squeue.QueueError, match="Socket timed out"):
        squeue.listed_array_jobs(["4242"])


def test_sweep_resubmits_nothing_while_squeue_cannot_answer(tmp_path, capsys, monkeypatch, slurm_stubs):
    use_fake_trainer(monkeypatch)
    spec = derived_spec(
        tmp_path,
        grid={"model.num_layers": [2, 4], "optimizer.lr": [0.001]},
        overrides={"training.steps": 12, "parametrization.base_num_layers": 2},
    )
    argv = ["sweep", str(spec), "--sweep-dir", str(tmp_path / "sw"), "--executor", "slurm"]
    assert main(argv) == 0
    slurm_stubs["live"].write_text("4242\n")  # the array is queued, but squeue times out
    slurm_stubs["down"].touch()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert TIMEOUT in err and "nothing was submitted" in err
    assert len(dumps(slurm_stubs["dumps"], "sbatch")) == 1
    assert len(list((tmp_path / "sw" / "slurm").iterdir())) == 1  # no second submission folder
    slurm_stubs["down"].unlink()
    assert main(argv) == 4  # squeue answers again: the runs are in the live array


def test_data_prep_resubmits_nothing_while_squeue_cannot_answer(tmp_path, slurm_stubs):
    raw = tmp_path / "raw"
    planted_inputs(raw)
    cfg = load_data_prep_config(None, [*planted_overrides(raw, tmp_path / "out"), "runtime.slurm.array_tasks=2"])
    assert submit(cfg, dry_run=False) == 0
    calls = len(dumps(slurm_stubs["dumps"], "sbatch"))
    slurm_stubs["live"].write_text("4242\n")
    slurm_stubs["down"].touch()
    with pytest.raises(DataPrepError, match="Socket timed out.*nothing was submitted"):
        submit(cfg, dry_run=False)
    assert len(dumps(slurm_stubs["dumps"], "sbatch")) == calls

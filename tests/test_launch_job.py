"""``launch job``: the generated local/torchrun/SLURM/DeepSpeed scripts, run with stub launchers.

Each script is checked with ``bash -n`` and then executed with ``srun``/``torchrun``/
``deepspeed``/``scontrol``/``sbatch`` replaced by stubs on PATH that record their argv, so
the tests see exactly what a cluster would receive, including a run dir with spaces and quotes.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jobscripts.sbatch import SubmitError, parse_job_id
from launch.__main__ import main
from runconfig.loader import parse_overrides
from tests.launch_fixtures.helpers import (
    DUMP_ARGV,
    FAKE_SRUN,
    FAKE_TRAIN_CMD,
    REPO,
    TINY_BASE,
    dumping,
    dumps,
    env_with,
    stub_bin,
)

WEIRD = 'my run\'s "dir" $HOME `x` #1'  # spaces, both quotes, $, backticks, #


@pytest.fixture
def weird_dir(tmp_path: Path) -> Path:
    return tmp_path / WEIRD


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch) -> Path:
    """Stubs for srun/torchrun/deepspeed/scontrol/sbatch; returns the folder their records go to."""
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    stubs = {
        "srun": f'exec {shlex.quote(sys.executable)} {shlex.quote(str(FAKE_SRUN))} "$@"',
        "scontrol": 'test "$1 $2" = "show hostnames" && printf "node-a\\nnode-b\\n"',
        "torchrun": dumping("torchrun"),
        "deepspeed": dumping("deepspeed"),
        "sbatch": dumping("sbatch"),
    }
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}")
    monkeypatch.setattr("launch.launchers.TORCHRUN", ("torchrun",))  # the stub (scripts call the interpreter's)
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    return dump_dir


def _override(run_dir: Path) -> str:
    return f"run.dir={json.dumps(str(run_dir))}"


def _dry_run(capsys, *argv: str) -> str:
    assert main(["job", *argv, "--dry-run"]) == 0
    script = capsys.readouterr().out
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    return script


def _execute(script: str, tmp_path: Path, **env: str) -> None:
    path = tmp_path / "job.sh"
    path.write_text(script)
    done = subprocess.run(["bash", str(path)], env={**os.environ, **env}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _run_dir_of(argv: list[str]) -> str:
    """The run.dir the trainer will see: parse its overrides as train_gpt.py does."""
    overrides = argv[argv.index("--config") + 2 :]
    return OmegaConf.to_container(parse_overrides(overrides))["run"]["dir"]


# a global batch that splits over every layout below (2 to 16 ranks): a job's layout is checked at submission
SPLIT = ["training.micro_batch_size=1", "training.global_batch_size=48"]
SLURM_ENV = {"SLURM_JOB_NODELIST": "node-a,node-b", "SLURM_JOB_ID": "777", "SLURM_JOB_NUM_NODES": "2"}


def test_slurm_torchrun_mode_rendezvous_on_first_node(tmp_path, capsys, cluster, weird_dir):
    override = _override(weird_dir)
    script = _dry_run(
        capsys, "--config", str(TINY_BASE), override, *SPLIT, "--launcher", "slurm", "--nodes", "2", "--gpus-per-node", "4",
        "--partition", "gpu", "--account", "proj", "--time", "01:00:00", "--sbatch-line=--qos=high",
        "--train-cmd", FAKE_TRAIN_CMD,
    )  # fmt: skip
    for line in ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=4", "--partition=gpu", "--account=proj",
                 "--time=01:00:00", "--signal=TERM@120", "--qos=high", "--job-name=my_run_s__dir___HOME__x___1"):  # fmt: skip
        assert f"#SBATCH {line}\n" in script
    _execute(script, tmp_path, **SLURM_ENV)
    calls = dumps(cluster, "torchrun")
    assert len(calls) == 2  # one torchrun per node
    for call in calls:
        argv = call["argv"]
        assert argv[:6] == [
            "--nnodes=2", "--nproc-per-node=4", "--rdzv-backend=c10d", "--rdzv-endpoint=node-a:29500",
            "--rdzv-id=777", "--no-python",
        ]  # fmt: skip
        assert argv[6:] == [*shlex.split(FAKE_TRAIN_CMD), "--config", str(TINY_BASE), override, *SPLIT]
        assert _run_dir_of(argv) == str(weird_dir)


def test_slurm_srun_mode_maps_slurm_variables_per_task(tmp_path, capsys, cluster, weird_dir):
    trainer = f"{sys.executable} {DUMP_ARGV} trainer"
    script = _dry_run(
        capsys, "--config", str(TINY_BASE), _override(weird_dir), *SPLIT, "--launcher", "slurm", "--slurm-mode", "srun",
        "--nodes", "2", "--gpus-per-node", "4", "--master-port", "12345", "--train-cmd", trainer,
    )  # fmt: skip
    assert "#SBATCH --ntasks-per-node=4\n" in script
    _execute(script, tmp_path, **SLURM_ENV, SLURM_NTASKS_PER_NODE="4")
    calls = dumps(cluster, "trainer")
    assert [c["env"]["RANK"] for c in calls] == [str(r) for r in range(8)]
    for rank, call in enumerate(calls):
        env = call["env"]
        assert (env["WORLD_SIZE"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("8", str(rank % 4), "4")
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("node-a", "12345")
        assert call["argv"] == ["--config", str(TINY_BASE), _override(weird_dir), *SPLIT]
        assert _run_dir_of(call["argv"]) == str(weird_dir)


def test_slurm_submission_keeps_script_and_parses_job_id(tmp_path, cluster):
    run_dir = tmp_path / "100% run"
    assert main(["job", "--config", str(TINY_BASE), _override(run_dir), "--launcher", "slurm"]) == 0
    (script,) = (run_dir / "launch").glob("slurm-*.sbatch")  # this submission's own
    (call,) = dumps(cluster, "sbatch")
    assert call["argv"] == ["--parsable", f"--output={tmp_path}/100%% run/launch/slurm-%j.out", str(script)]
    record = json.loads((run_dir / "launch" / "slurm_job.json").read_text())
    assert (record["job_id"], record["script"]) == ("4242", str(script))
    assert (run_dir / "launch" / "slurm.sbatch").read_text() == script.read_text()  # the latest's, as before


def test_each_slurm_submission_keeps_its_own_script_and_an_old_queued_job_is_not_taken_for_a_new_one(
    tmp_path, cluster, monkeypatch
):
    """A second `launch job --launcher slurm` of the same run, the first job still queued, and the
    controller loses sbatch's answer: squeue lists the first job (4242) under its script. The new
    submission must not be taken for it: it is found by its own script only (none: sbatch again,
    job 5151), and both submissions keep their script and record."""
    run_dir = tmp_path / "run"
    argv = ["job", "--config", str(TINY_BASE), _override(run_dir), "--launcher", "slurm"]
    assert main(argv) == 0
    first = json.loads((run_dir / "launch" / "slurm_job.json").read_text())
    lost = tmp_path / "lost_once"
    stubs = {
        "sbatch": f'[ -e "{lost}" ] && {{ echo 5151; exit 0; }}; touch "{lost}"; '
        'echo "sbatch: error: Socket timed out on send/recv operation" >&2; exit 1',
        "squeue": f'echo "4242|{first["script"]}"',  # the first job, still queued
    }
    stub_bin(tmp_path, stubs)
    monkeypatch.setattr("jobscripts.slurm_cli.RETRY_DELAYS_S", (0.0, 0.0, 0.0))
    assert main(argv) == 0
    second = json.loads((run_dir / "launch" / "slurm_job.json").read_text())
    assert (first["job_id"], second["job_id"]) == ("4242", "5151")
    assert first["script"] != second["script"] and Path(first["script"]).is_file() and Path(second["script"]).is_file()
    records = sorted(json.loads(p.read_text())["job_id"] for p in (run_dir / "launch").glob("slurm_job-*.json"))
    assert records == ["4242", "5151"]


def _remote_argv(user_script: str, user_args: list[str]) -> list[str]:
    """What the remote node runs after DeepSpeed's pdsh runner and the remote shell."""
    from deepspeed.launcher.multinode_runner import PDSHRunner

    runner = types.SimpleNamespace(args=types.SimpleNamespace(user_args=user_args))
    line = " ".join([user_script, *PDSHRunner.parse_user_args(runner)])  # pdsh joins; ssh runs it in a shell
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, text=True, check=True)
    return done.stdout.split("\0")[:-1]


def test_deepspeed_multi_node_pdsh_delivers_arguments_intact(tmp_path, capsys, cluster, weird_dir):
    hostfile = tmp_path / "my hosts"
    hostfile.write_text("# two nodes\nnode-a slots=8\nnode-b slots=8\n")
    script = _dry_run(
        capsys, "--config", str(TINY_BASE), _override(weird_dir), *SPLIT, "--launcher", "deepspeed", "--nodes", "2",
        "--gpus-per-node", "8", "--hostfile", str(hostfile), "--master-addr", "node-a", "--train-cmd", FAKE_TRAIN_CMD,
    )  # fmt: skip
    _execute(script, tmp_path)
    (call,) = dumps(cluster, "deepspeed")
    argv = call["argv"]
    assert argv[:8] == [
        "--hostfile", str(hostfile), "--num_nodes=2", "--num_gpus=8", "--master_addr=node-a", "--master_port=29500",
        "--no_local_rank", "--no_python",
    ]  # fmt: skip
    train = [*shlex.split(FAKE_TRAIN_CMD), "--config", str(TINY_BASE), _override(weird_dir), *SPLIT]
    remote = _remote_argv(argv[8], argv[9:])
    assert remote[2:] == train
    assert _run_dir_of(remote) == str(weird_dir)
    # DeepSpeed passes on only some variables (NCCL*, PYTHON*, ..., .deepspeed_env) to other
    # nodes' ranks: this attempt's exit file (where a locked-out rank says its 4) travels in
    # the command line, to every backend (before: rank 0 on another node never saw it)
    assert remote[0] == "env" and remote[1].startswith("DEPTHMUP_ATTEMPT_EXIT=")
    own = Path(remote[1].split("=", 1)[1])
    assert own.parent == weird_dir / "launch" and own.name.startswith("exit-") and own.suffix == ".json"
    probe = [sys.executable, "-c", "import os; print(os.environ['DEPTHMUP_ATTEMPT_EXIT'])"]
    assert subprocess.run([*remote[:2], *probe], capture_output=True, text=True).stdout == f"{own}\n"

    hostfile.write_text("node-a slots=8\n")
    assert main(["job", "--config", str(TINY_BASE), "--launcher", "deepspeed", "--nodes", "2",
                 "--hostfile", str(hostfile), "--dry-run"]) == 2  # fmt: skip
    assert "lists 1 host(s), --nodes asks for 2" in capsys.readouterr().err


def test_deepspeed_other_backends_get_plain_arguments(tmp_path, capsys, cluster, weird_dir):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a slots=8\nnode-b slots=8\n")
    script = _dry_run(
        capsys, "--config", str(TINY_BASE), _override(weird_dir), "--launcher", "deepspeed", "--nodes", "2",
        "--hostfile", str(hostfile), "--deepspeed-launcher", "openmpi",
    )  # fmt: skip
    _execute(script, tmp_path)
    (call,) = dumps(cluster, "deepspeed")
    assert "--launcher=openmpi" in call["argv"] and _run_dir_of(call["argv"]) == str(weird_dir)
    i = call["argv"].index("--no_python")
    assert call["argv"][i + 1] == "env" and call["argv"][i + 2].startswith(
        f"DEPTHMUP_ATTEMPT_EXIT={weird_dir}/launch/exit-"
    )


def test_deepspeed_single_node_passes_any_argument(tmp_path, capsys, cluster, weird_dir):
    script = _dry_run(capsys, "--config", str(TINY_BASE), _override(weird_dir), "--launcher", "deepspeed",
                      "--gpus-per-node", "2")  # fmt: skip
    _execute(script, tmp_path)
    (call,) = dumps(cluster, "deepspeed")
    assert call["argv"][:4] == ["--num_gpus=2", "--master_port=29500", "--no_local_rank", "--no_python"]
    assert _run_dir_of(call["argv"]) == str(weird_dir)


def test_torchrun_multi_node_needs_master_addr(tmp_path, capsys, cluster):
    base = [
        "job",
        "--config",
        str(TINY_BASE),
        _override(tmp_path / "r"),
        *SPLIT,
        "--launcher",
        "torchrun",
        "--nodes",
        "2",
    ]
    assert main([*base, "--dry-run"]) == 2
    assert "needs --master-addr" in capsys.readouterr().err
    script = _dry_run(capsys, *base[1:], "--nproc-per-node", "3", "--master-addr", "10.0.0.1", "--rdzv-id", "exp 1")
    _execute(script, tmp_path)
    (call,) = dumps(cluster, "torchrun")
    assert call["argv"][:6] == [
        "--nnodes=2", "--nproc-per-node=3", "--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:29500",
        "--rdzv-id=exp 1", "--no-python",
    ]  # fmt: skip


def test_local_job_runs_the_trainer_and_keeps_its_script(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_STEP_SECONDS", "0")
    run_dir = tmp_path / WEIRD
    assert main(["job", "--config", str(TINY_BASE), _override(run_dir), "training.steps=8",
                 "--train-cmd", FAKE_TRAIN_CMD]) == 0  # fmt: skip
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    assert "training.steps=8" in (run_dir / "launch" / "local.sh").read_text()


def test_job_with_a_bad_key_exits_2_before_anything_runs(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert main(["job", "--config", str(TINY_BASE), _override(run_dir), "model.num_layerz=3"]) == 2
    err = capsys.readouterr().err
    assert "key 'model.num_layerz'" in err
    assert not run_dir.exists()
    assert main(["job", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_parse_job_id():
    assert parse_job_id("123\n") == "123"
    assert parse_job_id("456;cluster-a\n") == "456"
    assert parse_job_id("Submitted batch job 789\n") == "789"
    with pytest.raises(SubmitError):
        parse_job_id("sbatch: error: invalid partition\n")


def test_child_gets_sigterm_when_launcher_is_sigkilled(tmp_path):
    marker, ready = tmp_path / "got_sigterm", tmp_path / "ready"
    child = (
        "import signal, sys, time, pathlib\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(marker)!r}).write_text('75'), sys.exit(75)))\n"
        f"pathlib.Path({str(ready)!r}).write_text('')\n"
        "time.sleep(120)\n"
    )
    parent = (
        f"import sys\nfrom launch.processes import start_child\nstart_child([sys.executable, '-c', {child!r}]).wait()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], cwd=REPO, env=env_with())
    deadline = time.time() + 60
    while not ready.exists():  # the child runs and has its handler
        assert time.time() < deadline, "child did not start"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    while not marker.exists():
        assert time.time() < deadline, "the orphaned child never got SIGTERM"
        time.sleep(0.05)
    assert marker.read_text() == "75"


# ----------------------------------------------------------------------------- the data, before any rank


def test_a_torchrun_job_with_a_missing_manifest_exits_2_with_one_line_and_starts_no_rank(tmp_path):
    """The docs' `launch job ... data.manifest=/data/cc --launcher torchrun` with a typo in the path, on
    CPU with 2 ranks and the real train_gpt.py. Before: torchrun started both ranks, each printed
    "data.manifest: ... does not exist", torchrun added its ChildFailedError traceback, and the run
    directory held launch/torchrun.sh. Now launch runs the trainer's data check first: exit 2, the one
    line, nothing started or written."""
    missing, run_dir = tmp_path / "cc", tmp_path / "run"
    env = {k: v for k, v in env_with(OMP_NUM_THREADS="1").items() if k != "DEPTHMUP_TRAIN_CMD"}
    argv = ["job", "--config", str(TINY_BASE), f"data.manifest={missing}", f"run.dir={run_dir}",
            "--launcher", "torchrun", "--nproc-per-node", "2"]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "launch", *argv], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert (done.returncode, done.stderr.splitlines()) == (2, [f"error: data.manifest: {missing} does not exist"])
    assert done.stdout == ""
    assert not run_dir.exists()


def test_a_torchrun_job_with_good_data_starts_its_ranks(tmp_path, monkeypatch):
    """The same job on a real manifest (megatron .bin/.idx, vocabulary 512 as the config's) passes the
    check and runs both ranks: they all-reduce their rank + 1 over gloo, 1 + 2 = 3."""
    from tests.test_training_data_checks import good

    monkeypatch.setenv("FAKE_STEP_SECONDS", "0")
    data, run_dir = good(tmp_path / "data"), tmp_path / "run"
    argv = ["job", "--config", str(TINY_BASE), f"data.manifest={data}", f"run.dir={run_dir}", "training.steps=8",
            "--launcher", "torchrun", "--nproc-per-node", "2", "--train-cmd", FAKE_TRAIN_CMD]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((run_dir / "dist.json").read_text()) == {"world_size": 2, "all_reduce_sum": 3.0}
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"


def test_a_slurm_job_warns_of_data_this_host_cannot_see_and_refuses_data_it_sees_broken(tmp_path, capsys, cluster):
    """SLURM's ranks run on compute nodes, which may mount storage the login node does not: a path the
    config names that does not exist here is a warning and the job is submitted. Data this host sees
    is checked as the trainer checks it: a manifest whose train.bin is gone, or whose vocabulary is not
    model.vocab_size, is exit 2 naming the key and the file, nothing submitted or written."""
    from tests.test_training_data_checks import good

    slurm = ["--launcher", "slurm", "--nodes", "1", "--nproc-per-node", "2"]

    def job(name: str, *overrides: str) -> tuple[int, Path]:
        run_dir = tmp_path / name
        return main(["job", "--config", str(TINY_BASE), f"run.dir={run_dir}", *overrides, *slurm]), run_dir

    missing = tmp_path / "only_on_the_nodes" / "cc"
    code, run_dir = job("unseen", f"data.manifest={missing}")
    assert code == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (f"[launch] warning: data.manifest: {missing}: not found from this host, so the data was not "
                      "checked; the job's nodes must see it (a typo fails there, exit 2)")  # fmt: skip
    assert len(dumps(cluster, "sbatch")) == 1
    assert f"data.manifest={missing}" in (run_dir / "launch" / "slurm.sbatch").read_text()

    data = good(tmp_path / "data")
    code, run_dir = job("vocab", f"data.manifest={data}", "model.vocab_size=256")
    assert code == 2 and not run_dir.exists()
    assert capsys.readouterr().err.splitlines() == [
        "error: model.vocab_size: 256 disagrees with the data's tokenizer (512); "
        "set model.vocab_size=null to take the tokenizer's"
    ]
    (data / "train.bin").unlink()
    code, run_dir = job("no_bin", f"data.manifest={data}")
    assert code == 2 and not run_dir.exists()
    assert capsys.readouterr().err.splitlines() == [f"error: data.manifest: {data / 'train.bin'} does not exist"]
    assert len(dumps(cluster, "sbatch")) == 1  # the first job's only

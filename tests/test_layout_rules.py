"""A parallel layout that cannot run is refused where it is asked for, exit 2 naming the key:
the config's own tensor-parallel splits (runconfig.validate.validate), the world a job or a
sweep's runs get (validate_layout: ``launch job``, ``launch sweep``, and the trainer before its
process group), and a CUDA config submitted without GPUs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launch.__main__ import main
from tests.conftest import REPO, TINY, env
from tests.launch_fixtures.helpers import derived_spec

MOCK = ["data.mock=true", "model.vocab_size=50257"]


def load(*overrides: str):
    from runconfig import load_config
    from runconfig.schema import RunConfig

    return load_config(RunConfig, REPO / "configs" / "gpt_350m_multinode.yaml", [*MOCK, *overrides])


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["parallel.tensor_model_parallel_size=3"], "model.num_attention_heads: 16 is not divisible by"),
        (["parallel.tensor_model_parallel_size=4", "model.num_query_groups=2"], "model.num_query_groups: 2 is not"),
        (["parallel.tensor_model_parallel_size=2", "model.ffn_hidden_size=4097"], "model.ffn_hidden_size: 4097 is"),
        (["parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true", "model.seq_length=2047"],
         "model.seq_length: 2047 is not divisible by parallel.tensor_model_parallel_size=2"),
    ],
)  # fmt: skip
def test_tensor_parallel_splits_are_checked_with_the_config(overrides, message):
    with pytest.raises(Exception, match=message):
        load(*overrides)


def test_the_same_splits_pass_when_they_divide():
    load("parallel.tensor_model_parallel_size=2", "parallel.sequence_parallel=true")  # 16 heads, 4096, 2048
    load("parallel.tensor_model_parallel_size=4", "model.num_query_groups=4")


def test_a_world_must_hold_tp_x_pp_and_split_the_global_batch():
    from runconfig.validate import validate_layout

    cfg = load()  # global batch 256, micro-batch 8
    validate_layout(cfg, 32)  # DP 32: one micro-batch per rank per step
    with pytest.raises(ValueError, match=r"256 is not a multiple of .* = 8 x 24"):
        validate_layout(cfg, 24)
    tp2 = load("parallel.tensor_model_parallel_size=2")
    validate_layout(tp2, 32)  # DP 16: two micro-batches
    with pytest.raises(ValueError, match=r"world size 5 is not divisible by tensor \(2\) x pipeline \(1\)"):
        validate_layout(tp2, 5)


def test_pipeline_parallelism_splits_the_layers_and_takes_its_share_of_the_world():
    """PP must divide the layers (the config alone), and the world must hold TP x PP, the rest
    being data-parallel ranks that split the global batch into whole micro-batches."""
    from runconfig.validate import validate_layout

    with pytest.raises(
        Exception, match=r"parallel.pipeline_model_parallel_size: 5 does not divide model.num_layers=24"
    ):
        load("parallel.pipeline_model_parallel_size=5")
    pp3 = load("parallel.pipeline_model_parallel_size=3")  # 24 layers: 8 per stage
    with pytest.raises(ValueError, match=r"world size 32 is not divisible by tensor \(1\) x pipeline \(3\)"):
        validate_layout(pp3, 32)
    validate_layout(pp3, 24)  # DP 8: 256 / (8 x 8) = 4 micro-batches per rank per step
    tp2pp2 = load("parallel.tensor_model_parallel_size=2", "parallel.pipeline_model_parallel_size=2")
    validate_layout(tp2pp2, 32)  # DP 8
    with pytest.raises(ValueError, match=r"256 is not a multiple of .* = 8 x 6$"):
        validate_layout(tp2pp2, 24)  # DP 24 / (2 x 2) = 6


@pytest.mark.parametrize(
    "args,message",
    [
        (["--nodes", "3", "--gpus-per-node", "8"], "on 3 node(s) x 8 process(es): training.global_batch_size: 256"),
        (["--nodes", "3", "--gpus-per-node", "8"], "gpt_350m_multinode.yaml: on 3 node(s)"),  # the file's layout
        (
            ["--nodes", "4", "--gpus-per-node", "8", "training.micro_batch_size=16"],
            "gpt_350m_multinode.yaml with training.micro_batch_size=16 (command line): on 4 node(s) x 8 process(es): "
            "training.global_batch_size: 256 is not a multiple of training.micro_batch_size x data-parallel size = 16 x 32",
        ),
        (["--nodes", "4"], "--gpus-per-node: "),
    ],
)
def test_launch_job_refuses_a_layout_before_it_is_submitted(args, message, capsys):
    argv = ["job", "--config", str(REPO / "configs" / "gpt_350m_multinode.yaml"), *MOCK, "--launcher", "slurm"]
    assert main([*argv, *args, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_a_tensor_parallel_job_gets_one_cuda_connection(capsys):
    argv = ["job", "--config", str(REPO / "configs" / "gpt_350m_multinode.yaml"), *MOCK, "--launcher", "slurm",
            "--nodes", "4", "--gpus-per-node", "8", "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in capsys.readouterr().out
    assert main([*argv, "parallel.tensor_model_parallel_size=2"]) == 0
    assert "\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n" in capsys.readouterr().out


def test_a_sweep_whose_runs_cannot_split_over_their_gpus_is_refused(tmp_path, capsys):
    executor = {"kind": "local", "gpus_per_run": 3}  # tiny_cpu: global batch 8, micro-batch 4
    spec = derived_spec(tmp_path, executor=executor, overrides={"parallel.device": "auto"})
    assert main(["sweep", str(spec), "--sweep-dir", str(tmp_path / "sw"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "with executor.gpus_per_run=3: training.global_batch_size: 8 is not a multiple of" in err
    assert not (tmp_path / "sw").exists()


def test_the_trainer_refuses_its_world_before_a_process_group_exists(tmp_path):
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={tmp_path / 'r'}",
           "parallel.tensor_model_parallel_size=2", "logging.progress_bar=false"]  # fmt: skip
    out = subprocess.run(cmd, cwd=REPO, env={**env(), "WORLD_SIZE": "3"}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "world size 3 is not divisible by tensor (2) x pipeline (1)" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_gpu_job_that_asks_for_no_cpus_is_warned_of(capsys, monkeypatch):
    from jobscripts.scripts import SlurmOptions, cpu_request_note
    from launch import launchers

    # torch < 2.12's torchrun adds its own warning (the grace: tests/test_launch_torchrun.py)
    monkeypatch.setattr(launchers, "torchrun_honours_grace", lambda: True)

    argv = ["job", "--config", str(REPO / "configs" / "gpt_350m_multinode.yaml"), *MOCK, "--launcher", "slurm",
            "--nodes", "4", "--gpus-per-node", "8", "--dry-run"]  # fmt: skip
    assert main(argv) == 0
    assert "warning: the job asks for 8 GPU(s) and SLURM's default CPUs per task" in capsys.readouterr().err
    assert main([*argv, "--cpus-per-task", "64", "--mem", "0"]) == 0
    out, err = capsys.readouterr()
    assert "warning" not in err
    assert "#SBATCH --mem=0\n" in out and "#SBATCH --cpus-per-task=64\n" in out
    assert cpu_request_note(SlurmOptions(sbatch_lines=["--exclusive"]), 8) is None
    assert cpu_request_note(SlurmOptions(), 0) is None  # a CPU job: its default is its own business


def test_a_bad_value_is_blamed_on_where_it_was_given(tmp_path):
    from runconfig import ConfigError, load_config
    from runconfig.schema import RunConfig

    with pytest.raises(ConfigError, match=r"^command-line overrides: optimizer.lr: must be a positive"):
        load_config(RunConfig, TINY, ["optimizer.lr=-1"])  # tiny_cpu.yaml holds a good lr
    bad = tmp_path / "bad.yaml"
    bad.write_text("optimizer:\n  lr: -1\n")
    with pytest.raises(ConfigError, match=rf"^{bad}: optimizer.lr: must be a positive"):
        load_config(RunConfig, bad)
    # a refusal that quotes the value ("key=value: why") is blamed the same way
    with pytest.raises(ConfigError, match=r"^command-line overrides: parametrization.width=yaida: Yaida's family"):
        load_config(RunConfig, TINY, ["parametrization.width=yaida", "parametrization.yaida_s=0.5"])
    # a cross-key check is blamed on where any key it names was last set: the heads, given on the
    # command line, not the file's hidden size the message starts with
    with pytest.raises(
        ConfigError, match=r"^command-line overrides: model.hidden_size: 64 is not divisible by model.n"
    ):
        load_config(RunConfig, TINY, ["model.num_attention_heads=5"])
    heads = tmp_path / "heads.yaml"
    heads.write_text(TINY.read_text().replace("num_attention_heads: 4", "num_attention_heads: 5"))
    with pytest.raises(ConfigError, match=rf"^{heads}: model.hidden_size: 64 is not divisible by model.num_att"):
        load_config(RunConfig, heads, ["optimizer.lr=0.01"])


def test_the_loader_owns_which_keys_the_command_line_set():
    """``launch job`` names the layout keys a refused layout got from the command line through
    ``runconfig.loader.overridden``, the reader ``_blamed`` uses for load-time refusals; launch
    parses no override itself."""
    import launch.job
    from runconfig.loader import overridden

    keys = ("parallel.tensor_model_parallel_size", "training.micro_batch_size", "training.global_batch_size")
    given = ["training.micro_batch_size=16", "run.dir=x", "parallel={tensor_model_parallel_size: 2}"]
    assert overridden(keys, given) == ["parallel.tensor_model_parallel_size=2", "training.micro_batch_size=16"]
    assert overridden(keys, []) == []
    assert not {"parse_overrides", "flatten", "OmegaConf"} & set(vars(launch.job))

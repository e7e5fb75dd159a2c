"""Overrides written as options (torchtitan's ``--optimizer.lr=3e-4``, Megatron-LM's
``--num-layers 8``) exit 2 with the ``key=value`` override to write instead, on every command
that takes overrides; other unknown options keep argparse's plain message."""

from __future__ import annotations

import pytest

import train_gpt
from data_prep.__main__ import main as data_prep_main
from launch.__main__ import main as launch_main
from runconfig import override_hint
from runconfig.schema import RunConfig
from tests.conftest import REPO, TINY
from training.show import main as show_main

HINT = "config overrides are dotted key=value arguments without dashes: write "
SWEEP = REPO / "configs" / "sweeps" / "tiny_cpu.yaml"
DATA_PREP = REPO / "configs" / "data_prep" / "tiny_demo.yaml"


def _exit_2(capsys, call) -> str:
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["--optimizer.lr=3e-4"], "optimizer.lr=3e-4"),
        (["--optimizer.lr", "3e-4"], "optimizer.lr=3e-4"),
        (["--model.num-layers=8"], "model.num_layers=8"),
        (["--num-layers"], "model.num_layers=VALUE"),
        (["--lr", "1e-3", "--hidden-size"], "optimizer.lr=1e-3, model.hidden_size=VALUE"),
        (["--seed", "3"], "data.seed=3 or run.seed=3"),
    ],
)
def test_hint_names_the_override(tokens, expected):
    assert override_hint(tokens, RunConfig) == HINT + expected


def test_no_hint_for_options_that_name_no_key():
    assert override_hint(["--bogus", "1"], RunConfig) is None
    assert override_hint(["stray"], RunConfig) is None
    assert override_hint(["--num-layers"], None) is None  # no schema: only dotted options are keys


def test_train_gpt(capsys):
    err = _exit_2(capsys, lambda: train_gpt.main(["--config", str(TINY), "--optimizer.lr=1e-3"]))
    assert err.endswith("unrecognized arguments: --optimizer.lr=1e-3\n" + HINT + "optimizer.lr=1e-3\n")
    err = _exit_2(capsys, lambda: train_gpt.main(["--config", str(TINY), "--bogus"]))
    assert err.endswith("unrecognized arguments: --bogus\n")


def test_training_show(capsys):
    err = _exit_2(capsys, lambda: show_main(["--config", str(TINY), "--num-layers", "8"]))
    assert err.endswith(HINT + "model.num_layers=VALUE\n")  # argparse took 8 as an override


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["job", "--config", str(TINY), "--dry-run", "--optimizer.lr=1e-3"], "optimizer.lr=1e-3"),
        (["job", "--config", str(TINY), "--hidden-size", "128", "--dry-run"], "model.hidden_size=128"),
        (["sweep", str(SWEEP), "--executor.max_parallel=3", "--dry-run"], "executor.max_parallel=3"),
    ],
)
def test_launch(capsys, argv, expected):
    assert _exit_2(capsys, lambda: launch_main(argv)).endswith(HINT + expected + "\n")


def test_launch_status_takes_no_overrides(capsys, tmp_path):
    err = _exit_2(capsys, lambda: launch_main(["status", str(tmp_path), "--optimizer.lr=1"]))
    assert err.endswith("unrecognized arguments: --optimizer.lr=1\n")


def test_data_prep(capsys):
    err = _exit_2(capsys, lambda: data_prep_main(["--config", str(DATA_PREP), "--runtime.workers=3"]))
    assert err.endswith(HINT + "runtime.workers=3\n")

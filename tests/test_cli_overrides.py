"""Overrides written as options (torchtitan's ``--optimizer.lr=3e-4``, Megatron-LM's
``--num-layers 8``) exit 2 with the ``key=value`` override to write instead, on every command
that takes overrides; other unknown options keep argparse's plain message."""

from __future__ import annotations

import re

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
        (["--make-vocab-size-divisible-by", "8"], "model.make_vocab_size_divisible_by=8"),
        # Megatron-LM flags whose key has another name (runconfig/megatron_args.py)
        (["--train-iters", "10"], "training.steps=10 (Megatron-LM's --train-iters)"),
        (["--bf16"], "training.precision=bf16 (Megatron-LM's --bf16)"),
        (
            ["--min-lr", "1e-5"],
            "optimizer.min_lr_ratio=VALUE (Megatron-LM's --min-lr: --min-lr / --lr; "
            "each group decays to that fraction of its own peak)",
        ),
        (
            ["--optimizer", "adam"],
            "optimizer.name=adamw (Megatron-LM's --optimizer: its adam decouples weight decay, which is adamw here; "
            "adam here adds the decay to the gradient (L2))",
        ),
        (["--lr-decay-iters", "9"], "nothing for Megatron-LM's --lr-decay-iters (the LR decays over training.steps)"),
        # Megatron-LM spells this one with dashes and an underscore: the hint names it so
        (
            ["--override-opt_param-scheduler"],
            "checkpoint.init_mode=continue (Megatron-LM's --override-opt_param-scheduler: ",
        ),
    ],
)
def test_hint_names_the_override(tokens, expected):
    hint = override_hint(tokens, RunConfig)
    assert hint == HINT + expected or (expected.endswith(": ") and hint.startswith(HINT + expected)), hint


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
    assert err.endswith(HINT + "model.num_layers=8\n")  # argparse took 8 as an override: read from argv


def test_train_gpt_finds_the_value_argparse_took_as_an_override(capsys):
    # ``--lr 3e-4``: 3e-4 went to the key=value positionals; the hint said optimizer.lr=VALUE
    err = _exit_2(capsys, lambda: train_gpt.main(["--config", str(TINY), "--lr", "3e-4"]))
    assert err.endswith(HINT + "optimizer.lr=3e-4\n")
    err = _exit_2(capsys, lambda: train_gpt.main(["--config", str(TINY), "--train-iters", "20", "--bf16"]))
    assert err.endswith(
        HINT + "training.steps=20 (Megatron-LM's --train-iters), training.precision=bf16 (Megatron-LM's --bf16)\n"
    )


@pytest.mark.parametrize(
    ("override", "note"),
    [
        ("training.train_iters=10", "Not in 'TrainingConfig'; Megatron-LM's --train-iters is training.steps here"),
        ("optimizer.min_lr=1e-5", "? Megatron-LM's --min-lr is optimizer.min_lr_ratio here (--min-lr / --lr; "),
        ("scheduler.lr_decay_iters=5", "Megatron-LM's --lr-decay-iters has no key here (the LR decays over training"),
    ],
)
def test_a_key_with_megatron_lm_name_names_the_key_that_holds_it(override, note):
    from runconfig import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config(RunConfig, TINY, [override])
    assert note.lower() in str(err.value).lower()


def test_the_megatron_lm_table_speaks_only_of_the_run_config(capsys):
    from data_prep.config import DataPrepConfig
    from runconfig import ConfigError, load_config

    assert override_hint(["--train-iters", "10", "--save", "x"], DataPrepConfig) is None
    err = _exit_2(capsys, lambda: data_prep_main(["--config", str(DATA_PREP), "--save", "x"]))
    assert err.endswith("unrecognized arguments: --save\n")
    with pytest.raises(ConfigError) as exc:
        load_config(DataPrepConfig, DATA_PREP, ["output.min_lr=3"])
    assert "Megatron-LM" not in str(exc.value)


def test_the_megatron_lm_table_names_real_keys_and_matches_the_docs():
    from runconfig.loader import schema_keys
    from runconfig.megatron_args import MEGATRON_LM_ARGS

    keys = set(schema_keys(RunConfig))
    last_parts = {k.rsplit(".", 1)[-1] for k in keys}
    for name, arg in MEGATRON_LM_ARGS.items():
        assert arg.key is None or arg.key in keys, name
        assert name not in last_parts, f"--{name} is a key's last part: the schema lookup finds it first"
    doc = (REPO / "docs" / "megatron-integration.md").read_text()
    rows = {}
    for line in doc.split("## Coming from Megatron-LM")[1].splitlines():
        if line.startswith("| `--"):
            flag, here, note = (c.strip() for c in line.strip("|").split("|"))
            name = flag.strip("`")[2:].replace("-", "_")
            assert flag.strip("`") == MEGATRON_LM_ARGS[name].flag(name), flag  # Megatron-LM's spelling
            rows[name] = (here, note)
    expected = {
        name: (
            "(none)" if arg.key is None else f"`{arg.key}{'=' + arg.value if arg.value else ''}`",
            arg.note,
        )
        for name, arg in MEGATRON_LM_ARGS.items()
    }
    assert rows == expected
    # the flags the docs say map to the key of the same last part do, to one key each
    listed = doc.split("A flag whose name is a\nkey's last part maps to that key:")[1].split("`--seed`")[0]
    flags = re.findall(r"`--([a-z0-9-]+)`", listed)
    assert len(flags) == 33, flags
    for flag in flags:
        assert sum(k == flag.replace("-", "_") for k in last_parts) == 1, flag
        assert len([k for k in keys if k.rsplit(".", 1)[-1] == flag.replace("-", "_")]) == 1, flag


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

"""Every entry point's --help states each option's default (jobscripts.cli.state_defaults):
argparse prints one only where the help text spells it out."""

from __future__ import annotations

import argparse

import pytest

from data_prep.__main__ import _parser as data_prep_parser
from eval.__main__ import build_parser as eval_parser
from jobscripts.cli import _STATES_DEFAULT, state_defaults
from launch.__main__ import _parser as launch_parser
from training.export_hf import build_parser as export_parser


def _options(parser: argparse.ArgumentParser, path: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif action.option_strings and action.help != argparse.SUPPRESS:
            yield path.strip(), action


@pytest.mark.parametrize(
    "build",
    [launch_parser, eval_parser, data_prep_parser, export_parser],
    ids=["launch", "eval", "data_prep", "export"],
)
def test_every_default_is_in_the_help(build):
    missing = []
    for where, action in _options(build()):
        default = action.default
        if default is None or default is False or default == [] or default is argparse.SUPPRESS:
            continue
        text = action.help or ""
        shown = " ".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)
        if f"(default: {shown})" not in text and text != f"default: {shown}" and not _STATES_DEFAULT.search(text):
            missing.append(f"{where} {action.option_strings[0]}={default!r}: {text!r}")
    assert not missing, "\n".join(missing)


def test_launch_job_help_lines():
    job = next(a for a in launch_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["job"]
    text = " ".join(job.format_help().split())  # argparse wraps lines at the terminal width
    assert "--master-port MASTER_PORT default: 29500" in text
    assert "--launcher {local,torchrun,slurm,deepspeed} default: local" in text
    assert "--signal-grace SIGNAL_GRACE SIGTERM this many s before the time limit (default: 120)" in text
    assert "(default: the job name)" in text and "(default: the job name) (default" not in text  # stated once


def test_demo_out_help_names_the_default_of_every_study():
    """--out's default is demo_out/<study name>[_<corpus>] (study/cli.py), not only demo or demo_quick."""
    demo = next(a for a in launch_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["demo"]
    text = " ".join(demo.format_help().split())
    assert "(default: demo_out/<the study's name>, plus _<corpus> off kjv: demo_out/demo," in text


def test_state_defaults_leaves_what_has_nothing_to_state():
    p = argparse.ArgumentParser()
    p.add_argument("--a", default=None, help="no default")
    p.add_argument("--b", action="store_true", help="a switch")
    p.add_argument("--c", action="append", default=[], help="repeatable")
    p.add_argument("--d", type=int, default=3, help="has one (default 3)")
    p.add_argument("--e", default="50%", help="percent")
    p.add_argument("pos", nargs="?", default="x", help="positional")
    state_defaults(p)
    helps = {a.dest: a.help for a in p._actions}
    assert helps["a"] == "no default" and helps["b"] == "a switch" and helps["c"] == "repeatable"
    assert helps["d"] == "has one (default 3)" and helps["pos"] == "positional"
    assert helps["e"] == "percent (default: 50%%)"
    assert "percent (default: 50%)" in p.format_help()  # argparse's %-expansion gives the % back


def test_testdata_help_fetches_nothing(monkeypatch, capsys):
    """`python -m data_prep.testdata -h` ran every pinned download and printed the paths."""
    import data_prep.testdata as testdata

    def fetch():
        raise AssertionError("-h fetched the sample files")

    monkeypatch.setattr(testdata, "dolma_files", fetch)
    with pytest.raises(SystemExit) as exc:
        testdata.main(["-h"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: python -m data_prep.testdata [-h]")
    with pytest.raises(SystemExit) as exc:
        testdata.main(["--bogus"])
    assert exc.value.code == 2


# Every command line of the toolkit: (module whose main() takes argv, subcommand, usage prefix).
COMMANDS = [
    *[("launch.__main__", [sub], f"python -m launch {sub}") for sub in ("job", "sweep", "run", "status", "demo")],
    *[
        ("eval.__main__", [sub], f"python -m eval {sub}")
        for sub in ("transfer", "coord-check", "diversity", "dynamics", "lm-eval")
    ],
    ("launch.__main__", [], "python -m launch"),
    ("eval.__main__", [], "python -m eval"),
    ("data_prep.__main__", [], "python -m data_prep"),
    ("train_gpt", [], "train_gpt.py"),
    ("training.show", [], "python -m training.show"),
    ("training.export_hf", [], "python -m training.export_hf"),
    ("data_prep.costs", [], "python -m data_prep.costs"),
    ("data_prep.registry_corpora", [], "python -m data_prep.registry_corpora"),
    ("data_prep.neardup_corpus", [], "python -m data_prep.neardup_corpus"),
    ("jobscripts.requeue", [], "python -m jobscripts.requeue"),
]


def _exit_code(call) -> int:
    try:
        code = call()
    except SystemExit as exc:
        code = exc.code
    return int(code or 0)


@pytest.mark.parametrize("module,sub,usage", COMMANDS, ids=[" ".join([m, *s]) for m, s, _ in COMMANDS])
def test_help_exits_0_and_a_bad_option_2_writing_nothing(module, sub, usage, tmp_path, monkeypatch, capsys):
    """`python -m data_prep.neardup_corpus --help` wrote its 5.7 MB corpus to a file named
    `--help` and exited 0 (its main took any one argument as the output path)."""
    import importlib

    main = importlib.import_module(module).main
    monkeypatch.chdir(tmp_path)
    assert _exit_code(lambda: main([*sub, "--help"])) == 0
    assert capsys.readouterr().out.startswith(f"usage: {usage} [-h]")
    assert _exit_code(lambda: main([*sub, "--no-such-option", "x"])) == 2
    assert "error:" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


MISSING_FILE, MISSING_DIR = "/nonexistent/x.yaml", "/nonexistent/dir"
MISSING_INPUT = [
    ("launch.__main__", ["job", "--config", MISSING_FILE, "--dry-run"], MISSING_FILE),
    ("launch.__main__", ["sweep", MISSING_FILE, "--dry-run"], MISSING_FILE),
    ("launch.__main__", ["run", MISSING_DIR], MISSING_DIR),
    ("launch.__main__", ["status", MISSING_DIR], MISSING_DIR),
    ("launch.__main__", ["demo", "--study", "nope", "--plan"], "--study nope"),
    ("eval.__main__", ["transfer", MISSING_DIR, "--out", "o"], MISSING_DIR),
    ("eval.__main__", ["coord-check", "--config", MISSING_FILE], MISSING_FILE),
    ("eval.__main__", ["diversity", "--config", MISSING_FILE], MISSING_FILE),
    ("eval.__main__", ["dynamics", MISSING_DIR, "--out", "o"], MISSING_DIR),
    ("eval.__main__", ["lm-eval", MISSING_DIR, "--tasks", "x"], MISSING_DIR),
    ("data_prep.__main__", ["--config", MISSING_FILE], MISSING_FILE),
    ("train_gpt", ["--config", MISSING_FILE], MISSING_FILE),
    ("training.show", ["--config", MISSING_FILE], MISSING_FILE),
    ("training.export_hf", [MISSING_DIR, "--out", "o"], MISSING_DIR),
    ("data_prep.costs", ["/nonexistent/m.json", "--scale", "2"], "/nonexistent/m.json"),
    ("data_prep.registry_corpora", ["nope"], "'nope'"),
]


@pytest.mark.parametrize("module,argv,named", MISSING_INPUT, ids=[" ".join([m, *a[:1]]) for m, a, _ in MISSING_INPUT])
def test_a_missing_input_exits_2_naming_it(module, argv, named, tmp_path, monkeypatch, capsys):
    """Bad input is exit 2 (rundir.contract.ExitCode.USAGE) with a message naming the path or
    flag, on every command, and nothing is written."""
    import importlib

    monkeypatch.chdir(tmp_path)
    assert _exit_code(lambda: importlib.import_module(module).main(argv)) == 2
    assert named in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == []

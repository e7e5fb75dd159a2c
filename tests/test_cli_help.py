"""Every entry point's --help states each option's default (jobscripts.cli.state_defaults):
argparse prints one only where the help text spells it out. Every command line the README and
docs/*.md show (benchmark scripts included) is one its parser takes."""

from __future__ import annotations

import argparse
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from eval.__main__ import build_parser as eval_parser
from jobscripts.cli import _STATES_DEFAULT, state_defaults
from launch.__main__ import _parser as launch_parser


def _options(parser: argparse.ArgumentParser, path: str = ""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options(sub, f"{path} {name}")
        elif action.option_strings and action.help != argparse.SUPPRESS:
            yield path.strip(), action


def _parser_of(module: str) -> argparse.ArgumentParser:
    """The parser `python -m MODULE` parses its command line with (caught as it starts parsing)."""
    import importlib

    class Caught(Exception):
        pass

    def catch(self, *args, **kwargs):
        raise Caught(self)

    saved = {
        name: getattr(argparse.ArgumentParser, name)
        for name in ("parse_args", "parse_known_args", "parse_intermixed_args")
    }
    try:
        for name in saved:
            setattr(argparse.ArgumentParser, name, catch)
        importlib.import_module(module).main(["--help"])
    except Caught as caught:
        return caught.args[0]
    finally:
        for name, method in saved.items():
            setattr(argparse.ArgumentParser, name, method)
    raise AssertionError(f"{module}.main never parsed its command line")


def _assert_defaults_stated(parser: argparse.ArgumentParser) -> None:
    missing = []
    for where, action in _options(parser):
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


@pytest.mark.parametrize("module", sorted({module for module, _, _ in COMMANDS}))
def test_every_entry_points_help_states_its_defaults(module):
    """`python -m data_prep.costs --help` listed `--nodes NODES` and `--cores-per-node
    CORES_PER_NODE` with no word: a projection for 1 node x 64 cores unless told otherwise."""
    _assert_defaults_stated(_parser_of(module))


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


# Every command line README.md and docs/*.md show, in their shell blocks and inline code: the
# module or benchmark script it names exists, and the command's own parser accepts its options and
# overrides (nothing runs: parsing stops before the command's work). A flag or module renamed in
# the code but not in the docs fails here instead of on a user's first day.
ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.md")))
NOT_OURS = {"pytest"}  # `python -m pytest`: its options are pytest's


def doc_commands(text: str) -> list[tuple[str, str, list[str] | None]]:
    """(the line as written, module, argv) for each `python -m MODULE ...`, `python train_gpt.py ...`,
    `python benchmarks/SCRIPT.py ...` (module: the script's path) and `torchrun ... train_gpt.py ...`
    in the shell blocks (``\\`` continues a line, `#` starts a comment, `;`, `&&` or `|` ends the
    command) and in inline code; argv is None for an inline span with one argument or none (it
    names a module or subcommand; a script's parser still parses it). A synopsis (a word in `[...]`) is
    no command line; of alternatives (`kjv|sotu`, no spaces) the first is taken; a trailing `...`
    is dropped; a placeholder in capitals (`DIR`, `N`) is given as `1`, a value every option's
    type takes."""
    lines, fence, held = [], None, ""
    for raw in text.splitlines():
        if raw.strip().startswith("```"):  # also a block indented under a list item
            fence = None if fence is not None else raw.strip()[3:] or "text"
            continue
        if fence in ("bash", "sh", "text"):
            line = held + raw.strip()
            held = line[:-1] + " " if line.endswith("\\") else ""
            if not held:
                lines.append((line, True))
    body = re.sub(r"```.*?```", "", text, flags=re.S)  # inline spans outside the blocks
    lines += [(span.replace("\n", " "), False) for span in re.findall(r"`((?:python|torchrun) [^`]+)`", body)]
    commands = []
    for line, fenced in lines:
        if line.split()[:1] not in (["python"], ["torchrun"]) or any(w.startswith("[") for w in line.split()):
            continue
        first = re.sub(r"(?<=[\w/.])\|[\w/.|-]+", "", line)  # alternatives (`--corpus kjv|sotu`): the first
        lexer = shlex.shlex(first, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
        words = words[: min((i for i, w in enumerate(words) if w in (";", "&&", "|")), default=len(words))]
        if "train_gpt.py" in words:
            module, argv = "train_gpt", words[words.index("train_gpt.py") + 1 :]
        elif words[0] == "python" and words[1:2] == ["-m"]:
            module, argv = words[2], words[3:]
        elif words[0] == "python" and re.fullmatch(r"benchmarks/\w+\.py", words[1] if len(words) > 1 else ""):
            module, argv = words[1], words[2:]  # a benchmark script: its parser, caught as main() parses
        else:
            continue  # `torchrun --standalone`: a launcher's flag
        argv = [re.sub(r"^[A-Z][A-Z_]*$", "1", w) for w in (argv[:-1] if argv[-1:] == ["..."] else argv)]
        commands.append((line, module, argv if len(argv) > 1 or fenced else None))
    return commands


class _Parsed(Exception):
    def __init__(self, result):
        self.result = result


def _parse_only(monkeypatch):
    """argparse's parse methods raise _Parsed with their result when the outermost call returns; an
    abbreviated option (`--input-byte` for `--input-bytes`) is refused: a doc spells options out."""
    depth = [0]

    def wrap(name):
        original = getattr(argparse.ArgumentParser, name)

        def method(self, *args, **kwargs):
            self.allow_abbrev = False
            depth[0] += 1
            try:
                result = original(self, *args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                raise _Parsed(result)
            return result

        monkeypatch.setattr(argparse.ArgumentParser, name, method)

    for name in ("parse_args", "parse_known_args", "parse_intermixed_args", "parse_known_intermixed_args"):
        wrap(name)


DOC_COMMANDS = [(doc, *command) for doc in DOCS for command in doc_commands((ROOT / doc).read_text())]


def test_doc_commands_are_found():
    found = {doc: {module for d, _, module, _ in DOC_COMMANDS if d == doc} for doc in DOCS}
    assert {"launch", "eval", "data_prep", "train_gpt", "training.show", "training.export_hf"} <= found["README.md"]
    assert {"launch"} <= found["docs/launch.md"] and {"data_prep", "data_prep.costs"} <= found["docs/data_prep.md"]
    assert {"eval"} <= found["docs/eval.md"]
    assert len([c for c in DOC_COMMANDS if c[0] == "README.md" and c[3] is not None]) >= 30


@pytest.mark.parametrize("doc,line,module,argv", DOC_COMMANDS, ids=[f"{c[0]}: {c[1][:70]}" for c in DOC_COMMANDS])
def test_doc_command_parses(doc, line, module, argv, monkeypatch, capsys):
    import importlib
    import importlib.util

    from runconfig import load_config
    from runconfig.schema import RunConfig

    if module.endswith(".py"):  # a script: run as `python SCRIPT ARGV` would, up to its parse
        script = ROOT / module
        assert script.is_file(), f"{doc}: no script {module}: {line}"
        assert "argparse" in script.read_text(), f"{module} parses no options: the test would run it"
        monkeypatch.syspath_prepend(str(script.parent))

        def main(argv, script=script):
            monkeypatch.setattr(sys, "argv", [str(script), *argv])
            runpy.run_path(str(script), run_name="__main__")

        argv = argv or []
    else:
        assert importlib.util.find_spec(module) is not None, f"{doc}: no module {module!r}: {line}"
        if module in NOT_OURS or argv is None:
            return
        imported = importlib.import_module(module)
        main = getattr(imported, "main", None) or importlib.import_module(f"{module}.__main__").main
    _parse_only(monkeypatch)
    with pytest.raises(_Parsed) as parsed:
        try:
            main(argv)
        except SystemExit as exc:
            pytest.fail(f"{doc}: command refused (exit {exc.code}): {line}\n{capsys.readouterr().err}")
    args, rest = parsed.value.result if isinstance(parsed.value.result, tuple) else (parsed.value.result, [])
    command = getattr(args, "command", None)
    # launch: options may sit among job's and sweep's key=value overrides (launch/__main__.py)
    assert all("=" in r and not r.startswith("-") for r in rest) and (not rest or command in ("job", "sweep")), (
        f"{doc}: arguments its parser does not take: {rest}: {line}"
    )
    for word in argv:  # the repository's files it names exist
        if word.startswith(("configs/", "docs/")) and "<" not in word:
            assert (ROOT / word).exists(), f"{doc} names {word}, which does not exist: {line}"
    study = argv[argv.index("--study") + 1] if "--study" in argv else "1"
    if study != "1":  # not a placeholder
        assert (ROOT / "configs" / "studies" / f"{study}.yaml").exists(), f"{doc}: no study {study!r}: {line}"
    config = getattr(args, "config", None) or ""
    runs = module in ("train_gpt", "training.show") or (module, command) in (("launch", "job"), ("eval", "coord-check"))
    if runs and config.startswith("configs/"):  # a placeholder (cfg.yaml, FILE) has nothing to check
        load_config(RunConfig, args.config, [*(getattr(args, "overrides", None) or []), *rest])  # keys and values


def doc_synopses(text: str) -> list[tuple[str, str, list[str], list[str]]]:
    """(line, module, subcommand, options) of each synopsis (`python -m MODULE [SUB] ... [--opt X]`,
    continued on the lines below that start with `[` or `options:`) in a code block: the options it
    names, brackets and values aside."""
    found, fence, held, synopsis = [], None, "", False
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            fence = None if fence is not None else raw.strip()[3:] or "text"
            continue
        if fence is None:
            continue
        line = held + raw.strip()
        held = line[:-1] + " " if line.endswith("\\") else ""
        words = line.split()
        if held:
            continue
        if synopsis and words[:1] and (words[0].startswith("[") or words[0] == "options:"):
            doc_line, module, sub, options = found[-1]
            more = {m for w in words for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", w)}
            found[-1] = (f"{doc_line} {line}", module, sub, sorted({*options, *more}))
            continue
        synopsis = words[:2] == ["python", "-m"] and any(w.startswith("[") for w in words)
        if not synopsis:
            continue
        sub = [words[3]] if len(words) > 3 and re.fullmatch(r"[a-z][a-z-]*", words[3]) else []
        options = sorted({m for w in words[3:] for m in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", w)})
        found.append((line, words[2], sub, options))
    return found


SYNOPSES = [(doc, *s) for doc in DOCS for s in doc_synopses((ROOT / doc).read_text())]


def test_doc_synopses_name_options_the_help_lists(capsys):
    """The usage lines at the top of docs/launch.md and docs/eval.md's sections list every option
    of the command: each one they name is in its --help."""
    import importlib

    assert len(SYNOPSES) >= 8
    for doc, line, module, sub, options in SYNOPSES:
        main = importlib.import_module(f"{module}.__main__").main
        assert _exit_code(lambda main=main, sub=sub: main([*sub, "--help"])) == 0, line
        shown = capsys.readouterr().out
        missing = [o for o in options if not re.search(rf"(?<![\w-]){o}(?![\w-])", shown)]
        assert not missing, f"{doc}: {missing} not in `python -m {module} {' '.join(sub)} --help`: {line}"


def test_doc_synopses_show_each_options_default():
    """A bracketed option with numbers in a synopsis (`[--steps 5]`, `[--fractions 0.1 0.5 1.0]`)
    shows its default: docs/eval.md's `--yaida-s` synopsis said `[--steps 3]` where the default
    is 5. An option whose default is decided later (None: the config's widths) is an example."""
    import importlib

    shown = 0
    for doc, line, module, sub, _options in SYNOPSES:
        entry = importlib.import_module(f"{module}.__main__")
        parser = entry.build_parser() if hasattr(entry, "build_parser") else entry._parser()
        for action in parser._actions if sub else ():
            if isinstance(action, argparse._SubParsersAction):
                parser = action.choices[sub[0]]
        actions = {option: a for a in parser._actions for option in a.option_strings}
        for option, values in re.findall(r"\[(--[a-z][a-z0-9-]*)((?: -?[0-9][0-9.]*)+)\]", line):
            default = actions[option].default
            if default is None:
                continue
            default = list(default) if isinstance(default, (list, tuple)) else [default]
            assert [float(v) for v in values.split()] == [float(d) for d in default], (
                f"{doc}: {option}{values} but its default is {default}: {line}"
            )
            shown += 1
    assert shown >= 10


@pytest.mark.parametrize("module", sorted({module for module, _, _ in COMMANDS}))
def test_every_option_is_named_in_the_docs(module):
    """Each option an entry point's --help lists is named somewhere in README.md or docs/*.md:
    `training.export_hf --parity-sequences`, `data_prep.registry_corpora --cache` and
    `jobscripts.requeue --on-exit` were in --help only."""
    text = "".join(p.read_text() for p in (ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))))
    missing = [
        f"{where} {action.option_strings[-1]}".strip()
        for where, action in _options(_parser_of(module))
        if action.option_strings[-1] != "--help"
        and not re.search(rf"(?<![\w-]){re.escape(action.option_strings[-1])}(?![\w-])", text)
    ]
    assert not missing, f"python -m {module}: options no doc names: {missing}"


def test_eval_doc_synopses_list_every_option():
    """docs/eval.md's usage lines are each command's whole synopsis (a command with two forms has
    two): `lm-eval --dtype` was in --help and not in the doc, which said the dtype was fixed."""
    subparsers = next(a for a in eval_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    listed: dict[str, set[str]] = {}
    for doc, _, _module, sub, options in SYNOPSES:
        if doc == "docs/eval.md":
            listed.setdefault(sub[0], set()).update(options)
    assert set(listed) == {"coord-check", "transfer", "lm-eval", "dynamics", "diversity", "loss-curves"}
    for sub, options in listed.items():
        actions = subparsers[sub]._actions
        have = {a.option_strings[-1] for a in actions if a.option_strings and a.help != argparse.SUPPRESS}
        assert have - {"--help"} - options == set(), f"docs/eval.md's synopsis of {sub} leaves these out"


def test_ci_runs_the_readme_test_command():
    """.ci/run must call the README's test command (the Quick start's `python -m pytest ...` line,
    its options included): the suite CI times is the one the README promises."""
    quick = ROOT.joinpath("README.md").read_text().split("## Quick start", 1)[1].split("```", 2)[1]
    readme = [line.split("#", 1)[0].strip() for line in quick.splitlines() if line.startswith("python -m pytest")]
    ci = [line.split("#", 1)[0].strip() for line in ROOT.joinpath(".ci/run").read_text().splitlines()]
    assert len(readme) == 1 and readme[0] in ci, (readme, ci)
    assert "-n" in shlex.split(readme[0])  # the workers come from pytest-xdist, pinned in requirements.txt
    assert any(line.startswith("pytest-xdist==") for line in ROOT.joinpath("requirements.txt").read_text().splitlines())

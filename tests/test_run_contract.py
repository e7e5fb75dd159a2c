"""The run contract's tables (rundir.contract) agree with each other and with what readers see."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from rundir.contract import EXIT_OF_STATUS, FINAL_STATUSES, STATUS_OF_EXIT, SUMMARY_STATUSES, ExitCode, Status
from rundir.files import RunDirError, read_summary
from tests.conftest import REPO


def test_exit_codes_and_statuses_map_both_ways():
    for status, code in EXIT_OF_STATUS.items():
        assert STATUS_OF_EXIT[code] == status
    assert set(SUMMARY_STATUSES) == {Status.COMPLETED, Status.DIVERGED, Status.FAILED, Status.PREEMPTED}
    assert FINAL_STATUSES == {Status.COMPLETED, Status.DIVERGED}
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4, 75]


@pytest.mark.parametrize(
    "written,read",
    [
        ({"status": "failed", "exit_code": 75, "reason": "preempted (SIGTERM) at step 3"}, Status.PREEMPTED),
        ({"status": "failed", "exit_code": 1, "reason": "RuntimeError: x"}, Status.FAILED),
        ({"status": "preempted", "exit_code": 75}, Status.PREEMPTED),
        ({"status": "completed", "exit_code": 0}, Status.COMPLETED),
    ],
)
def test_summaries_read_with_one_vocabulary(tmp_path, written, read):
    """Summaries from before the `preempted` status (failed + exit 75) read as preempted."""
    (tmp_path / "summary.json").write_text(json.dumps(written))
    summary = read_summary(tmp_path)
    assert summary is not None and summary.status == read
    assert summary.preempted == (read == Status.PREEMPTED)
    assert summary.final == (read in FINAL_STATUSES)
    assert summary.to_json()["status"] == read.value


def test_an_unknown_status_is_refused_naming_the_file(tmp_path):
    from rundir.files import RunSummary

    with pytest.raises(RunDirError, match="summary.json: status 'done' is none of"):
        RunSummary.from_json({"status": "done"}, str(tmp_path / "summary.json"))


ENTRY_POINTS = [
    "train_gpt.py",
    "launch/__main__.py",
    "data_prep/__main__.py",
    "eval/__main__.py",
    "training/show.py",
    "training/export_hf.py",
    "study/cli.py",
]


def _command_modules() -> list[str]:
    """ENTRY_POINTS, every eval subcommand and every module with a ``__main__`` block; not
    ``jobscripts`` (the standard library only: it cannot import rundir.contract) nor the
    deprecated aliases."""
    from eval.__main__ import SUBCOMMANDS

    found = set(ENTRY_POINTS) | {name.replace(".", "/") + ".py" for name in SUBCOMMANDS.values()}
    for path in REPO.glob("[!.]*/**/*.py"):
        rel = str(path.relative_to(REPO))
        if rel.split("/")[0] in ("tests", "benchmarks", "jobscripts") or "lm_eval_tasks" in rel:
            continue
        if 'if __name__ == "__main__"' in path.read_text():
            found.add(rel)
    return sorted(found)


def _literal_exit_codes(source: str) -> list[int]:
    """Lines where a command's function (``main``, ``run`` or one declared ``-> ExitCode``)
    returns or exits with an int literal, also inside ``a if c else 1`` / ``a or 2``."""

    def ints(node: ast.AST | None) -> bool:
        if isinstance(node, ast.IfExp):
            return ints(node.body) or ints(node.orelse)
        if isinstance(node, ast.BoolOp):
            return any(ints(v) for v in node.values)
        return isinstance(node, ast.Constant) and type(node.value) is int

    lines = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if fn.name not in ("main", "run") and not (fn.returns is not None and "ExitCode" in ast.unparse(fn.returns)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Return) and ints(node.value):
                lines.append(node.lineno)
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "SystemExit", "exit"):
                if node.args and ints(node.args[0]):
                    lines.append(node.lineno)
    return sorted(set(lines))


def test_the_literal_check_sees_every_form():
    source = (
        "def main(a) -> int:\n    if a:\n        return 2\n    sys.exit(0 if a else 1)\n\n"
        "def verdict(ok) -> ExitCode:\n    return ExitCode.OK if ok else 1\n\n"
        "def helper(x) -> int:\n    return 0\n\n"
        "def run(args) -> ExitCode:\n    return ExitCode.OK\n"
    )
    assert _literal_exit_codes(source) == [3, 4, 7]


def test_every_command_module_is_checked():
    modules = _command_modules()
    assert set(ENTRY_POINTS) <= set(modules)
    assert {"eval/coord_check.py", "eval/lm_eval_cmd.py", "data_prep/registry_corpora.py"} <= set(modules)


@pytest.mark.parametrize("path", _command_modules())
def test_entry_points_return_exit_codes_not_literals(path):
    """`return 2`, `return ExitCode.OK if ok else 1`, `sys.exit(75)`: every code a command
    returns is an ExitCode member."""
    literals = _literal_exit_codes((REPO / path).read_text())
    assert not literals, f"{path}: literal exit codes at lines {literals}"


def test_backends_implement_the_protocol(megatron):
    from tests.conftest import tiny_config
    from training.backends import Backend, CpuBackend
    from training.model import build_model, resolve

    cfg = tiny_config()
    model = build_model(cfg, 512)
    assert isinstance(CpuBackend(cfg, model, resolve(cfg)), Backend)


def test_no_module_compares_a_status_against_a_literal_exit_code():
    """`== 75` or `exit_code == 3` outside the contract would be a second owner of a code."""
    bad = []
    for path in sorted(REPO.glob("[!.]*/**/*.py")):
        if path.parts[len(REPO.parts)] in ("tests", "benchmarks") or path.name == "contract.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value in (75,) for c in node.comparators
            ):
                bad.append(f"{Path(path).relative_to(REPO)}:{node.lineno}")
    assert not bad, bad


def _owned_names() -> dict[str, str]:
    """File and folder names of the run and sweep directories -> the constant that owns each."""
    from launch import sweep_dir, sweep_plan
    from rundir import contract, files

    owned = {files.LATEST: "rundir.files.LATEST"}
    for module in (contract, files, sweep_plan, sweep_dir):  # each imports its names from those before it
        for name, value in vars(module).items():
            if name.endswith(("_FILE", "_DIR", "_SNAPSHOT")) and isinstance(value, str):
                owned.setdefault(value, f"{module.__name__}.{name}")
    return owned


# Same spelling, another file: data_prep's work folder has a lock of its own (not the run lock).
OTHER_FILES = {("data_prep/pipeline.py", ".lock")}


def _spelled_out(source: str, owned: dict[str, str]) -> list[tuple[int, str]]:
    """(line, name) where a path is joined with a literal owned name (``run_dir / "config.yaml"``),
    or a second constant is given an owned name (``RESULTS_FILE = "results.csv"``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            sides = (node.left, node.right)
        elif isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            sides = (node.value,)
        else:
            continue
        found += [(node.lineno, s.value) for s in sides if isinstance(s, ast.Constant) and s.value in owned]
    return sorted(found)


def test_the_name_check_sees_joins_and_second_constants():
    owned = {"config.yaml": "rundir.files.CONFIG_FILE", "runs": "rundir.contract.RUNS_DIR"}
    source = 'a = run_dir / "config.yaml"\nRUNS = "runs"\nb = f"{d / CONFIG_FILE}"\nc = {"runs": 1}\n'
    assert _spelled_out(source, owned) == [(1, "config.yaml"), (2, "runs")]


def test_run_and_sweep_file_names_are_spelled_by_their_owner_only():
    """`run_dir / "config.yaml"`, `sweep_dir / "runs"` or a second `RESULTS_FILE = "results.csv"`
    outside the module that owns the name: a second owner, which a renamed file would miss."""
    owned = _owned_names()
    bad = []
    for path in sorted(REPO.glob("[!.]*/**/*.py")) + [REPO / "train_gpt.py"]:
        rel = str(path.relative_to(REPO))
        if rel.split("/")[0] in ("tests", "benchmarks"):
            continue
        for line, name in _spelled_out(path.read_text(), owned):
            owner = owned[name].rsplit(".", 1)[0].replace(".", "/") + ".py"
            if rel != owner and (rel, name) not in OTHER_FILES:
                bad.append(f"{rel}:{line} spells {name!r}: use {owned[name]}")
    assert not bad, "\n".join(bad)


def test_attempt_exit_reads_the_file_it_takes_once(tmp_path, monkeypatch):
    """attempt_exit read the file that gave the exit code twice: once for the code, again for the
    reason (the two could come from two writes). Now one read gives both."""
    import builtins
    import os
    import time

    from rundir.files import ExitRecord, attempt_exit

    since = time.time()
    stale = tmp_path / "exit.json"  # from an earlier attempt: written before this one began
    stale.write_text('{"exit_code": 2, "reason": "old refusal"}')
    os.utime(stale, (since - 60, since - 60))
    (tmp_path / "summary.json").write_text('{"status": "failed", "exit_code": 1, "reason": "crash"}')
    own = tmp_path / "exit-own.json"
    own.write_text('{"exit_code": "4"}')  # not an integer: passed by
    opened: list[str] = []
    real_open = builtins.open

    def counting(file, *args, **kwargs):
        opened.append(os.path.basename(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting)
    assert attempt_exit(tmp_path, since, own) == ExitRecord(1, "crash")
    assert opened == ["exit-own.json", "summary.json"]  # exit.json is older than the attempt: not opened
    opened.clear()
    own.write_text('{"exit_code": 4, "reason": "locked by pid 12", "rank": 0}')
    assert attempt_exit(tmp_path, since, own) == ExitRecord(4, "locked by pid 12")
    assert opened == ["exit-own.json"]


def test_run_dirs_of_a_sweep_and_of_a_run(tmp_path):
    """rundir.files.run_dirs, the one listing eval loss-curves, eval dynamics and launch status's
    orphan note take: a sweep's runs/* folders by name, dot-folders (the shared .index_cache) and
    files left out; a path without runs/ is a run directory itself."""
    from rundir.files import run_dirs

    for name in ("r10", "r2", ".index_cache"):
        (tmp_path / "sw" / "runs" / name).mkdir(parents=True)
    (tmp_path / "sw" / "runs" / "notes.txt").write_text("x")
    assert run_dirs(tmp_path / "sw") == [tmp_path / "sw" / "runs" / "r10", tmp_path / "sw" / "runs" / "r2"]
    assert run_dirs(tmp_path / "sw" / "runs" / "r2") == [tmp_path / "sw" / "runs" / "r2"]
    (tmp_path / "empty" / "runs").mkdir(parents=True)
    assert run_dirs(tmp_path / "empty") == []

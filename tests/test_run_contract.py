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


@pytest.mark.parametrize("path", ENTRY_POINTS)
def test_entry_points_return_exit_codes_not_literals(path):
    """`return 2` / `sys.exit(75)`: every code an entry point returns is an ExitCode member."""
    tree = ast.parse((REPO / path).read_text())
    literals = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Return)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, int)
        and not isinstance(node.value.value, bool)
    ]
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

"""Entry points leave quietly when the reader of their stdout goes away (``launch status | head``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# prints 1 MB (more than a pipe holds) through exit_with, as an entry point's main would
PLANTED = """
from jobscripts.cli import exit_with

def main():
    for i in range(20000):
        print(f"run {i:05d}: completed " + "x" * 40)
    return 0

exit_with(main)
"""


def test_a_closed_pipe_ends_the_command_with_141_and_no_traceback():
    """Before, ``python -m launch status DIR | head`` ended with two BrokenPipeError tracebacks
    (the command's print, then Python's flush at exit). Now: nothing on stderr, exit 141 (128 +
    SIGPIPE, as a shell reports a command killed by it), the lines read before intact."""
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f'"{sys.executable}" -c "$0" | head -n 2', PLANTED],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.stdout == "run 00000: completed " + "x" * 40 + "\nrun 00001: completed " + "x" * 40 + "\n"
    assert done.stderr == ""
    assert done.returncode == 141


def test_a_broken_pipe_other_than_stdout_is_still_an_error():
    """Only stdout's reader going away is quiet: a BrokenPipeError from another pipe (a child
    process that died) keeps its traceback and exit 1."""
    other = (
        "import subprocess, sys\nfrom jobscripts.cli import exit_with\n"
        "def main():\n"
        "    child = subprocess.Popen([sys.executable, '-c', 'pass'], stdin=subprocess.PIPE)\n"
        "    child.wait()\n"
        "    child.stdin.write(b'x' * 1000000)\n"
        "    child.stdin.flush()\n"
        "exit_with(main)\n"
    )
    done = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 1 and "BrokenPipeError" in done.stderr


@pytest.mark.parametrize(
    "module", ["launch/__main__.py", "eval/__main__.py", "data_prep/__main__.py", "training/show.py"]
)
def test_every_listing_entry_point_exits_through_exit_with(module):
    tail = ROOT.joinpath(module).read_text().split('if __name__ == "__main__":', 1)[1]
    assert "exit_with(main)" in tail and "sys.exit(" not in tail

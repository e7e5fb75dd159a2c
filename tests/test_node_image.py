"""benchmarks/node_image: the GPU node's image emulated for the CPU rehearsals. A package that
image lacks must fail to import here as a missing package does there (ModuleNotFoundError), so
that ``pytest.importorskip`` skips the test modules that need it in every pytest version
(pytest >= 9.2 no longer skips on a plain ImportError: the rehearsal's ``pytest -m gpu`` then
stopped at collection)."""

import subprocess
import sys

from tests.conftest import REPO

CHECK = """
import pytest

try:
    import datatrove  # noqa: F401
except ModuleNotFoundError as exc:
    assert exc.name == "datatrove", exc.name
else:
    raise AssertionError("datatrove imported in the node's image")
try:
    pytest.importorskip("datatrove")
except pytest.skip.Exception:
    print("skipped")
"""


def test_a_package_the_node_lacks_is_a_missing_module():
    env = {"PYTHONPATH": str(REPO / "benchmarks" / "node_image"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "skipped", done.stderr[-2000:]

"""Layers import downward only: patches <- runconfig <- (data_prep) <- training <- launch / eval.

Read from the source (``ast``), so lazy imports inside functions count too. ``patches`` is
offered as a drop-in for a user's own Megatron-LM script: it must import nothing else of
the toolkit. ``launch`` may call ``eval`` (the demo runs the analysis); ``eval`` never
imports ``launch``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("patches", "runconfig", "data_prep", "training", "launch", "eval")
ALLOWED: dict[str, set[str]] = {
    "patches": set(),
    "runconfig": {"patches"},
    "data_prep": {"runconfig"},
    "training": {"patches", "runconfig", "data_prep"},
    "eval": {"patches", "runconfig", "data_prep", "training"},
    "launch": {"patches", "runconfig", "data_prep", "training", "eval"},
}
TOP_LEVEL_OF = {"train_gpt": "training"}  # the entry point script sits in the training layer


def imported_layers(path: Path) -> dict[str, int]:
    """Toolkit layer -> first line that imports it, for one source file."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            layer = TOP_LEVEL_OF.get(top, top)
            if layer in PACKAGES:
                found.setdefault(layer, node.lineno)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_layer_imports_a_layer_above_it(package):
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        for layer, line in imported_layers(path).items():
            if layer != package and layer not in ALLOWED[package]:
                bad.append(f"{path.relative_to(REPO)}:{line} imports {layer}")
    assert not bad, "\n".join(bad)


def test_the_checker_sees_lazy_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("import os\n\ndef f():\n    from training.model import build_model\n    import eval.plots\n")
    assert imported_layers(source) == {"training": 4, "eval": 5}

"""Layers import downward only, as drawn in docs/architecture.md.

Read from the source (``ast``), so lazy imports inside functions count too. ``patches`` is
offered as a drop-in for a user's own Megatron-LM script: it imports nothing else of the
toolkit. ``jobscripts`` is the ground floor that data_prep's worker processes import: the
standard library only. ``rundir`` is read on login nodes: no torch, megatron or omegaconf.
Two files are command lines above every layer (``ENTRY_POINTS``), and the deprecated aliases
of moved modules (``DEPRECATED_ALIASES``) point wherever their module went.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import env

REPO = Path(__file__).resolve().parents[1]
# Bottom to top; each may import only the layers its row names (docs/architecture.md).
ALLOWED: dict[str, set[str]] = {
    "jobscripts": set(),
    "patches": set(),
    "rundir": {"jobscripts", "patches"},
    "runconfig": {"jobscripts", "patches", "rundir"},
    "data_prep": {"jobscripts", "rundir", "runconfig"},
    "training": {"jobscripts", "patches", "rundir", "runconfig", "data_prep"},
    "eval": {"jobscripts", "patches", "rundir", "runconfig", "data_prep", "training"},
    "launch": {"jobscripts", "patches", "rundir", "runconfig", "data_prep", "training"},
    "study": {"jobscripts", "patches", "rundir", "runconfig", "data_prep", "training", "eval", "launch"},
}
PACKAGES = tuple(ALLOWED)
TOP_LEVEL_OF = {"train_gpt": "training"}  # the entry point script sits in the training layer
# Command lines on top of every layer: `python -m launch demo` starts a study.
ENTRY_POINTS: dict[str, set[str]] = {"launch/__main__.py": {"study"}}
DEPRECATED_ALIASES = {
    "runconfig/atomic.py",
    "runconfig/attempts.py",
    "runconfig/contract.py",
    "runconfig/run_dir.py",
    "runconfig/sbatch.py",
    "runconfig/scripts.py",
    "runconfig/shell.py",
    "launch/contract.py",
    "launch/demo.py",
    "launch/demo_corpus.py",
    "launch/planner.py",
    "launch/study.py",
}


def imported_modules(path: Path) -> dict[str, int]:
    """Absolute module name -> first line that imports it, for one source file."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            found.setdefault(name, node.lineno)
    return found


def imported_layers(path: Path) -> dict[str, int]:
    """Toolkit layer -> first line that imports it, for one source file."""
    found: dict[str, int] = {}
    for name, line in imported_modules(path).items():
        top = name.split(".")[0]
        layer = TOP_LEVEL_OF.get(top, top)
        if layer in PACKAGES:
            found.setdefault(layer, line)
    return found


def _sources(package: str) -> list[Path]:
    return [p for p in sorted((REPO / package).rglob("*.py")) if str(p.relative_to(REPO)) not in DEPRECATED_ALIASES]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_layer_imports_a_layer_above_it(package):
    bad = []
    for path in _sources(package):
        rel = str(path.relative_to(REPO))
        allowed = ALLOWED[package] | ENTRY_POINTS.get(rel, set())
        for layer, line in imported_layers(path).items():
            if layer != package and layer not in allowed:
                bad.append(f"{rel}:{line} imports {layer}")
    assert not bad, "\n".join(bad)


def test_the_ground_floor_imports_the_standard_library_only():
    bad = []
    for path in _sources("jobscripts"):
        for name, line in imported_modules(path).items():
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ("__future__", "jobscripts"):
                bad.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def test_rundir_takes_only_the_parametrization_module_of_patches():
    bad = [
        f"{path.relative_to(REPO)}:{line} imports {name}"
        for path in _sources("rundir")
        for name, line in imported_modules(path).items()
        if name.startswith("patches") and name != "patches.parametrization"
    ]
    assert not bad, "\n".join(bad)


def test_light_packages_load_no_heavy_library():
    """What a login node or a data_prep worker imports stays free of torch, megatron and omegaconf."""
    code = (
        "import sys, jobscripts.atomic, jobscripts.scripts, jobscripts.sbatch, rundir.files, rundir.attempts, "
        "rundir.lock, rundir.contract\n"
        "print(sorted(m for m in ('torch', 'megatron', 'omegaconf', 'numpy', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env(), cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_checker_sees_lazy_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("import os\n\ndef f():\n    from training.model import build_model\n    import eval.plots\n")
    assert imported_layers(source) == {"training": 4, "eval": 5}


def test_every_package_is_mapped():
    """A new top-level package must get a row in ALLOWED (and docs/architecture.md)."""
    pyproject = (REPO / "pyproject.toml").read_text()
    listed = pyproject.split("include = [", 1)[1].split("]", 1)[0]
    names = {part.strip().strip('"').rstrip("*") for part in listed.split(",") if part.strip()}
    assert names == set(PACKAGES)


# Each deprecated alias -> where it went (launch.demo gathers three modules of the study package).
MOVED = {
    "runconfig.atomic": "jobscripts.atomic",
    "runconfig.attempts": "rundir.attempts",
    "runconfig.contract": "rundir.contract",
    "runconfig.run_dir": "rundir.files",
    "runconfig.sbatch": "jobscripts.sbatch",
    "runconfig.scripts": "jobscripts.scripts",
    "runconfig.shell": "jobscripts.shell",
    "launch.contract": "rundir.contract",
    "launch.demo_corpus": "data_prep.registry_corpora",
    "launch.planner": "study.planner",
    "launch.study": "study.spec",
}
MOVED_NAMES = {"runconfig.atomic_write_text": "jobscripts.atomic", "runconfig.atomic_write_bytes": "jobscripts.atomic"}


def _named_modules(text: str) -> set[str]:
    """Modules docs/architecture.md names: `pkg/mod.py` or `pkg.mod` anywhere; `mod.py` (or a bare name in
    a list after `pkg/first.py`, as "`data_prep/readers.py`, `extract.py`") in a package row."""
    named = set(re.findall(r"`([a-z_]+/[a-z_0-9]+\.py)`", text))
    named |= {f"{pkg}/{mod}.py" for pkg, mod in re.findall(r"`([a-z_]+)\.([a-z_0-9]+)[`.]", text) if pkg in ALLOWED}
    for line in text.splitlines():
        row = re.match(r"\| `([a-z_]+)/` \|", line)
        pkg = row.group(1) if row else None
        if pkg is None:
            first = re.search(r"`([a-z_]+)/[a-z_0-9]+\.py`", line)
            pkg = first.group(1) if first else None
        if pkg is not None:
            named |= {f"{pkg}/{m}" for m in re.findall(r"`([a-z_0-9]+\.py)`", line)}
    return named


def test_every_module_is_named_in_the_architecture_doc():
    """A new module gets a line in docs/architecture.md (its package's row or "The other modules")."""
    text = (REPO / "docs" / "architecture.md").read_text()
    named = _named_modules(text)
    modules = {
        str(p.relative_to(REPO))
        for package in PACKAGES
        for p in (REPO / package).glob("*.py")
        if p.name not in ("__init__.py", "__main__.py") and str(p.relative_to(REPO)) not in DEPRECATED_ALIASES
    }
    assert sorted(modules - named) == []
    files = set(re.findall(r"`([a-z_]+/[a-z_0-9]+\.py)`", text))  # named as files: they must exist
    gone = {n for n in files if n.split("/")[0] in ALLOWED and not (REPO / n).is_file()}
    assert sorted(gone) == []


def test_every_alias_file_is_listed_here():
    assert {m.replace(".", "/") + ".py" for m in [*MOVED, "launch.demo"]} == DEPRECATED_ALIASES


def test_moved_modules_warn_and_alias_their_new_home():
    """Each alias is its new module (launch.demo: study.cli's main, study.demo's run_demo) and
    warns naming the new home; so do runconfig's moved names."""
    code = (
        "import importlib, json, warnings\n"
        f"moved, names = {MOVED!r}, {MOVED_NAMES!r}\n"
        "out = {}\n"
        "def caught(load):\n"
        "    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n"
        "        value = load()\n"
        "    return value, [str(x.message) for x in w if x.category is DeprecationWarning]\n"
        "for old, new in moved.items():\n"
        "    mod, msgs = caught(lambda: importlib.import_module(old))\n"
        "    out[old] = [mod is importlib.import_module(new), msgs]\n"
        "demo, msgs = caught(lambda: importlib.import_module('launch.demo'))\n"
        "import study.cli, study.demo\n"
        "out['launch.demo'] = [demo.main is study.cli.main and demo.run_demo is study.demo.run_demo, msgs]\n"
        "import runconfig\n"
        "for old, new in names.items():\n"
        "    value, msgs = caught(lambda: getattr(runconfig, old.split('.')[1]))\n"
        "    out[old] = [value is getattr(importlib.import_module(new), old.split('.')[1]), msgs]\n"
        "print(json.dumps(out))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env(), cwd=REPO, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    for old, new in {**MOVED, **MOVED_NAMES, "launch.demo": "the study package"}.items():
        same, messages = got[old]
        assert same, f"{old} is not {new}'s"
        assert any(f"{old} moved to {new}" in m for m in messages), (old, messages)


def test_the_architecture_doc_lists_exactly_the_aliases():
    """docs/architecture.md's "Modules that moved keep a deprecated alias" sentence names each one."""
    text = " ".join((REPO / "docs" / "architecture.md").read_text().split())
    sentence = text.split("Modules that moved keep a deprecated alias", 1)[1].split("importing one warns", 1)[0]
    listed = set(re.findall(r"`([a-z_.]+)`", sentence))
    assert listed == {*MOVED, "launch.demo", *MOVED_NAMES}


def test_nothing_imports_a_deprecated_alias():
    """The aliases are for users' code; the toolkit itself uses the new homes."""
    aliases = {p[: -len(".py")].replace("/", ".") for p in DEPRECATED_ALIASES}
    bad = []
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO)
        if rel.parts[0].startswith(".") or str(rel) in DEPRECATED_ALIASES or rel.name == "test_import_layers.py":
            continue
        for name, line in imported_modules(path).items():
            if name in aliases:
                bad.append(f"{rel}:{line} imports {name}")
        for node in ast.walk(ast.parse(path.read_text())):  # runconfig.atomic_write_* (moved names)
            if isinstance(node, ast.ImportFrom) and node.module == "runconfig":
                moved = [a.name for a in node.names if a.name.startswith("atomic_write")]
                bad += [f"{rel}:{node.lineno} imports runconfig.{n}" for n in moved]
    assert not bad, "\n".join(bad)

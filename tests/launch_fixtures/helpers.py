"""Shared helpers of tests/test_launch*.py: paths, derived sweep specs, stub binaries, readers."""

from __future__ import annotations

import csv
import json
import os
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent
FAKE_TRAIN = FIXTURES / "fake_train.py"
DUMP_ARGV = FIXTURES / "dump_argv.py"
FAKE_SRUN = FIXTURES / "fake_srun.py"
TINY_SPEC = REPO / "configs" / "sweeps" / "tiny_cpu.yaml"
TINY_BASE = REPO / "configs" / "tiny_cpu.yaml"
TRAIN_GPT = REPO / "train_gpt.py"

FAKE_TRAIN_CMD = shlex.join([sys.executable, str(FAKE_TRAIN)])
needs_train_gpt = pytest.mark.skipif(
    not TRAIN_GPT.exists(),
    reason="train_gpt.py is not written yet (the lead's issue); this is its real-trainer variant",
)


def use_fake_trainer(monkeypatch, step_seconds: float = 0.01, unset: tuple[str, ...] = ()) -> None:
    """Runs train with fake_train.py (a made-up loss curve), every failure switch off."""
    monkeypatch.setenv("DEPTHMUP_TRAIN_CMD", FAKE_TRAIN_CMD)
    monkeypatch.setenv("FAKE_STEP_SECONDS", str(step_seconds))
    for var in ("FAKE_FAIL_MATCH", "FAKE_FAIL_TIMES", "FAKE_FAIL_REASON", *unset):
        monkeypatch.delenv(var, raising=False)


def derived_spec(tmp_path: Path, name: str = "spec.yaml", **changes: Any) -> Path:
    """configs/sweeps/tiny_cpu.yaml (base config made absolute) with top-level keys replaced by ``changes``."""
    spec = yaml.safe_load(TINY_SPEC.read_text())
    spec["base_config"] = str(TINY_BASE)
    spec.update(changes)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def events(run_dir: Path) -> list[dict]:
    path = run_dir / "fake_events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def starts(run_dir: Path) -> list[dict]:
    return [e for e in events(run_dir) if e["event"] == "start"]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def stub_bin(tmp_path: Path, stubs: dict[str, str]) -> Path:
    """A folder of executables ``name`` -> shell body, to put first on PATH."""
    folder = tmp_path / "stub_bin"
    folder.mkdir(exist_ok=True)
    for name, body in stubs.items():
        path = folder / name
        path.write_text(f"#!/usr/bin/env bash\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


def stub_slurm(tmp_path: Path, monkeypatch, stubs: dict[str, str]) -> Path:
    """SLURM's clients replaced by ``stubs`` (first on PATH), which keep their state in the folder
    ``$STUB_DIR``; the fake trainer trains. That folder."""
    state = tmp_path / "stub_state"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{stub_bin(tmp_path, stubs)}:{os.environ['PATH']}")
    monkeypatch.setenv("STUB_DIR", str(state))
    use_fake_trainer(monkeypatch)
    return state


def dumping(name: str) -> str:
    """Stub body: record argv and the rank environment under $DUMP_DIR."""
    return f'exec {shlex.quote(sys.executable)} {shlex.quote(str(DUMP_ARGV))} {name} "$@"'


def dumps(dump_dir: Path, name: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in sorted(dump_dir.glob(f"{name}-*.json"))]
    return sorted(found, key=lambda d: int(d["env"].get("RANK", d["env"].get("SLURM_PROCID", "0"))))


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.update(extra)
    return env

"""Checkpoints written by an older toolkit resume under this one (runconfig.schema.KEYS_ADDED).

A run records its config (``config.yaml``, each checkpoint's ``common.json``) with the keys its
version had. A key added since is read, where a record lacks it, as the value that run had; a
resume with another value is refused, naming the value to give back, but for the keys a resume
may change (training.session.RESUMABLE_CHANGES: the kernel choices among them).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runconfig.schema import KEYS_ADDED, RunConfig, as_recorded, explain_added
from tests.conftest import REPO, TINY, env

FIRST_SCHEMA = Path(__file__).parent / "runconfig_fixtures" / "schema_keys_3c586d3.txt"
FAST = [
    "model.num_layers=2",
    "training.steps=4",
    "checkpoint.interval=2",
    "scheduler.warmup_steps=1",
    "eval.at=[1.0]",
    "eval.batches=1",
    "logging.progress_bar=false",
    "logging.interval=1",
]


def old_keys() -> set[str]:
    return {line for line in FIRST_SCHEMA.read_text().splitlines() if line and not line.startswith("#")}


def schema_keys(cls: type = RunConfig, prefix: str = "") -> set[str]:
    keys = set()
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            keys |= schema_keys(type(default), f"{prefix}{f.name}.")
        else:
            keys.add(f"{prefix}{f.name}")
    return keys


def test_every_key_added_since_the_first_schema_has_the_value_its_older_runs_had():
    """A key added to the schema without an entry here makes every older checkpoint refuse to
    resume ('None -> value'): add it to KEYS_ADDED with the value the code before it used."""
    old, now = old_keys(), schema_keys()
    assert len(old) == 81 and old <= now  # no key of the first schema was removed or renamed
    assert sorted(now - old) == sorted(KEYS_ADDED)
    assert len(KEYS_ADDED) == 14


def test_a_record_lacking_the_keys_reads_as_its_run_ran():
    record = {"model": {"num_layers": 2}, "checkpoint": {"init_from": "/x"}, "logging": {}, "parametrization": {}}
    read = as_recorded(record)
    assert read["model"]["cross_entropy_fusion"] is False  # megatron's unfused cross-entropy before 3245dea
    assert read["model"]["make_vocab_size_divisible_by"] == 128
    assert read["model"]["rope_impl"] == "megatron"
    assert read["checkpoint"] == {"init_from": "/x", "init_mode": "weights"}  # a recorded key is kept
    assert read["logging"] == {"diagnostics_interval": 0}
    assert read["parametrization"] == {"yaida_s": None}
    read["model"]["recompute_modules"].append("mlp")  # a copy: the table is not changed through it
    assert KEYS_ADDED["model.recompute_modules"] == ["core_attn"]
    assert record["model"] == {"num_layers": 2}  # the record itself is left alone
    lines = ["model.cross_entropy_fusion: False -> True", "model.num_layers: 2 -> 4"]
    assert explain_added(lines, record) == [
        "model.cross_entropy_fusion: False -> True (recorded before model.cross_entropy_fusion existed: "
        "the run had false; give model.cross_entropy_fusion=false to go on as it ran)",
        "model.num_layers: 2 -> 4",
    ]
    assert explain_added(lines, {"model": {"cross_entropy_fusion": False}}) == lines  # recorded: no note


def train(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *overrides]
    return subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)


def strip_to_first_schema(config: dict) -> dict:
    """``config`` as the first schema's version recorded it: the keys it did not have removed."""
    old = old_keys()
    return {
        section: {k: v for k, v in values.items() if f"{section}.{k}" in old} if isinstance(values, dict) else values
        for section, values in config.items()
    }


@pytest.fixture(scope="module")
def old_run(tmp_path_factory) -> Path:
    """A finished 4-step run (checkpoints at steps 2 and 4) whose records lack every added key."""
    run = tmp_path_factory.mktemp("keys_added") / "run"
    out = train(run, *FAST, "model.cross_entropy_fusion=false")
    assert out.returncode == 0, out.stderr[-2000:]
    records = [run / "config.yaml", *(run / "checkpoints").glob("step_*/common.json")]
    assert len(records) == 3
    for path in records:
        if path.suffix == ".json":
            common = json.loads(path.read_text())
            common["config"] = strip_to_first_schema(common["config"])
            path.write_text(json.dumps(common))
        else:
            path.write_text(yaml.safe_dump(strip_to_first_schema(yaml.safe_load(path.read_text()))))
    assert "cross_entropy_fusion" not in (run / "config.yaml").read_text()
    return run


HINT = (
    "model.make_vocab_size_divisible_by: 128 -> 64 (recorded before model.make_vocab_size_divisible_by existed: the "
    "run had 128; give model.make_vocab_size_divisible_by=128 to go on as it ran)"
)


def losses(run: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def test_a_checkpoint_recorded_before_the_kernel_choices_resumes_with_the_other_kernels(old_run, tmp_path):
    """The old run ran unfused cross-entropy (KEYS_ADDED: false, the default is true now) and
    PyTorch's pick of attention kernel (auto: its CPU flash kernel). Resumed at step 2 with the
    default fusion and math attention (kernel choices a resume may change, as in Megatron-LM), it
    continues to the uninterrupted run's losses within float rounding. On CPU the fusion is off
    whatever the key says (bf16 GPU runs only); math against flash attention measured 2.4e-7 at
    a loss of 5.3 (12 steps, fp32)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(old_run, run)
    out = train(run, *FAST)  # cross_entropy_fusion defaults to true now
    assert out.returncode == 0 and "already completed" in out.stdout, out.stderr[-2000:]
    assert "another config" not in out.stderr
    (run / "summary.json").unlink()  # as if preempted after its step-2 checkpoint
    (run / "checkpoints" / "latest").write_text("step_00000002")
    out = train(run, *FAST, "model.attention_backend=math")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "step_00000002 (step 2)" in out.stderr
    before, after = losses(old_run), losses(run)
    assert sorted(after) == sorted(before) == [1, 2, 3, 4]
    assert all(after[step] == before[step] for step in (1, 2))  # the rows before the checkpoint are kept
    assert all(abs(after[step] - before[step]) <= 1e-5 for step in (3, 4)), (before, after)
    assert after[4] != before[2]  # it trained: the loss moved


def test_a_changed_key_the_record_lacks_is_refused_naming_the_value_it_had(old_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(old_run, run)
    out = train(run, *FAST, "model.make_vocab_size_divisible_by=64")  # 512 rows either way: the config differs
    assert out.returncode == 2 and "already completed with another config" in out.stderr, out.stderr[-2000:]
    assert HINT in out.stderr
    (run / "summary.json").unlink()
    out = train(run, *FAST, "model.make_vocab_size_divisible_by=64")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"the config differs from the checkpoint's; refusing to resume:\n  {HINT}\n" in out.stderr


def test_a_checkpoint_recorded_before_the_added_keys_is_continued(old_run, tmp_path):
    step2 = old_run / "checkpoints" / "step_00000002"
    out = train(
        tmp_path / "branch",
        *FAST,
        "model.cross_entropy_fusion=false",
        "training.steps=6",
        f"checkpoint.init_from={step2}",
        "checkpoint.init_mode=continue",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((tmp_path / "branch" / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["branch_of"]["step"] == 2

"""data_prep as SLURM job arrays, without SLURM: the generated scripts run by bash with
SLURM_ARRAY_TASK_ID set (a simulated array, two tasks at a time), and a stub ``sbatch`` that
records what is submitted (dependencies, resubmission of unfinished tasks only, retry limit).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_prep.api import load_data_prep_config
from data_prep.pipeline import manifest_without_run, run
from data_prep.slurm import failures, plan_submission, run_array_task, submit
from data_prep.stages import DataPrepError
from rundir import attempts
from tests.data_prep_fixtures import english_doc, write_jsonl
from tests.launch_fixtures.helpers import dumping, stub_bin
from tests.test_data_prep_pipeline import planted_inputs, planted_overrides

REPO = Path(__file__).resolve().parents[1]
OUTPUTS = ("train.bin", "train.idx", "valid.bin", "valid.idx", "tokenizer.model", "skipped.jsonl")


def inputs_with_a_large_file(raw: Path) -> None:
    """The planted five-format inputs plus a plain JSONL cut into byte-range shards, holding
    near-duplicates of earlier documents (a few words changed)."""
    planted_inputs(raw)
    docs = []
    for i in range(40):
        text = english_doc(100 + i)
        if i % 5 == 0:  # a copy of planted document i // 5 with two words changed
            words = english_doc(i // 5).split(" ")
            words[3], words[-4] = "changed", "edited"
            text = " ".join(words)
        docs.append(text)
    write_jsonl(raw / "f_large.jsonl", docs)


def overrides(raw: Path, out: Path) -> list[str]:
    return [
        *planted_overrides(raw, out),
        "input.shard_bytes=12000",
        "clean.near_dedup.enabled=true",
        "clean.near_dedup.threshold=0.5",
    ]


def _array_size(script: Path) -> int:
    match = re.search(r"^#SBATCH --array=0-(\d+)$", script.read_text(), re.MULTILINE)
    return int(match.group(1)) + 1 if match else 1


def _task(script: Path, rank: int) -> subprocess.Popen:
    env = dict(os.environ, SLURM_ARRAY_TASK_ID=str(rank))
    return subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_simulated_array_writes_the_bytes_of_a_local_run(tmp_path):
    raw = tmp_path / "raw"
    inputs_with_a_large_file(raw)
    reference = run(load_data_prep_config(None, overrides(raw, tmp_path / "local")))
    assert reference["filters"]["near_dedup"] == 8  # the planted near-copies (exact copies are exact_dedup)
    assert reference["documents"]["kept"] == 35 + 32

    out = tmp_path / "array"
    cli = [sys.executable, "-m", "data_prep", *overrides(raw, out), "--executor", "slurm", "--dry-run"]
    dry = subprocess.run([*cli, "runtime.slurm.array_tasks=2"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    names = re.findall(r"^(\w+)=\$\(sbatch ", dry.stdout, re.MULTILINE)
    assert names == ["clean", "signatures", "buckets", "plan", "tokenizer", "tokenize", "merge"]
    for previous, name in zip(names, names[1:]):
        assert f'--dependency=afterok:"${previous}"' in next(
            x for x in dry.stdout.splitlines() if x.startswith(f"{name}=")
        )
    assert not (out / "manifest.json").exists()  # a dry run submits and runs nothing
    (folder,) = (out / ".work" / "slurm").glob("*/submissions/*")
    shards = json.loads(next((out / ".work" / "slurm").glob("*/shards.json")).read_text())
    assert sum(1 for s in shards if s["path"].endswith("f_large.jsonl")) >= 3  # the large file is cut

    job_names = []
    for name in names:  # each stage after the previous one, as --dependency=afterok orders them
        script = folder / f"{name}.sbatch"
        job_names.append(re.search(r"^#SBATCH --job-name=(.*)$", script.read_text(), re.MULTILINE).group(1))
        size = _array_size(script)
        assert size == (2 if name in ("clean", "signatures", "buckets", "tokenize") else 1)
        if name == "merge":  # a tokenize task killed while writing left its temporary file
            (out / ".work" / "tokens" / ".shard.tokens.4242.tmp").write_bytes(b"half")
        tasks = [_task(script, rank) for rank in range(size)]  # the array's tasks at the same time
        for rank, proc in enumerate(tasks):
            log = proc.communicate(timeout=300)[0]
            assert proc.returncode == 0, f"{name} task {rank}:\n{log[-3000:]}"
            assert log.splitlines()[-1].startswith(f"data_prep: {name} task {rank} of {size} completed in ")
    assert job_names == ["dp-clean", "dp-sigs", "dp-bkts", "dp-plan", "dp-vocab", "dp-tok", "dp-merge"]
    assert log.splitlines()[-1].endswith(f"wrote {out / 'manifest.json'} (train {reference['train']['tokens']} "
                                         f"tokens, valid {reference['valid']['tokens']} tokens)")  # fmt: skip
    assert list(out.rglob("*.tmp")) == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["run"]["executor"] == "slurm"
    assert manifest_without_run(manifest) == manifest_without_run(reference)
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    assert "nothing to submit" in subprocess.run(cli, cwd=REPO, capture_output=True, text=True, timeout=120).stdout


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """Stub sbatch (records argv, prints job id 4242) and squeue (prints $SQUEUE_OUT)."""
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    live = tmp_path / "squeue_out"
    live.write_text("")
    bin_dir = stub_bin(tmp_path, {"sbatch": dumping("sbatch"), "squeue": f'cat "{live}"'})
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DUMP_DIR", str(dump_dir))
    return {"dumps": dump_dir, "live": live}


def _submitted(dump_dir: Path) -> list[dict]:
    calls = sorted(dump_dir.glob("sbatch-*.json"), key=lambda p: p.stat().st_mtime_ns)
    out = [json.loads(p.read_text()) for p in calls]
    for p in calls:
        p.unlink()
    return out


def test_stub_sbatch_chain_and_resubmission_of_unfinished_tasks(tmp_path, cluster):
    raw = tmp_path / "raw"
    planted_inputs(raw)
    cfg = load_data_prep_config(None, [*planted_overrides(raw, tmp_path / "out"), "runtime.slurm.array_tasks=2"])
    assert submit(cfg, dry_run=False) == 0
    calls = _submitted(cluster["dumps"])
    scripts = [Path(c["argv"][-1]).name for c in calls]
    assert scripts == ["clean.sbatch", "plan.sbatch", "tokenizer.sbatch", "tokenize.sbatch", "merge.sbatch"]
    assert not any(a.startswith("--dependency") for a in calls[0]["argv"])
    for call in calls[1:]:
        assert "--dependency=afterok:4242" in call["argv"] and "--kill-on-invalid-dep=yes" in call["argv"]
    assert "#SBATCH --array=0-1\n" in Path(calls[0]["argv"][-1]).read_text()

    cluster["live"].write_text("4242\n")  # still queued: no second submission
    with pytest.raises(DataPrepError, match="4242 of an earlier submission are still queued"):
        submit(cfg, dry_run=False)
    cluster["live"].write_text("")

    folder, chain, tasks = plan_submission(cfg)
    assert run_array_task(folder, "clean", 0) == 0  # task 1 never ran (preempted before it started)
    assert submit(cfg, dry_run=False) == 0
    calls = _submitted(cluster["dumps"])
    assert "#SBATCH --array=1\n" in Path(calls[0]["argv"][-1]).read_text()  # only the unfinished task
    assert len(calls) == 5

    for _ in range(3):  # the retry limit: max_retries=2 allows 3 failed attempts
        attempt = attempts.begin(folder / "attempts" / "clean-1.json", os.getpid())
        attempts.finish(folder / "attempts" / "clean-1.json", attempt, 1, "failed", close_earlier=False)
    assert failures(folder, "clean", 1) == 3
    with pytest.raises(DataPrepError, match=r"max_retries=2 used up: clean task 1 \(3 failed attempts\)"):
        submit(cfg, dry_run=False)
    assert _submitted(cluster["dumps"]) == []


def test_sigterm_ends_a_task_as_preempted_not_failed(tmp_path, monkeypatch):
    import data_prep.slurm as slurm

    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "a.jsonl", [english_doc(i) for i in range(5)])
    cfg = load_data_prep_config(None, [f"input.paths=[{raw}]", f"output.dir={tmp_path / 'out'}"])
    folder = plan_submission(cfg)[0]

    def killed(*args):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(slurm, "run_task", killed)
    assert run_array_task(folder, "clean", 0) == 75
    log = attempts.read(folder / "attempts" / "clean-0.json")
    assert [a.outcome for a in log.attempts] == ["preempted"] and failures(folder, "clean", 0) == 0


def test_sbatch_values_are_checked(tmp_path, cluster):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_jsonl(raw / "a.jsonl", [english_doc(i) for i in range(5)])
    cfg = load_data_prep_config(
        None, [f"input.paths=[{raw}]", f"output.dir={tmp_path / 'out'}", "runtime.slurm.partition='a b'"]
    )
    with pytest.raises(ValueError, match="slurm partition: 'a b' holds characters not allowed"):
        submit(cfg, dry_run=False)


def test_an_edit_tokenized_by_array_tasks_leaves_the_merge_to_submit(tmp_path):
    """After an input is edited, the tokenize tasks rewrite its token stream; until the merge
    has run, no manifest may say the output is current (a resubmission said "nothing to
    submit" and left the old .bin/.idx)."""
    from data_prep.pipeline import check_inputs, run_task
    from data_prep.stages import STAGES

    raw = tmp_path / "raw"
    raw.mkdir()
    docs = [english_doc(i) for i in range(8)]
    write_jsonl(raw / "a.jsonl", docs)
    first = [f"input.paths=[{raw}/a.jsonl]", "tokenizer.vocab_size=400", "runtime.workers=0", "runtime.progress=false"]
    run(load_data_prep_config(None, [*first, f"output.dir={tmp_path / 'first'}"]))
    cfg = load_data_prep_config(
        None,
        [
            *first,
            f"output.dir={tmp_path / 'out'}",
            f"tokenizer.path={tmp_path / 'first' / 'tokenizer.model'}",
            "split.valid_fraction=0",
        ],
    )
    run(cfg)
    write_jsonl(raw / "a.jsonl", [docs[0].replace("This is report", "That is report"), *docs[1:]])
    shards = check_inputs(cfg)
    for stage in STAGES:
        if stage.name in ("clean", "plan", "tokenizer", "tokenize"):
            run_task(cfg, shards, stage, 0, 1)
    _, chain, _ = plan_submission(cfg)
    assert [(stage.name, ranks) for stage, ranks in chain] == [("merge", [0])]

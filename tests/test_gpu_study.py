"""The GPU study file (configs/studies/gpu_h100.yaml) and the study keys a GPU study needs.

What is checked here, without a GPU: the file passes the study validator; its runs are what
the issue asks for (presets, depths, width, sequence, steps, schedule, bf16, seeds); the run
configs it makes load as run configs; the runs the planner plans on a planted answer fit the
stated budget by the stated cost model (benchmarks/gpu_study_budget.py); no run reads more
than two passes of the corpus; and the CPU studies' base run configs are byte-for-byte what
they were before these keys existed (so their results are too).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from launch.errors import LaunchError
from runconfig import load_config
from runconfig.schema import RunConfig, resolve
from study.corpus import CorpusError
from study.data import base_config, carried_manifest, prepare_data
from study.spec import STUDIES_DIR, load_study

REPO = Path(__file__).resolve().parents[1]
MIX_TRAIN_TOKENS = 8_841_957  # the mix corpus at vocab 8192 (docs/data_prep.md, "Measured")
BUDGET_MINUTES = 20.0  # one H100, the issue's budget

# sha256 of yaml.safe_dump(base_config(study, Path("/data/x"))) computed with the code before
# the GPU keys (commit b1be95f): the CPU studies' runs must not change.
CPU_BASE_CONFIGS = {
    "default": "012285bbe895118d0480b50158e85006d93cb3e16091a1e1c5cfb30c3fca91fd",
    "fig10": "012285bbe895118d0480b50158e85006d93cb3e16091a1e1c5cfb30c3fca91fd",
    "quick": "9c95b182f1eff67c0d0210be7770401b5743e90767f9a6a4da8ebbdfaf68f55e",
    "w128_d16": "56ef4144a3c037e903c696854ed4323ef992cc8e7813083f6e05a80edb4ad913",
}


def _budget_module():
    spec = importlib.util.spec_from_file_location("gpu_study_budget", REPO / "benchmarks" / "gpu_study_budget.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_gpu_study_is_what_the_issue_asks_for():
    s = load_study("gpu_h100")
    assert s.presets == ("sp", "depth_mup", "ode")
    assert s.depths[0] == 2 and s.depths[-1] >= 32 and list(s.depths) == sorted(s.depths)
    assert s.hidden_size >= 256 and s.seq_length >= 512 and s.steps >= 500 and 0 < s.warmup < s.steps
    assert s.device == "cuda" and s.precision == "bf16" and s.runs_per_gpu > 1 and s.seeds >= 2 and s.claims
    cfg = base_config(s, Path("/data/mix"))
    assert cfg["scheduler"] == {"decay_style": "cosine", "warmup_steps": s.warmup}
    assert cfg["training"]["precision"] == "bf16" and cfg["parallel"] == {"device": "cuda"}
    assert cfg["model"].get("block", "standard") == "standard"  # pre-LN attention + MLP blocks


def test_gpu_study_run_configs_load_for_every_preset_and_depth(tmp_path):
    s = load_study("gpu_h100")
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(base_config(s, tmp_path / "data"), sort_keys=False))
    for preset in s.presets:
        for depth in s.depths:
            cfg = load_config(RunConfig, path, [f"parametrization.preset={preset}", f"model.num_layers={depth}"])
            assert cfg.training.precision == "bf16" and cfg.model.num_layers == depth
    ode = resolve(load_config(RunConfig, path, ["parametrization.preset=ode", "model.num_layers=32"]))
    assert ode.alpha == 1.0 and ode.gamma == 0.0  # CompleteP's choice


def test_gpu_study_planned_runs_fit_the_stated_budget():
    budget = _budget_module()
    s = load_study("gpu_h100")
    e = budget.estimate(s, budget.Costs())
    assert set(e["by_depth"]) == set(s.depths)
    # the study file states these numbers; a change of the file must restate them
    assert e["runs"] == 87 and e["by_depth"] == {2: 14, 4: 18, 8: 19, 16: 18, 32: 18}
    assert e["packed_s"] / 60 <= BUDGET_MINUTES
    no_step_gain = budget.estimate(s, budget.Costs(step_gain=1.0))  # only the start-ups overlap
    assert no_step_gain["packed_s"] / 60 <= BUDGET_MINUTES
    assert e["tokens_per_run"] <= 2 * MIX_TRAIN_TOKENS  # no run repeats its data more than twice


def test_planned_runs_are_a_function_of_the_planner_not_of_the_noise():
    budget = _budget_module()
    s = load_study("gpu_h100")
    assert {len(budget.planned_runs(s, seed)) for seed in range(3)} <= {86, 87, 88, 89}


def test_cpu_studies_base_configs_are_unchanged():
    for name, digest in CPU_BASE_CONFIGS.items():
        dumped = yaml.safe_dump(base_config(load_study(name), Path("/data/x")), sort_keys=False)
        assert hashlib.sha256(dumped.encode()).hexdigest() == digest, name


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("device", "tpu", "device: must be one of ['cpu', 'cuda']"),
        ("precision", "fp16", "precision: must be one of ['auto', 'fp32', 'bf16']"),
        ("corpus", "wiki", "corpus: 'wiki' is neither a registry corpus ("),
        ("micro_batch", 5, "micro_batch: must be 0 (= batch) or divide batch 16"),
        ("runs_per_gpu", 0, "runs_per_gpu: must be >= 1"),
        ("checkpoint_interval", -1, "checkpoint_interval: must be >= 0"),
        ("runs_per_gpu", "4", "runs_per_gpu: bad value '4'"),
    ],
)
def test_bad_gpu_study_keys_name_the_file_and_key(tmp_path, key, value, message):
    raw = yaml.safe_load((STUDIES_DIR / "gpu_h100.yaml").read_text())
    raw[key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(LaunchError, match=re.escape(f"{path}: {message}")):
        load_study(str(path))


def test_bf16_on_cpu_is_refused(tmp_path):
    raw = yaml.safe_load((STUDIES_DIR / "gpu_h100.yaml").read_text())
    raw["device"] = "cpu"
    path = tmp_path / "cpu_bf16.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(LaunchError, match="precision: bf16 needs device: cuda"):
        load_study(str(path))


def _manifest(out: Path, corpus: str, vocab: int) -> None:
    (out / "data").mkdir(parents=True)
    manifest = {"inputs": [{"path": f"/elsewhere/corpus/{corpus}.jsonl", "sha256": "0" * 64}],
                "tokenizer": {"vocab_size": vocab, "eod_id": 0}, "train": {"prefixes": ["train"], "tokens": 5, "documents": 2},
                "valid": {"prefixes": ["valid"], "tokens": 1, "documents": 1}}  # fmt: skip
    (out / "data" / "manifest.json").write_text(json.dumps(manifest))


def test_data_built_elsewhere_is_used_without_its_corpus(tmp_path):
    """A GPU node gets the tokenized data without the corpus (it cannot download it)."""
    s = load_study("gpu_h100")
    _manifest(tmp_path / "ok", "mix", 8192)
    assert carried_manifest(tmp_path / "ok", s).train_tokens == 5
    assert carried_manifest(tmp_path / "none", s) is None  # nothing built: build it here
    _manifest(tmp_path / "other", "kjv", 8192)
    with pytest.raises(CorpusError, match=r"built from \['kjv.jsonl'\] at vocab 8192, but study 'gpu_h100' trains"):
        carried_manifest(tmp_path / "other", s)
    (tmp_path / "ok" / "corpus").mkdir()
    (tmp_path / "ok" / "corpus" / "mix.jsonl").write_text("")
    assert carried_manifest(tmp_path / "ok", s) is None  # the corpus is here: data_prep decides


def test_carried_data_without_its_corpus_marker_is_used(tmp_path):
    """The H100's first call got data/ without corpus.name and was refused (2026-11-25)."""
    s = load_study("gpu_h100")
    _manifest(tmp_path / "node", "mix", 8192)
    assert prepare_data(tmp_path / "node", s, 1) == tmp_path / "node" / "data"
    assert (tmp_path / "node" / "corpus.name").read_text() == "mix\n"
    _manifest(tmp_path / "other", "kjv", 8192)  # no marker, and the manifest names another corpus
    with pytest.raises(CorpusError, match=r"built from \['kjv.jsonl'\]"):
        prepare_data(tmp_path / "other", s, 1)
    (tmp_path / "bare" / "data").mkdir(parents=True)  # no marker, no manifest: which corpus is unknown
    with pytest.raises(CorpusError, match="was built before corpora were recorded"):
        prepare_data(tmp_path / "bare", s, 1)


def test_gpu_study_script_parses_and_names_its_steps():
    import subprocess

    script = REPO / "benchmarks" / "gpu_study.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    usage = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert usage.returncode == 2 and all(
        f"gpu_study.sh {step}" in usage.stdout for step in ("prepare", "bench", "part")
    )


def test_travel_counts_what_a_device_call_sends_untracked_files_too(tmp_path):
    """The device tool sends tracked and untracked-not-ignored files with the carry, 64 MiB in
    all; `prepare` counted tracked files only, so an untracked file could make the call refuse
    a tree that `prepare` had passed."""
    import shutil
    import subprocess

    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    for name in ("gpu_study.sh", "node_env.sh"):
        shutil.copy(REPO / "benchmarks" / name, repo / "benchmarks" / name)
    (repo / ".gitignore").write_text("/demo_out/\nignored.bin\n")
    (repo / "tracked.bin").write_bytes(b"\0" * 2**20)
    (repo / "ignored.bin").write_bytes(b"\0" * 40 * 2**20)  # stays here
    (repo / "demo_out" / "gpu_carry" / "data").mkdir(parents=True)
    (repo / "demo_out" / "gpu_carry" / "data" / "train.bin").write_bytes(b"\0" * 50 * 2**20)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)

    def travel():
        return subprocess.run(["bash", "benchmarks/gpu_study.sh", "travel"], cwd=repo, capture_output=True, text=True)

    done = travel()
    assert done.returncode == 0, done.stderr
    assert "data 50.0 MiB" in done.stdout and "working tree 1.0 MiB" in done.stdout  # + the scripts' few KiB
    assert "together 51.0 MiB of 64" in done.stdout
    (repo / "notes.bin").write_bytes(b"\0" * 14 * 2**20)  # untracked, not ignored: it travels
    done = travel()
    assert done.returncode == 2 and "working tree 15.0 MiB" in done.stdout and "together 65.0 MiB" in done.stdout
    assert "over 64 MiB: a device call would refuse it" in done.stderr


def test_a_gpu_study_on_a_machine_without_a_gpu_stops_before_its_data(tmp_path, monkeypatch):
    """`python -m launch demo --study gpu_h100` on a CPU machine prepared the mix corpus (2.5 min),
    ran its 5 base runs, each exiting 2 ("parallel.device: cuda requested but no CUDA device is
    available"), and ended blaming the study's LRs: "every run at L=2 diverged or failed ... its
    base_lrs_log2 reach no LR that trains at L=2". Now it stops first, naming the cause."""
    import study.demo as demo
    import study.preview as preview

    def no_data_prep(*args, **kwargs):
        raise AssertionError("the study prepared its data")

    monkeypatch.setattr(demo, "prepare_data", no_data_prep)
    monkeypatch.setattr(preview, "local_cuda_devices", lambda: 0)
    gpu, cpu = load_study("gpu_h100"), load_study("quick")
    with pytest.raises(LaunchError, match=r"study 'gpu_h100': device: cuda, but this machine has no CUDA device"):
        demo.run_demo(tmp_path / "out", gpu, 1)
    assert not (tmp_path / "out").exists()
    preview.check_local_gpu(gpu, "slurm")  # the cluster's nodes have the GPUs, a login node none
    preview.check_local_gpu(cpu, "local")  # a CPU study needs none
    monkeypatch.setattr(preview, "local_cuda_devices", lambda: 1)
    preview.check_local_gpu(gpu, "local")

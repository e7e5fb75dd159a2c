"""train_gpt.py end to end on CPU: contract files, resume, preemption, divergence, errors, TP/DP."""

from __future__ import annotations

import fcntl
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY, env, free_port

BASE = [
    "training.steps=20",
    "checkpoint.interval=5",
    "logging.interval=1",
    "scheduler.warmup_steps=3",
    "logging.progress_bar=false",
]


def train(run_dir: Path, *overrides: str, torchrun: int = 0, check: bool = True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run_dir}", *BASE, *overrides]
    if torchrun:
        cmd[1:2] = [
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            str(torchrun),
            "--master-port",
            str(free_port()),
            "train_gpt.py",
        ]
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=900)
    if check:
        assert out.returncode == 0, out.stderr[-4000:]
    return out


def rows(run_dir: Path, kind: str = "train") -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def logged_all(run_dir: Path) -> list[str]:
    return (run_dir / "train.log").read_text().splitlines()


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted 20-step run (the yardstick for resume tests)."""
    run = tmp_path_factory.mktemp("ref") / "run"
    train(run)
    return run


def test_every_file_of_a_run_directory_is_a_row_of_the_contract(reference):
    """docs/contracts.md's run-directory table is what a run writes: `.lock` (the run lock) and
    `.index_cache/` (megatron's index cache) were in every run directory and in no row."""
    import re

    rows = set(re.findall(r"^\| `([^`]+?)/?` \|", (REPO / "docs" / "contracts.md").read_text(), flags=re.M))
    written = {p.name for p in reference.iterdir()}
    assert {".lock", ".index_cache", "config.yaml", "summary.json", "checkpoints"} <= written
    assert written - rows == set(), f"in {reference} but not in docs/contracts.md's table"


def test_run_directory_contract(reference):
    s = summary(reference)
    assert s["status"] == "completed" and s["exit_code"] == 0 and s["steps"] == 20
    assert s["tokens"] == 20 * 8 * 64
    assert [e["step"] for e in s["evals"]] == [10, 20] and [e["fraction"] for e in s["evals"]] == [0.5, 1.0]
    assert s["final_val_loss"] == s["evals"][-1]["val_loss"] < s["evals"][0]["val_loss"]
    for key in ("preset", "num_layers", "hidden_size", "lr", "block_multiplier", "seed", "wall_time_s"):
        assert key in s
    train_rows = rows(reference)
    assert [r["step"] for r in train_rows] == list(range(1, 21))
    first = train_rows[0]
    assert set(first) >= {"step", "tokens", "loss", "grad_norm", "lr", "tokens_per_s", "step_time_s"}
    table = json.loads((reference / "parametrization.json").read_text())
    assert table["preset"] == "depth_mup" and table["depth_ratio"] == 2.0
    assert (reference / "config.yaml").is_file()
    assert (reference / "checkpoints" / "latest").read_text().strip() == "step_00000020"


def test_logged_group_lrs_follow_the_table(reference):
    # depth_mup, L=4, L0=2: in-block groups run at 2^-1/2 of eta; warmup 3 steps then cosine to 0.1 eta.
    row = rows(reference)[3]  # step 4 uses the scheduler value after 3 increments: the peak
    lr = row["lr"]
    assert lr["embedding+output"] == pytest.approx(0.003)
    assert lr["hidden_in+hidden_out"] == pytest.approx(0.003 * 2**-0.5)
    assert lr["block_vector"] == pytest.approx(0.003 * 2**-0.5)


def test_each_groups_logged_lr_is_the_schedules_at_every_step(reference):
    """Step k trains with megatron's schedule after k - 1 increments (the first at LR 0): linear
    warmup over 3 steps, then cosine over the other 17 to 0.1 x peak; each group's peak is eta
    times its role's factor (depth-muP's hidden LR (L/L0)^-1/2 = 2^-1/2 of the embedding's)."""
    factors = {"embedding+output": 1.0, "final_norm": 1.0, "hidden_in+hidden_out": 2**-0.5, "block_vector": 2**-0.5}
    for row in rows(reference):
        n = row["step"] - 1
        if n <= 3:
            schedule = n / 3
        else:
            schedule = 0.1 + 0.9 * 0.5 * (math.cos(math.pi * (n - 3) / 17) + 1)
        assert set(row["lr"]) == set(factors), row["lr"]
        for group, factor in factors.items():
            assert row["lr"][group] == pytest.approx(0.003 * factor * schedule, rel=1e-12, abs=0), (row["step"], group)


def test_logged_rates_follow_the_hand_computed_flops_and_tokens(reference):
    """The tiny model (width 64, 4 heads, 4 layers, sequence 64, padded vocabulary 512, GELU MLP
    4 x 64), forward FLOPs per token: per layer QKV 2*64*192 = 24,576, scores and context
    2*2*64*64 = 16,384, projection 2*64*64 = 8,192, MLP 2*(2*64*256) = 65,536: 114,688; x 4 layers
    + logits 2*64*512 = 65,536: 524,288. x 3 (backward) = 1,572,864 = 6N + 6*h*V + 12*L*s*h
    (N = 12*64^2*4 = 196,608 matrix weights: 1,179,648 + 196,608 + 196,608). A step is 8 x 64 =
    512 tokens: 805,306,368 FLOPs. Every row's rates are that step over its step time (CPU: no
    peak, no MFU)."""
    for row in rows(reference):
        assert row["tokens"] == row["step"] * 512
        assert row["tokens_per_s"] * row["step_time_s"] == pytest.approx(512, rel=1e-9)
        assert row["tflops_per_gpu"] * 1e12 * row["step_time_s"] == pytest.approx(805_306_368, rel=1e-9)
        assert row["mfu"] is None


def test_eval_rows_carry_the_perplexity(reference):
    evals = rows(reference, "eval")
    assert [e["step"] for e in evals] == [10, 20]
    for e in evals:
        assert e["val_ppl"] == pytest.approx(math.exp(e["val_loss"]), rel=1e-12)


def test_training_line_every_interval_in_console_and_train_log(tmp_path):
    """A Megatron-style line every logging.interval steps and at the last, the same on the console and
    in train.log, with metrics.jsonl's numbers; the bar (asked for) stays off when stderr is no terminal."""
    run = tmp_path / "run"
    out = train(run, "training.steps=7", "logging.interval=3", "logging.progress_bar=true", "checkpoint.final=false")
    console = [line for line in out.stderr.splitlines() if " INFO iteration " in line]
    logged = [line for line in (run / "train.log").read_text().splitlines() if " INFO iteration " in line]
    assert console == logged and len(logged) == 3, out.stderr[-2000:]
    assert "\r" not in out.stderr and "step/s" not in out.stderr  # no progress bar in a pipe
    for line, row in zip(logged, rows(run)):
        assert f"iteration {row['step']}/7 | consumed samples: {row['step'] * 8} |" in line
        assert f"| lm loss: {row['loss']:.6E} | grad norm: {row['grad_norm']:.3f} |" in line
        assert f"| tokens/s: {row['tokens_per_s']:,.0f} |" in line and "| ETA: " in line
    assert [r["step"] for r in rows(run)] == [3, 6, 7]
    # the first step's time is said on its own line and left out of iteration 3's (its rate is steps 2-3)
    warmup = [line for line in logged_all(run) if " INFO warm-up: " in line]
    assert len(warmup) == 1 and warmup[0].endswith("left out of the elapsed time per iteration at iteration 3")
    assert " INFO warm-up: iteration 1, the first of this session, took " in warmup[0]
    # the global batch's split, as Megatron-LM's "setting number of micro-batches" line
    assert "7 steps x 8 sequences (2 micro-batches of 4 x data-parallel size 1)" in out.stderr
    # and the session's last line, summary.json's numbers (7 x 8 x 64 tokens; the final eval's PPL)
    final = summary(run)["final_val_loss"]
    last = out.stderr.splitlines()[-1]
    assert " INFO completed: 7/7 steps, 3,584 tokens, " in last
    assert last.endswith(f"| final val_loss {final:.4f} | PPL {math.exp(final):.4g}")


def test_sigkill_after_checkpoint_then_resume_equals_uninterrupted(reference, tmp_path):
    """Also with diagnostics every step (the reference has none: same losses), whose rows past
    the restored checkpoint are dropped on resume like the metrics rows."""
    run = tmp_path / "run"
    diag = "logging.diagnostics_interval=1"
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run}", *BASE, diag]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = run / "checkpoints" / "latest"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if latest.is_file() and latest.read_text().strip() == "step_00000010":
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.01)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (run / "summary.json").exists()
    train(run, diag)
    got, want = rows(run), rows(reference)
    assert [r["step"] for r in got] == list(range(1, 21))  # no duplicate or missing steps
    from rundir.files import read_diagnostics

    keys = [(r["step"], r.get("param") or (r["layer"], r["kind"])) for r in read_diagnostics(run)]
    assert len(keys) == len(set(keys)) and sorted({k[0] for k in keys}) == list(range(1, 21))
    for g, w in zip(got, want):
        assert (g["loss"], g["grad_norm"], g["lr"]) == (w["loss"], w["grad_norm"], w["lr"]), g["step"]
    assert [e["val_loss"] for e in summary(run)["evals"]] == [e["val_loss"] for e in summary(reference)["evals"]]


def test_sigterm_preempts_with_checkpoint_and_resumes(reference, tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "train_gpt.py", "--config", str(TINY), f"run.dir={run}", *BASE, "checkpoint.interval=100"]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.is_file() and len(metrics.read_text().splitlines()) >= 4:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.01)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 75, err[-3000:]
    s = summary(run)
    assert s["status"] == "preempted" and s["reason"].startswith("preempted") and s["exit_code"] == 75
    stopped = s["steps"]
    assert (run / "checkpoints" / "latest").read_text().strip() == f"step_{stopped:08d}"
    train(run, "checkpoint.interval=100")
    got, want = rows(run), rows(reference)
    assert [r["loss"] for r in got] == [r["loss"] for r in want]
    assert summary(run)["status"] == "completed"
    # consumed tokens continue across the resume: step x 512, neither reset nor counted twice
    assert [(r["step"], r["tokens"]) for r in got] == [(r["step"], r["tokens"]) for r in want]
    assert [r["step"] for r in got] == list(range(1, 21)) and got[-1]["tokens"] == 20 * 512
    assert [(e["step"], e["tokens"]) for e in rows(run, "eval")] == [(10, 5120), (20, 10240)]
    assert summary(run)["tokens"] == summary(reference)["tokens"] == 10240


SAVES_DRIVER = r"""
import collections, json, os, signal, sys
import train_gpt
from training.runner import Trainer
saves, save, step = collections.Counter(), Trainer._save, Trainer._train_step
def counted(self, done):
    saves[done] += 1
    save(self, done)
def signalled(self, s, i):
    if i == 2:  # during the step that ends at 3, a checkpoint step of interval 3
        os.kill(os.getpid(), signal.SIGTERM)
    return step(self, s, i)
Trainer._save, Trainer._train_step = counted, signalled
rc = train_gpt.main(sys.argv[1:])
print(json.dumps({"rc": int(rc), "saves": saves}))
"""


def test_a_signal_on_a_checkpoint_step_saves_that_step_once(tmp_path):
    """The periodic save already holds the step: a second would spend the signal's grace again."""
    run = tmp_path / "run"
    args = ["--config", str(TINY), f"run.dir={run}", *BASE, "checkpoint.interval=3"]
    out = subprocess.run([sys.executable, "-c", SAVES_DRIVER, *args], cwd=REPO, env=env(), capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    got = json.loads(out.stdout.splitlines()[-1])
    assert got == {"rc": 75, "saves": {"3": 1}}, out.stderr[-3000:]
    assert summary(run)["steps"] == 3 and (run / "checkpoints" / "latest").read_text().strip() == "step_00000003"


STARTUP_SIGNAL_DRIVER = r"""
import os, runpy, signal, sys
class SignalOnImport:  # the signal lands while module $AT is being imported, as a Ctrl-C in the first seconds
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["AT"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), getattr(signal, os.environ["SIG"]))
        return None
sys.meta_path.insert(0, SignalOnImport())
sys.argv = ["train_gpt.py", *sys.argv[1:]]
runpy.run_path("train_gpt.py", run_name="__main__")
"""


# torch: the first import. numpy: imported by torch's C module while it is created, which carries on
# without numpy when that import fails: a signal raised there as an exception was lost (the run
# trained to the end, exit 0) or left numpy half-imported (exit 1, RecursionError).
@pytest.mark.parametrize("sig,module", [("SIGINT", "torch"), ("SIGTERM", "torch"), ("SIGTERM", "numpy")])
def test_a_signal_during_the_imports_exits_75_with_one_line(tmp_path, sig, module):
    run = tmp_path / "run"
    args = ["--config", str(TINY), f"run.dir={run}", *BASE]
    out = subprocess.run([sys.executable, "-c", STARTUP_SIGNAL_DRIVER, *args], cwd=REPO,
                         env={**env(), "SIG": sig, "AT": module}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 75, out.stderr[-3000:]
    assert out.stderr.splitlines() == [
        f"train_gpt.py: interrupted by {sig} while starting, nothing trained: rerun to start (or resume)"
    ]
    assert not run.exists()


LATE_START_SIGNAL_DRIVER = r"""
import os, runpy, signal, sys
import rundir.lock
acquire = rundir.lock.RunLock.acquire
def acquire_then_signal(self):  # after train_gpt.py's last check, before the trainer's own handlers
    os.kill(os.getpid(), signal.SIGTERM)
    return acquire(self)
rundir.lock.RunLock.acquire = acquire_then_signal
sys.argv = ["train_gpt.py", *sys.argv[1:]]
runpy.run_path("train_gpt.py", run_name="__main__")
"""


def test_a_signal_between_the_start_up_and_the_trainers_handlers_preempts_the_run(tmp_path):
    """The start-up's handler records it; the trainer's flag takes it over: one step, a checkpoint, 75."""
    run = tmp_path / "run"
    args = ["--config", str(TINY), f"run.dir={run}", *BASE]
    out = subprocess.run([sys.executable, "-c", LATE_START_SIGNAL_DRIVER, *args], cwd=REPO, env=env(),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 75, out.stderr[-3000:]
    assert (summary(run)["status"], summary(run)["steps"]) == ("preempted", 1)
    assert summary(run)["reason"] == "preempted (SIGTERM) at step 1"


TEARDOWN_SIGNAL_DRIVER = r"""
import os, runpy, signal, sys, time
class SignalInTeardown:  # deleted while the interpreter tears its modules down, after its exit code is set
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
keep = SignalInTeardown()
sys.argv = ["train_gpt.py", *sys.argv[1:]]
runpy.run_path("train_gpt.py", run_name="__main__")
"""


def test_a_signal_during_the_interpreter_exit_keeps_the_summary_exit_code(tmp_path):
    run = tmp_path / "run"
    args = ["--config", str(TINY), f"run.dir={run}", *BASE, "training.steps=4", "eval.batches=1"]
    out = subprocess.run([sys.executable, "-c", TEARDOWN_SIGNAL_DRIVER, *args], cwd=REPO, env=env(),
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert (summary(run)["status"], summary(run)["exit_code"]) == ("completed", 0)
    assert out.returncode == 0, out.stderr[-3000:]


def test_a_corrupt_latest_checkpoint_is_refused_naming_it_and_the_others(reference, tmp_path):
    """Exit 2 with the file and the way out (no traceback, no 'failed' summary); following the
    way out resumes from the earlier checkpoint and ends on the uninterrupted run's losses."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "summary.json").unlink()  # as if killed after its last checkpoint
    ckpts = run / "checkpoints"
    latest = ckpts / (ckpts / "latest").read_text().strip()
    assert latest.name == "step_00000020"
    model = latest / "model_tp0_pp0.pt"
    model.write_bytes(model.read_bytes()[:100])  # truncated on disk
    out = train(run, check=False)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and not (run / "summary.json").exists()
    lines = out.stderr.splitlines()
    assert lines[0].startswith(f"error: cannot resume from {latest}: RuntimeError: PytorchStreamReader failed")
    assert lines[1] == (
        f"  other checkpoints: step_00000015: write one's name into {ckpts / 'latest'} to resume from it, "
        "or give --force to retrain"
    )
    (latest / "common.json").unlink()  # a checkpoint folder that is not complete
    out = train(run, check=False)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "which is not a complete checkpoint" in out.stderr and "other checkpoints: step_00000015" in out.stderr
    # exit.json says it too (a launcher that loses the code, torchrun or srun, reads it there)
    record = json.loads((run / "exit.json").read_text())
    assert (record["exit_code"], record["status"], record["rank"]) == (2, "invalid", 0)
    assert out.stderr.startswith(f"error: {record['reason']}")
    (ckpts / "latest").write_text("step_00000015\n")
    train(run)
    assert not (run / "exit.json").exists()  # the refusal no longer stands
    assert [r["loss"] for r in rows(run)] == [r["loss"] for r in rows(reference)]
    assert summary(run)["final_val_loss"] == summary(reference)["final_val_loss"]


def test_checkpoints_without_latest_resume_from_the_newest(reference, tmp_path):
    """A kill between a save's rename and its `latest` (or a pointer removed by hand) left
    complete folders: the run resumes from the newest, not from step 0 over them."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    for name in ("summary.json", "checkpoints/latest"):
        (run / name).unlink()
    shutil.rmtree(run / "checkpoints" / "step_00000020")
    out = train(run)
    said = out.stdout + out.stderr
    assert "checkpoints/latest is missing; resuming from the newest complete checkpoint, step_00000015" in said
    assert f"resumed from {run / 'checkpoints' / 'step_00000015'} (step 15)" in said
    assert [r["loss"] for r in rows(run)] == [r["loss"] for r in rows(reference)]
    assert summary(run)["final_val_loss"] == summary(reference)["final_val_loss"]


def test_resume_refuses_a_different_parametrization(tmp_path):
    run = tmp_path / "run"
    train(run, "training.steps=30", "checkpoint.final=false")  # completed: a rerun is a no-op
    out = train(run, "training.steps=30", "checkpoint.final=false", "logging.interval=2")  # a resume may change it
    assert out.returncode == 0 and "already completed" in out.stdout
    out = train(run, "training.steps=30", "checkpoint.final=false", "parametrization.block_multiplier=2.0", check=False)
    assert out.returncode == 2 and "already completed with another config" in out.stderr  # not reported as done
    assert "parametrization.block_multiplier: 1.0 -> 2.0" in out.stderr and "Traceback" not in out.stderr
    (run / "summary.json").unlink()  # as if the run had been preempted after its last checkpoint
    out = train(run, "training.steps=30", "checkpoint.final=false", "parametrization.block_multiplier=2.0", check=False)
    assert out.returncode == 2  # the key to put back first, not the resolved table it changes
    assert (
        "the config differs from the checkpoint's; refusing to resume:\n  parametrization.block_multiplier: 1.0 -> 2.0\n"
        in out.stderr
    )
    assert "(the resolved parametrization differs with them: " in out.stderr and "params[" not in out.stderr


def test_absurd_lr_diverges_with_its_own_exit_code(tmp_path):
    run = tmp_path / "run"
    out = train(run, "optimizer.lr=1000", "parametrization.preset=sp", "optimizer.clip_grad=0", check=False)
    assert out.returncode == 3, out.stderr[-2000:]
    s = summary(run)
    assert s["status"] == "diverged" and s["exit_code"] == 3 and s["final_val_loss"] is None
    assert "above bound" in s["reason"] or "nan" in s["reason"] or "inf" in s["reason"]
    assert s["steps"] < 20


@pytest.mark.parametrize(
    "override,needle",
    [
        ("model.num_layerz=3", "model.num_layerz"),
        ("optimizer.lr=fast", "optimizer.lr"),
        ("parametrization.preset=deep", "parametrization.preset"),
        ("optimizer.name=lion", "optimizer.name"),
        ("eval.at=[0.0,1.0]", "eval.at"),
        ("eval.at=[]", "eval.at: must list at least one fraction"),
        # values numpy, math or torch refuse only once training has started
        ("run.seed=-1", "run.seed: must be in [0, 2**32 - 1]"),
        ("run.seed=99999999999", "run.seed: must be in [0, 2**32 - 1]"),
        ("data.seed=-5", "data.seed: must be in [0, 2**32 - 1]"),
        ("model.vocab_size=0", "model.vocab_size: must be >= 1"),
        ("optimizer.lr=1e300", "optimizer.lr:"),
        ("optimizer.lr=1e38", "optimizer.lr: 1e+38 gives a step size of 1e+39"),
        ("training.divergence_loss_bound=-1", "training.divergence_loss_bound: must be a positive"),
        ("training.global_batch_size=7", "training.global_batch_size"),
        ("data.mock=false", "data"),
        ("model.attention_backend=fast", "model.attention_backend: must be one of"),
        # torch.optim refused these only once the run directory existed, naming no key
        ("optimizer.adam_beta1=1.0", "optimizer.adam_beta1: must be in [0, 1), got 1.0"),
    ],
)
def test_invalid_config_names_the_key(tmp_path, override, needle):
    out = train(tmp_path / "run", override, check=False)
    assert out.returncode == 2
    assert needle in out.stderr
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize(
    "override,message",
    [
        ("optimizer.adam_beta1=1.0", "optimizer.adam_beta1: must be in [0, 1), got 1.0"),
        ("optimizer.adam_beta1=-0.1", "optimizer.adam_beta1: must be in [0, 1), got -0.1"),
        ("optimizer.adam_beta2=1.5", "optimizer.adam_beta2: must be in [0, 1), got 1.5"),
        ("optimizer.adam_beta2=nan", "optimizer.adam_beta2: must be in [0, 1), got nan"),
        ("optimizer.sgd_momentum=-0.5", "optimizer.sgd_momentum: must be >= 0.0, got -0.5"),
        ("model.hidden_dropout=1.0", "model.hidden_dropout: must be in [0, 1), got 1.0"),
        ("model.attention_dropout=nan", "model.attention_dropout: must be in [0, 1), got nan"),
    ],
)
def test_optimizer_betas_and_momentum_are_checked_at_config_load(override, message):
    from runconfig import ConfigError, load_config
    from runconfig.schema import RunConfig

    with pytest.raises(ConfigError) as err:
        load_config(RunConfig, TINY, [override])
    assert message in str(err.value)
    cfg = load_config(RunConfig, TINY, ["optimizer.adam_beta1=0.0", "optimizer.adam_beta2=0.999"])
    assert (cfg.optimizer.adam_beta1, cfg.optimizer.adam_beta2) == (0.0, 0.999)


def test_seed_out_of_numpy_range_on_a_later_pipeline_stage_exits_2(tmp_path):
    # megatron seeds pipeline stage p with run.seed + 100 * p: the last stage's seed must fit too
    out = train(tmp_path / "run", "run.seed=4294967295", "parallel.pipeline_model_parallel_size=2", check=False)
    assert out.returncode == 2
    assert "run.seed: 4294967295 + 100 * pipeline rank" in out.stderr
    assert "Traceback" not in out.stderr


def test_locked_run_directory_exits_4(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / ".lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        out = train(run, check=False)
    assert out.returncode == 4 and "in use" in out.stderr


def test_deepspeed_local_rank_argument_is_accepted():
    sys.path.insert(0, str(REPO))
    from train_gpt import parse_args

    assert parse_args(["--config", "x.yaml", "--local_rank=3", "a.b=1"]).local_rank == 3
    assert parse_args(["--config", "x.yaml", "--local-rank", "2"]).local_rank == 2


@pytest.mark.parametrize("parallel", [["parallel.tensor_model_parallel_size=2"], []], ids=["tp2", "dp2"])
def test_two_processes_match_one(reference, tmp_path, parallel):
    run = tmp_path / "run"
    train(run, *parallel, torchrun=2)
    got, want = rows(run), rows(reference)
    assert [r["loss"] for r in got] == pytest.approx([r["loss"] for r in want], rel=2e-5)
    assert [r["grad_norm"] for r in got] == pytest.approx([r["grad_norm"] for r in want], rel=2e-4)
    assert [e["val_loss"] for e in summary(run)["evals"]] == pytest.approx(
        [e["val_loss"] for e in summary(reference)["evals"]], rel=2e-5
    )
    # a CPU checkpoint resumes only with the TP and PP sizes that wrote it: one process is refused
    # (exit 2, the key named), not a traceback and a "failed" summary; the data-parallel size (no
    # config key) may change: DP rank 0 wrote the whole state, which every DP rank holds
    (run / "summary.json").unlink()  # as if preempted after its last checkpoint
    metrics = (run / "metrics.jsonl").read_text()
    out = train(run, check=False)
    assert "Traceback" not in out.stderr
    if parallel:
        assert out.returncode == 2, out.stderr[-3000:]
        assert "parallel.tensor_model_parallel_size: 2 -> 1" in out.stderr
        assert not (run / "summary.json").exists() and (run / "metrics.jsonl").read_text() == metrics
    else:
        assert out.returncode == 0, out.stderr[-3000:]
        assert "written with data-parallel size 2, this run's is 1" in out.stderr
        assert summary(run)["final_val_loss"] == pytest.approx(summary(reference)["final_val_loss"], rel=2e-5)


def test_a_run_resumed_at_its_last_step_keeps_that_checkpoint(reference, tmp_path):
    """Preempted after its last step (the signal's checkpoint is the final one): the rerun
    completes without writing that checkpoint again, which deleted the folder `latest` names
    before renaming the new one in (a kill there left no checkpoint to resume from)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    (run / "summary.json").unlink()  # as if SIGTERM had come during step 20: its checkpoint saved, exit 75
    final = run / "checkpoints" / "step_00000020"
    before = {p.name: p.stat().st_ino for p in final.iterdir()}
    out = train(run)
    assert f"resumed from {final} (step 20)" in out.stdout + out.stderr
    assert (
        summary(run)["status"] == "completed" and summary(run)["final_val_loss"] == summary(reference)["final_val_loss"]
    )
    assert {p.name: p.stat().st_ino for p in final.iterdir()} == before  # the same files, not rewritten
    assert (run / "checkpoints" / "latest").read_text() == "step_00000020\n"

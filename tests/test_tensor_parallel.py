"""TP=2 under torchrun (gloo) gives the same losses and grad norms as TP=1 for a patched model."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, env, free_port


def losses(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tp2_matches_tp1():
    script = "tests/scripts/tp_losses.py"
    rope = "model.position_embedding_type=rope"  # training.attention.RotaryQKV on each rank's heads
    one = losses([sys.executable, script, "--tp", "1", rope])
    two = losses(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--master-port",
            str(free_port()),
            script,
            "--tp",
            "2",
            rope,
        ]
    )
    assert (one["tp"], two["tp"]) == (1, 2)
    assert two["losses"] == pytest.approx(one["losses"], rel=1e-5)
    assert two["grad_norms"] == pytest.approx(one["grad_norms"], rel=1e-4)
    assert one["losses"][-1] < one["losses"][0]  # the steps did something
    # training.diagnostics: global names, and RMS over the whole tensor from the shards' sums
    key = lambda r: (r["layer"] is not None, r["layer"] or 0, r.get("param") or r["kind"])  # noqa: E731
    rows1, rows2 = sorted(one["diagnostics"], key=key), sorted(two["diagnostics"], key=key)
    assert [key(r) for r in rows1] == [key(r) for r in rows2] and len(rows1) > 40
    for a, b in zip(rows1, rows2):
        for q in ("weight_rms", "update_rms", "update_ratio", "rms"):
            if q in a:
                assert b[q] == pytest.approx(a[q], rel=1e-4), (key(a), q)

"""data_prep.costs: a pilot's stage costs scaled to a larger run (hand-computed)."""

from __future__ import annotations

import pytest

from data_prep.costs import main, project


def pilot_manifest() -> dict:
    return {
        "documents": {"read": 1000, "after_filters": 800, "kept": 700},
        "inputs": [{"bytes": 1_500_000}, {"bytes": 500_000}, {"bytes": None}],  # None: could not stat it
        "train": {"tokens": 900_000},
        "valid": {"tokens": 100_000},
        "run": {
            "stage_seconds": {"plan": 0.5, "tokenizer": 36.0, "tokenize_and_merge": 50.0},
            "cost": {
                "clean": {"units": 4, "cpu_seconds": 36.0},
                "signatures": {"units": 4, "cpu_seconds": 72.0},
                "buckets": {"units": 32, "cpu_seconds": 3.6},
                "tokenize": {"units": 4, "cpu_seconds": 18.0},
                "merge": {"units": 1, "cpu_seconds": 0.36},
            },
        },
    }


def test_projection_by_hand():
    rows = {r.stage: r for r in project(pilot_manifest(), scale=1000, cores=128)}
    assert list(rows) == ["clean", "signatures", "buckets", "tokenize", "plan", "tokenizer", "merge"]
    # clean: 36 s x 1000 = 10 core-hours over 128 cores (4,000 shards at that size)
    assert rows["clean"].core_hours == pytest.approx(10.0)
    assert rows["clean"].wall_hours == pytest.approx(10.0 / 128)
    # buckets: 3.6 s x 1000 = 1 core-hour, but only 32 bands: 32 cores at most
    assert rows["buckets"].core_hours == pytest.approx(1.0)
    assert rows["buckets"].wall_hours == pytest.approx(1.0 / 32)
    # one process: merge 0.36 s x 1000 = 0.1 h of wall; plan from its wall seconds
    assert rows["merge"].wall_hours == pytest.approx(0.1)
    assert rows["plan"].wall_hours == pytest.approx(0.5 * 1000 / 3600)
    # the tokenizer is trained once on a bounded sample: not scaled
    assert rows["tokenizer"].wall_hours == pytest.approx(0.01)
    # a pilot of 4 shards scaled by 10 has 40 shards: 40 cores at most, not 128
    assert project(pilot_manifest(), scale=10, cores=128)[0].wall_hours == pytest.approx(0.1 / 40)


def test_cli_scales_by_input_bytes(tmp_path, capsys):
    import json

    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(pilot_manifest()))
    assert main([str(path), "--input-bytes", "2e9", "--nodes", "2", "--cores-per-node", "64"]) == 0
    out = capsys.readouterr().out
    assert "scale x1,000.0" in out
    assert "| clean | 36.00 | 0.1 MB of input/s | 10.0 | 0.08 |" in out
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"run": {}}))
    assert main([str(old), "--scale", "2"]) == 2

"""benchmarks/gpu_goals.py: issue 26's verdicts from gpu_vs_plain.py's JSON, on planted numbers."""

import json

from benchmarks import gpu_goals


def spread(median, lo, hi):
    return {"min": lo, "median": median, "max": hi}


def size(name, ratio, mfu, patch=None, variants=None, failed=None):
    model = {"tokens_per_s": spread(1000.0, 900.0, 1100.0), "mfu": spread(mfu, mfu - 0.01, mfu + 0.01)}
    out = {
        "size": name,
        "rounds": 10,
        "models": {"toolkit": model, "plain": {**model, "mfu": None}},
        "ratio_toolkit_over_plain": spread(ratio, ratio - 0.05, ratio + 0.05),
        "failed_variants": failed or {},
    }
    if patch is not None:
        out["patched_over_unpatched"] = {"ratio_of_medians": patch, "rounds": 10}
    if variants:
        out["ratio_variant_over_toolkit"] = variants
    return out


def write(path, *sizes):
    path.write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3", "sizes": list(sizes)}))


def test_goals_are_judged_from_the_medians_with_the_shortfall(tmp_path, capsys, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    write(a / "vs_plain_124m.json", size("124m", 0.9, 0.30, patch=1.004))
    write(a / "vs_plain_350m.json", size("350m", 1.02, 0.40, patch=1.03))
    write(b / "vs_plain_1b.json", {"size": "1b", "error": "out of memory"})
    write(
        b / "levers_124m.json",
        size("124m", 0.95, 0.31, variants={"compile": spread(1.10, 1.02, 1.2), "mb16": spread(1.05, 0.98, 1.1)},
             failed={"cuda_graphs": "RuntimeError: capture failed"}),
    )  # fmt: skip
    (b / "not_ours.json").write_text(json.dumps({"medians": {}}))
    assert gpu_goals.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "device: NVIDIA H100 80GB HBM3" in out
    # 124M from its own stage (not the levers' file): 0.1 short of 1.0; MFU 0.05 short of 0.35 (14%)
    assert (
        "| toolkit/plain tokens/s | 124m | 0.900 | >= 1.0 | no | 0.100 short (10% of the goal) | vs_plain_124m, 10 rounds |"
        in out
    )
    assert "| toolkit MFU | 124m | 0.300 | >= 0.35 | no | 0.050 short (14% of the goal) |" in out
    assert "| toolkit/plain tokens/s | 350m | 1.020 | >= 1.0 | yes | - | vs_plain_350m, 10 rounds |" in out
    assert "| toolkit/plain tokens/s | 1b | not measured | >= 1.0 | - | - | |" in out
    assert "| patched/unpatched step time | 124m | 1.004 | <= 1.01 | yes | - |" in out
    over = ("patched/unpatched step time", "350m", "patch", 1.01, "max")  # planted: 1.03, over the bound
    monkeypatch.setattr(gpu_goals, "GOALS", [over])
    assert gpu_goals.main([str(a)]) == 0
    assert "| patched/unpatched step time | 350m | 1.030 | <= 1.01 | no | 0.020 over (2% of the goal) |" in (
        capsys.readouterr().out
    )
    assert "| levers_124m | 124m | compile | 1.100 [1.020 .. 1.200] | yes |" in out
    assert "| levers_124m | 124m | mb16 | 1.050 [0.980 .. 1.100] | no |" in out
    assert "| levers_124m | 124m | cuda_graphs | left out: RuntimeError: capture failed | - |" in out
    assert "| vs_plain_1b | 1b | out of memory |" in out


def test_a_folder_without_results_is_refused(tmp_path, capsys):
    assert gpu_goals.main([str(tmp_path)]) == 2
    assert f"no gpu_vs_plain.py JSON in {tmp_path}" in capsys.readouterr().err
    assert gpu_goals.main([str(tmp_path / "absent")]) == 2


PROFILE = """USDT:2026-11-26 09:29:39 18696:18696 SyncActivityProfilerHandler.cpp:52] profiler_start
NVIDIA H100 80GB HBM3: patched step 642.6 ms, 204 TFLOP/s, MFU 0.207; profiled 2 steps, device time per step by family:
  matmul            173.50 ms   27.0%
  copy_cast         237.76 ms   37.0%
  elementwise        77.11 ms   12.0%
top 20 kernels:
     43.47 ms  16.7% x48    copy_cast     CatArrayBatchedCopy
"""


def test_stopped_rounds_memory_and_the_profiles_copy_share_are_tabled(tmp_path, capsys):
    """A size whose rounds SIGTERM ended is marked; the GPU memory the configs' comments need and
    each step profile's copy_cast share (the RoPE fix's before and after) come with the tables."""
    c = tmp_path / "c"
    c.mkdir()
    s = size("124m", 0.95, 0.31)
    s.update(stopped="SIGTERM (the stage's time limit): 3 of 6 rounds ran", resident_gib=12.25, peak_memory_gib=30.5)
    s["models"]["toolkit"]["step_transient_gib"] = 18.25
    write(c / "levers_124m.json", s)
    (c / "copies_megatron.txt").write_text(PROFILE)
    (c / "copies_toolkit.txt").write_text(
        PROFILE.replace("642.6", "600.0").replace("237.76 ms   37.0%", "120.00 ms   20.0%")
    )
    (c / "copies_cut.txt").write_text("USDT: profiler_start\n")  # cut before it printed
    assert gpu_goals.main([str(c)]) == 0
    out = capsys.readouterr().out
    assert "| levers_124m | 124m | 10 (stopped) |" in out
    assert "| levers_124m | 124m | 12.2 | 30.5 | toolkit 18.2 |" in out
    assert "| copies_megatron | 642.6 | 0.207 | 237.76 | 37.0% |" in out
    assert "| copies_toolkit | 600.0 | 0.207 | 120.00 | 20.0% |" in out
    assert "| copies_cut | no profile in the file (cut by its time limit?) | | | |" in out

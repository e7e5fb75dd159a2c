"""Issue 26's goals, read from the JSON that ``benchmarks/gpu_vs_plain.py --json`` wrote in a GPU
session (``gpu_checks.sh`` a, b and c), as markdown for docs/gpu_runs.md: every verdict and
shortfall computed here, not by hand from the logs.

    python benchmarks/gpu_goals.py GPU_OUT_DIR [GPU_OUT_DIR ...]   # the files of stages a, b, c

Prints one table of the sizes (toolkit and plain tokens/s and MFU, median [min .. max] over the
rounds, the per-round ratio toolkit/plain; rounds marked "stopped" where the stage's time limit
ended them), one of the goals (measured, goal, met, by how much), one of the variants against
the toolkit's default in the same rounds (a lever is "faster in every round" only when its
smallest per-round ratio is above 1), one of GPU memory (what the configs' memory comments
need), and one of the step profiles ``copies_*.txt`` (step time, MFU, the copy_cast share: the
RoPE fix's before and after). Exit 2 when no result is found.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.step_profile import read_profile  # noqa: E402
from rundir.contract import ExitCode  # noqa: E402

# (what, size, how it is read, goal, "min" or "max": which side of the goal meets it)
GOALS = [
    ("toolkit/plain tokens/s", "124m", "ratio", 1.0, "min"),
    ("toolkit/plain tokens/s", "350m", "ratio", 1.0, "min"),
    ("toolkit/plain tokens/s", "1b", "ratio", 1.0, "min"),
    ("toolkit MFU", "124m", "mfu", 0.35, "min"),
    ("toolkit MFU", "1b", "mfu", 0.45, "min"),
    ("patched/unpatched step time", "124m", "patch", 1.01, "max"),
]


def load(dirs: list[Path]) -> tuple[dict[str, dict], set[str]]:
    """(file stem -> each size's result, e.g. ``vs_plain_124m`` -> {"124m": {...}}; the devices)."""
    found: dict[str, dict] = {}
    devices: set[str] = set()
    for d in dirs:
        for path in sorted(d.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise SystemExit(f"error: {path}: not JSON ({exc})") from None
            if not isinstance(data, dict) or "sizes" not in data:
                continue  # not gpu_vs_plain's
            found[path.stem] = {s["size"]: s for s in data["sizes"]}
            devices.add(str(data.get("device")))
    return found, devices


def spread(d: dict, digits: int) -> str:
    return f"{d['median']:.{digits}f} [{d['min']:.{digits}f} .. {d['max']:.{digits}f}]"


def size_rows(found: dict[str, dict]) -> list[str]:
    rows = [
        "| file | size | rounds | toolkit tokens/s | plain tokens/s | toolkit MFU | plain MFU | toolkit/plain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stem, sizes in found.items():
        for size, s in sizes.items():
            if "error" in s:
                rows.append(f"| {stem} | {size} | {s['error']} | | | | | |")
                continue
            m = s["models"]
            mfu = [spread(m[n]["mfu"], 3) if m[n].get("mfu") else "-" for n in ("toolkit", "plain")]
            rounds = f"{s['rounds']} (stopped)" if "stopped" in s else s["rounds"]
            rows.append(
                f"| {stem} | {size} | {rounds} | {spread(m['toolkit']['tokens_per_s'], 0)} | "
                f"{spread(m['plain']['tokens_per_s'], 0)} | {mfu[0]} | {mfu[1]} | "
                f"{spread(s['ratio_toolkit_over_plain'], 3)} |"
            )
    return rows


def measured(found: dict[str, dict], size: str, how: str) -> tuple[float, str] | None:
    """The goal's number (the median over rounds) and where it comes from, from the stage that
    measures it (``vs_plain_<size>``; the levers' file only when that one is missing)."""
    for stem in [f"vs_plain_{size}", *(["levers_124m"] if size == "124m" else [])]:
        s = found.get(stem, {}).get(size)
        if not s or "error" in s:
            continue
        if how == "ratio":
            return s["ratio_toolkit_over_plain"]["median"], f"{stem}, {s['rounds']} rounds"
        if how == "mfu" and s["models"]["toolkit"].get("mfu"):
            return s["models"]["toolkit"]["mfu"]["median"], f"{stem}, {s['rounds']} rounds"
        if how == "patch" and "patched_over_unpatched" in s:
            p = s["patched_over_unpatched"]
            return p["ratio_of_medians"], f"{stem}, {p['rounds']} rounds"
    return None


def goal_rows(found: dict[str, dict]) -> list[str]:
    rows = ["| goal | size | measured (median) | goal | met | by how much | from |", "|---|---|---|---|---|---|---|"]
    for what, size, how, goal, side in GOALS:
        got = measured(found, size, how)
        sign = ">=" if side == "min" else "<="
        if got is None:
            rows.append(f"| {what} | {size} | not measured | {sign} {goal} | - | - | |")
            continue
        value, source = got
        met = value >= goal if side == "min" else value <= goal
        gap = (goal - value) if side == "min" else (value - goal)
        word = "short" if side == "min" else "over"
        rows.append(
            f"| {what} | {size} | {value:.3f} | {sign} {goal} | {'yes' if met else 'no'} | "
            f"{'-' if met else f'{gap:.3f} {word} ({gap / goal:.0%} of the goal)'} | {source} |"
        )
    return rows


def variant_rows(found: dict[str, dict]) -> list[str]:
    rows = ["| file | size | variant | variant/toolkit tokens/s | faster in every round |", "|---|---|---|---|---|"]
    for stem, sizes in found.items():
        for size, s in sizes.items():
            for name, r in s.get("ratio_variant_over_toolkit", {}).items():
                rows.append(f"| {stem} | {size} | {name} | {spread(r, 3)} | {'yes' if r['min'] > 1 else 'no'} |")
            for name, why in s.get("failed_variants", {}).items():
                rows.append(f"| {stem} | {size} | {name} | left out: {why} | - |")
    return rows


def memory_rows(found: dict[str, dict]) -> list[str]:
    """GPU memory per size (CUDA only): every model resident, the peak, each model's largest step."""
    rows = ["| file | size | resident GiB (all models) | peak GiB | step + GiB per model |", "|---|---|---|---|---|"]
    for stem, sizes in found.items():
        for size, s in sizes.items():
            if "resident_gib" not in s:
                continue
            steps = ", ".join(
                f"{n} {m['step_transient_gib']:.1f}" for n, m in s["models"].items() if m.get("step_transient_gib")
            )
            rows.append(f"| {stem} | {size} | {s['resident_gib']:.1f} | {s['peak_memory_gib']:.1f} | {steps} |")
    return rows if len(rows) > 2 else []


def profile_rows(dirs: list[Path]) -> list[str]:
    """One row per ``copies_*.txt`` (benchmarks/step_profile.py's output): step, MFU, copy_cast."""
    rows = ["| profile | step ms | MFU | copy_cast ms per step | copy_cast share |", "|---|---|---|---|---|"]
    for d in dirs:
        for path in sorted(d.glob("copies_*.txt")):
            p = read_profile(path.read_text(errors="replace"))
            if p is None:
                rows.append(f"| {path.stem} | no profile in the file (cut by its time limit?) | | | |")
                continue
            ms, share = p["families"].get("copy_cast", (0.0, 0.0))
            mfu = f"{p['mfu']:.3f}" if p["mfu"] is not None else "-"
            rows.append(f"| {path.stem} | {p['step_ms']:.1f} | {mfu} | {ms:.2f} | {share:.1%} |")
    return rows if len(rows) > 2 else []


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="folders holding gpu_vs_plain.py's JSON files")
    args = parser.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return ExitCode.USAGE
    found, devices = load(args.dirs)
    if not found:
        print(f"error: no gpu_vs_plain.py JSON in {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"device: {', '.join(sorted(devices))}\n")
    for rows in (size_rows(found), goal_rows(found), variant_rows(found), memory_rows(found), profile_rows(args.dirs)):
        if rows:
            print("\n".join(rows) + "\n")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

"""What a finished run cost per stage, and what a larger run of the same kind would cost.

A pilot run over a sample of a snapshot's files records, in ``manifest.json["run"]["cost"]``,
the CPU seconds of every stage (summed over its units' markers); the manifest's ``inputs``
and ``documents`` say what it read and kept. Scaled by the ratio of input bytes, that gives the core-hours of the whole snapshot:
the sharded stages divide over every core of every node; plan, tokenizer training and merge
run in one process each and do not.

    python -m data_prep.costs out/pilot/manifest.json --input-bytes 8e12 --nodes 16 --cores-per-node 64
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from jobscripts.cli import state_defaults
from rundir.contract import ExitCode

SHARDED = ("clean", "signatures", "buckets", "tokenize")  # in the order the stages run
ONE_PROCESS = ("plan", "tokenizer", "merge")


@dataclass(frozen=True)
class StageProjection:
    stage: str
    pilot_cpu_s: float
    core_hours: float  # at the target size
    wall_hours: float  # on nodes x cores_per_node (one process for the one-process stages)


def project(manifest: dict, scale: float, cores: int) -> list[StageProjection]:
    """Each stage's pilot CPU times ``scale``; sharded stages over ``cores`` cores (at most one per
    unit: the buckets stage has ``near_dedup.bands`` units at any size), the others on one.

    Plan's time is the pilot's wall time (its marker records no CPU); its sort grows as
    N log N, so the linear projection is low by log(N_target)/log(N_pilot) (docs/data_prep.md).
    """
    run = manifest.get("run", {})
    cost = run.get("cost")
    if not cost:
        raise ValueError("the manifest has no run.cost: it was written before data_prep recorded stage costs")
    rows = []
    for stage in SHARDED + ONE_PROCESS:
        if stage in cost:
            cpu = float(cost[stage]["cpu_seconds"])
        elif stage in ("plan", "tokenizer") and stage in run.get("stage_seconds", {}):
            cpu = float(run["stage_seconds"][stage])
        else:
            continue
        if stage == "tokenizer":  # trained once on tokenizer.sample_chars: a fixed cost, not scaled
            core_hours = cpu / 3600
            rows.append(StageProjection(stage, cpu, core_hours, core_hours))
            continue
        core_hours = cpu * scale / 3600
        if stage in SHARDED:
            # shards grow with the input; the buckets stage has one unit per LSH band, whatever the size
            units = cost[stage]["units"] * (1 if stage == "buckets" else scale)
            wall = core_hours / max(1, min(cores, math.floor(units)))
        else:
            wall = core_hours
        rows.append(StageProjection(stage, cpu, core_hours, wall))
    return rows


def input_bytes(manifest: dict) -> int:
    """Bytes of every input file the run read (the size each clean marker recorded)."""
    return sum(entry["bytes"] or 0 for entry in manifest["inputs"])


def throughput(manifest: dict) -> dict[str, str]:
    """Per-core rates of the pilot, in the units each stage's cost follows."""
    cost = manifest["run"]["cost"]
    kept_docs = manifest["documents"]["after_filters"]
    clean_rate = input_bytes(manifest) / max(cost["clean"]["cpu_seconds"], 1e-9) / 1e6
    rates = {"clean": f"{clean_rate:.1f} MB of input/s"}
    if "signatures" in cost:
        rates["signatures"] = f"{kept_docs / max(cost['signatures']['cpu_seconds'], 1e-9):,.0f} documents/s"
        rates["buckets"] = f"{kept_docs / max(cost['buckets']['cpu_seconds'], 1e-9):,.0f} documents/s"
    tokens = manifest["train"]["tokens"] + manifest["valid"]["tokens"]
    rates["tokenize"] = f"{tokens / max(cost['tokenize']['cpu_seconds'], 1e-9):,.0f} tokens/s"
    kept = manifest["documents"]["kept"]
    rates["merge"] = f"{kept / max(cost['merge']['cpu_seconds'], 1e-9):,.0f} documents/s"
    return rates


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(prog="python -m data_prep.costs", description=__doc__.split("\n\n")[0])
    parser.add_argument("manifest", type=Path, help="manifest.json of a finished pilot run")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--input-bytes", type=float, help="input bytes of the whole job (e.g. all WET files)")
    size.add_argument("--scale", type=float, help="the whole job is this many times the pilot's input")
    parser.add_argument("--nodes", type=int, default=1, help="nodes of the whole job")
    parser.add_argument("--cores-per-node", type=int, default=64, help="cores of each node")
    args = state_defaults(parser).parse_args(argv)
    try:
        manifest = json.loads(args.manifest.read_text())
        pilot_bytes = input_bytes(manifest)
        if "clean" not in manifest["run"]["cost"]:
            raise KeyError("run.cost.clean")
    except (OSError, ValueError, KeyError) as exc:
        print(f"{args.manifest}: not a manifest with run.cost ({exc})", file=sys.stderr)
        return ExitCode.USAGE
    scale = args.scale if args.scale is not None else args.input_bytes / pilot_bytes
    cores = args.nodes * args.cores_per_node
    rows = project(manifest, scale, cores)
    rates = throughput(manifest)
    print(
        f"pilot: {pilot_bytes / 1e9:.3f} GB of input, {manifest['documents']['read']:,} documents; scale x{scale:,.1f}"
    )
    print(f"target: {args.nodes} node(s) x {args.cores_per_node} cores")
    print("| stage | pilot CPU s | per-core rate (pilot) | core-hours | wall hours |")
    print("|---|---|---|---|---|")
    for row in rows:
        where = "" if row.stage in SHARDED else " (one process)"
        print(
            f"| {row.stage}{where} | {row.pilot_cpu_s:.2f} | {rates.get(row.stage, '')} | "
            f"{row.core_hours:,.1f} | {row.wall_hours:,.2f} |"
        )
    total = sum(r.wall_hours for r in rows)
    print(f"wall time, stages one after another: {total:,.1f} h (queue waits and I/O limits not included)")
    if any(r.stage == "plan" for r in rows):
        n = manifest["documents"]["after_filters"]
        if n > 1:
            print(f"plan's sort grows as N log N: add ~{math.log(n * scale) / math.log(n) - 1:.0%} to its line")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

"""Per-core cost of each data_prep stage on WET input, and the two one-process stages at scale.

    python benchmarks/data_prep_stages.py [--files 4] [--mb 8] [--plan-docs 20000000] [--merge-docs 300000]
        [--input-bytes 7.7e12 --nodes 16 --cores-per-node 64]      # and project the pilot to that

1. A pilot: ``--files`` synthetic Common Crawl WET files (one gzip member per record, text
   from benchmarks/data_prep_throughput.py's Markov chain over real CC documents) through the
   whole pipeline with ``configs/data_prep/cc_wet.yaml`` (language ID, Gopher, C4, exact and
   near dedup, a 32k tokenizer trained by the run) on one worker; prints
   ``python -m data_prep.costs`` for it (per-core rate and CPU of every stage).
2. Plan at scale: exact dedup and the split over ``--plan-docs`` random document hashes
   (1% duplicated): seconds and peak traced memory, per 10^9 documents.
3. Merge: appending ``--merge-docs`` tokenized documents to Megatron's builder one
   ``add_document`` call at a time against ``data_prep.writer``'s bulk append, alternating,
   3 rounds: the ratio of the two in one run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def pilot(files: int, mb: float, work: Path) -> Path:
    from benchmarks.data_prep_throughput import generate_jsonl
    from tests.data_prep_fixtures import write_wet

    (work / "jsonl").mkdir()
    jsonl, source = generate_jsonl(work / "jsonl", mb, files)
    wet_dir = work / "wet"
    wet_dir.mkdir()
    for i, path in enumerate(jsonl):
        with open(path) as fh:
            write_wet(wet_dir / f"CC-MAIN-{i:05d}.warc.wet.gz", [json.loads(line)["text"] for line in fh])
    size = sum(p.stat().st_size for p in wet_dir.iterdir())
    print(f"pilot input: {files} WET files, {size / 1e6:.1f} MB gzip ({mb} MB of JSONL text from {source})")
    out = work / "out"
    cmd = [
        sys.executable,
        "-m",
        "data_prep",
        "--config",
        str(REPO / "configs/data_prep/cc_wet.yaml"),
        f"input.paths=[{wet_dir}/*.warc.wet.gz]",
        f"output.dir={out}",
        "runtime.workers=1",
        "--no-progress",
    ]
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    return out / "manifest.json"


def plan_at_scale(n_docs: int) -> None:
    from data_prep.config import SplitConfig
    from data_prep.dedup import assign, first_occurrences

    rng = np.random.default_rng(0)
    hashes = rng.integers(0, 256, size=(n_docs, 16), dtype=np.uint8)
    dups = rng.integers(0, n_docs, size=n_docs // 100)
    hashes[dups[: len(dups) // 2]] = hashes[dups[len(dups) // 2 :]]
    tracemalloc.start()
    started = time.perf_counter()
    keep = first_occurrences(hashes)
    assignment = assign(hashes, False, SplitConfig(), keep)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    per_doc = hashes.nbytes + assignment.nbytes
    print(
        f"plan over {n_docs:,} documents: {seconds:.2f} s, peak traced memory {peak / 1e9:.2f} GB beside the "
        f"{per_doc / 1e9:.2f} GB of hashes and assignment; per 10^9 documents, linear: "
        f"{seconds * 1e9 / n_docs / 60:.0f} min, {(peak + per_doc) * 1e9 / n_docs / 1e9:.0f} GB"
    )


def merge_ratio(n_docs: int, rounds: int = 3) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    from data_prep.writer import _add_documents

    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 2000, size=n_docs)
    tokens = rng.integers(0, 32000, size=int(lengths.sum())).astype(np.uint16)

    def per_document(builder) -> None:
        start = 0
        for length in lengths.tolist():
            builder.add_document(tokens[start : start + length], [length])
            start += length

    times: dict[str, list[float]] = {"per_document": [], "bulk": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for name, fn in (("per_document", per_document), ("bulk", lambda b: _add_documents(b, tokens, lengths))):
                builder = IndexedDatasetBuilder(f"{tmp}/{name}.bin", dtype=np.uint16)
                started = time.process_time()
                fn(builder)
                builder.finalize(f"{tmp}/{name}.idx")
                times[name].append(time.process_time() - started)
        same = all(
            Path(f"{tmp}/bulk{s}").read_bytes() == Path(f"{tmp}/per_document{s}").read_bytes() for s in (".bin", ".idx")
        )
    slow, fast = min(times["per_document"]), min(times["bulk"])
    print(
        f"merge of {n_docs:,} documents ({tokens.nbytes / 1e9:.2f} GB of tokens), CPU best of {rounds}: "
        f"per-document add_document {slow:.2f} s ({slow / n_docs * 1e6:.1f} us/doc), bulk {fast:.2f} s "
        f"({fast / n_docs * 1e6:.2f} us/doc): {slow / fast:.1f}x; identical files: {same}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--mb", type=float, default=8.0, help="MB of text over all pilot files")
    parser.add_argument("--plan-docs", type=int, default=20_000_000)
    parser.add_argument("--merge-docs", type=int, default=300_000)
    parser.add_argument("--input-bytes", type=float, help="also project the pilot to this much input")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--cores-per-node", type=int, default=64)
    args = parser.parse_args()
    from data_prep import costs

    with tempfile.TemporaryDirectory() as tmp:
        manifest = pilot(args.files, args.mb, Path(tmp))
        costs.main([str(manifest), "--scale", "1"])
        if args.input_bytes:
            target = ["--input-bytes", str(args.input_bytes), "--nodes", str(args.nodes)]
            costs.main([str(manifest), *target, "--cores-per-node", str(args.cores_per_node)])
    plan_at_scale(args.plan_docs)
    merge_ratio(args.merge_docs)


if __name__ == "__main__":
    main()

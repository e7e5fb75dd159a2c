"""Near-duplicate removal on a corpus with planted near-duplicates: recall, false positives, speed.

    python benchmarks/near_dedup_quality.py [--documents 20000] [--seed 0] [--shards 8] [key=value ...]

Generates the planted corpus (data_prep/neardup_corpus.py: 20% copies with 1-5% of the
words edited and another site's header and footer, hard negatives from shared site
templates), writes it as clean shards, and runs the pipeline's own worker steps on them:
signatures per shard (near_dedup.signature_shard), verified pairs per LSH band
(near_dedup.band_pairs), connected components (near_dedup.first_of_components). Prints recall
of planted pairs, false-positive rates, and documents/s per core of each step (CPU time of
this one process). ``key=value`` overrides ``clean.near_dedup`` (e.g. ``threshold=0.6``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rundir.contract import ExitCode  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="clean.near_dedup settings")
    args = parser.parse_args()

    import numpy as np
    import pyarrow as pa
    import yaml

    from data_prep import near_dedup as nd
    from data_prep.clean import TEXT_SCHEMA
    from data_prep.config import NearDedupConfig
    from data_prep.neardup_corpus import CorpusSettings, generate, score

    cfg = NearDedupConfig(enabled=True)
    cfg = replace(cfg, **{k: yaml.safe_load(v) for k, v in (o.split("=", 1) for o in args.overrides)})
    started = time.perf_counter()
    corpus = generate(CorpusSettings(documents=args.documents, seed=args.seed))
    n = len(corpus.texts)
    words = sum(len(t.split()) for t in corpus.texts)
    print(
        f"corpus: {n} documents ({words / n:.0f} words on average), generated in {time.perf_counter() - started:.1f} s"
    )
    print(f"near_dedup: {cfg}")

    with tempfile.TemporaryDirectory() as tmp:
        bounds = np.linspace(0, n, args.shards + 1).astype(int)
        texts_files = []
        for i in range(args.shards):
            path = f"{tmp}/shard-{i}.arrow"
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, TEXT_SCHEMA) as writer:
                batch = corpus.texts[bounds[i] : bounds[i + 1]]
                writer.write_batch(pa.record_batch([pa.array(batch, type=pa.large_string())], schema=TEXT_SCHEMA))
            texts_files.append(path)
        cpu = {}
        t0 = time.process_time()
        for i, path in enumerate(texts_files):
            nd.signature_shard(nd.SignatureTask(f"shard-{i}", path, tmp, cfg, ""))
        cpu["signatures"] = time.process_time() - t0
        files = [nd.signature_paths(tmp, f"shard-{i}")["signatures"] for i in range(args.shards)]
        t0 = time.process_time()
        candidates = 0
        for band in range(cfg.bands):
            candidates += nd.band_pairs(nd.BandTask(band, files, tmp, cfg, ""))["candidates"]
        cpu["buckets"] = time.process_time() - t0
        t0 = time.process_time()
        pairs = np.concatenate([np.load(nd.band_paths(tmp, b)["pairs"]) for b in range(cfg.bands)])
        labels = nd.component_labels(n, pairs)
        keep = nd.first_of_components(n, pairs)
        cpu["components"] = time.process_time() - t0

    result = score(corpus, labels)
    print(
        f"candidate pairs (all bands): {candidates}, verified: {len(pairs)}, removed: {int((~keep).sum())} "
        f"(planted copies: {result['should_remove']})"
    )
    print(
        f"RECALL of planted pairs:                 {result['recall']:.4f}  ({result['planted_pairs']} pairs; goal >= 0.9)"
    )
    print(
        f"FALSE-POSITIVE rate, non-duplicate pairs: {result['fp_pair_rate']:.2e}  "
        f"({result['fp_pairs']} of {result['non_duplicate_pairs']}; goal < 1e-3)"
    )
    print(
        f"  same-site pairs (hard negatives):       {result['same_site_fp_rate']:.2e}  "
        f"({result['same_site_fp_pairs']} of {result['same_site_pairs']})"
    )
    print(f"  originals lost (no document kept):      {result['lost_fraction']:.2e}  ({result['lost_clusters']})")
    total = sum(cpu.values())
    for step, seconds in cpu.items():
        print(f"  {step:11s} {seconds:7.2f} s CPU  {n / seconds:10,.0f} documents/s per core")
    print(f"THROUGHPUT, all steps: {n / total:,.0f} documents/s per core ({total / n * 1e6:.0f} us CPU per document)")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

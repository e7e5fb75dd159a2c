"""Sizes of the registry corpora after data_prep: documents, characters, train/valid tokens, .bin bytes.

For each corpus named (default: all rows of ``data_prep.registry_corpora.CORPORA``): build its
JSONL from the pinned artifact (fetched into ``--cache`` if not there), run
``data_prep.api.build_from_texts`` on it the way the CPU demo does (filters on,
valid_fraction 0.05) with a SentencePiece BPE of each ``--vocab`` size, and print one row per
(corpus, vocab) with the wall time of each step. Wall times on a shared machine are noisy:
read them as sizes of work, not as a comparison.

    python benchmarks/registry_corpora.py sotu mix --vocab 2048 8192 --workers 2
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data_prep.api import build_from_texts  # noqa: E402
from data_prep.registry_corpora import CORPORA, build_jsonl, default_cache_dir  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="*", default=list(CORPORA))
    p.add_argument("--vocab", type=int, nargs="+", default=[2048])
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--cache", type=Path, default=default_cache_dir())
    p.add_argument("--out", type=Path, default=Path("/tmp/registry_corpora_bench"))
    p.add_argument("--keep", action="store_true", help="keep the data_prep outputs")
    args = p.parse_args()
    header = (
        "| corpus | vocab | documents | characters | train docs / tokens | valid docs / tokens | dropped by filters "
        "| train.bin + valid.bin bytes | JSONL s | data_prep s |"
    )
    print(header)
    print("|" + "---|" * header.count(" | ") + "---|")
    for name in args.names:
        jsonl = args.out / f"{name}.jsonl"
        jsonl.unlink(missing_ok=True)
        t0 = time.perf_counter()
        build_jsonl(name, jsonl, args.cache)
        t_jsonl = time.perf_counter() - t0
        docs = [json.loads(line) for line in jsonl.open(encoding="utf-8")]
        chars = sum(len(d["text"]) for d in docs)
        for vocab in args.vocab:
            outdir = args.out / f"{name}-{vocab}"
            shutil.rmtree(outdir, ignore_errors=True)
            t0 = time.perf_counter()
            m = build_from_texts(jsonl, outdir, vocab_size=vocab, workers=args.workers, valid_fraction=0.05)
            t_prep = time.perf_counter() - t0
            dropped = {k: v for k, v in m["filters"].items() if v}
            bins = sum((outdir / f"{s}.bin").stat().st_size for s in ("train", "valid"))
            print(
                f"| {name} | {vocab} | {len(docs):,} | {chars:,} | {m['train']['documents']:,} / {m['train']['tokens']:,} "
                f"| {m['valid']['documents']:,} / {m['valid']['tokens']:,} | {dropped or '-'} | {bins:,} "
                f"| {t_jsonl:.1f} | {t_prep:.1f} |",
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(outdir)


if __name__ == "__main__":
    main()

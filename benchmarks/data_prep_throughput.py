"""data_prep throughput: end-to-end tokens/s per worker against the raw tokenizer, and 1 -> 2 workers,
for two input layouts of the same text: many small files, and one large file.

    python benchmarks/data_prep_throughput.py [--mb 48] [--shards 8] [--vocab-size 32000] [--repeats 3]
    python benchmarks/data_prep_throughput.py --breakdown      # the clean stage's steps only
    python benchmarks/data_prep_throughput.py --set clean.quality.enabled=false clean.c4.enabled=false \
        clean.language.enabled=false                           # the floor: no filters

Generates realistic synthetic JSONL (an order-2 word Markov chain over real Common Crawl text
from dolma's test data, or over Python's own docstrings when that cannot be fetched), trains
the SentencePiece tokenizer once with the default config, then, interleaved and repeated:

* raw: ``encode_batch_arrays`` (SentencePiece batch encode, one thread, batches of
  ``tokenizer.encode_batch_docs``) over the cleaned texts of the same run, already in memory
  (fresh ``str`` objects each repetition, as the pipeline's are: a ``str`` caches its UTF-8
  after the first encode, which would make later repetitions cheaper than the pipeline);
* e2e(layout, 1), e2e(layout, 2): the whole pipeline with default filters (read JSONL,
  normalize, filter, dedup, tokenize, write shards, merge with Megatron's builder, manifest)
  into a fresh output directory, with 1 and 2 worker processes, given the trained tokenizer,
  for layout ``many`` (``--shards`` files) and ``one`` (the same files concatenated into one:
  the same documents in the same order, so every run must write the same .bin/.idx bytes;
  the large file is cut into ``input.shard_bytes`` byte ranges).

It prints the best (minimum) wall time of each and the medians of the ratios within each
repetition (robust when the load of a shared machine changes between runs: raw and the
end-to-end runs of one repetition follow each other) and, because other processes on a shared
machine disturb wall clocks, also CPU-time ratios (this process's CPU plus the CPU each
worker task records; worker start-up is not in it). The CPU-time ratio of one worker is the
one-core cost: with one worker the main process still merges into Megatron's builder on the
side, which the wall time does not show. Megatron
is imported once before timing: its ~10 s torch import is a fixed start-up cost per run,
reported separately, not a per-token cost.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import os
import pkgutil
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rundir.contract import ExitCode  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def seed_corpus() -> tuple[list[str], str]:
    """Real web text (dolma's 20 Common Crawl documents), or the stdlib's docstrings."""
    try:
        import gzip

        from data_prep.testdata import dolma_files

        files = dolma_files()
        docs = []
        for key in ("cc_jsonl0", "cc_jsonl1"):
            with gzip.open(files[key], "rt") as fh:
                docs += [json.loads(line)["text"] for line in fh if line.strip()]
        return docs, "dolma 1.2.1 Common Crawl sample (20 documents)"
    except Exception as exc:  # no index access: any English prose will do
        print(f"(dolma sample unavailable: {exc}; using stdlib docstrings)", file=sys.stderr)
        docs = []
        for module in pkgutil.iter_modules():
            if module.name.startswith("_") or module.ispkg:
                continue
            try:
                mod = __import__(module.name)
            except Exception:
                continue
            docs += [inspect.getdoc(obj) or "" for _, obj in inspect.getmembers(mod)][:50]
            if sum(map(len, docs)) > 2_000_000:
                break
        return [d for d in docs if len(d) > 200], "Python stdlib docstrings"


def generate_jsonl(out_dir: Path, megabytes: float, shards: int, seed: int = 0) -> tuple[list[Path], str]:
    docs, source = seed_corpus()
    words: list[str] = []
    for doc in docs:
        words += doc.replace("\n", " \n ").split(" ") + ["\n\n"]
    words = [w for w in words if w]
    chain: dict[tuple[str, str], list[str]] = {}
    for a, b, c in zip(words, words[1:], words[2:]):
        chain.setdefault((a, b), []).append(c)
    keys = list(chain)
    rng = random.Random(seed)
    target = int(megabytes * 1e6 / shards)
    paths = []
    doc_id = 0
    for shard in range(shards):
        path = out_dir / f"shard-{shard:03d}.jsonl"
        size = 0
        with open(path, "w") as fh:
            while size < target:
                n_words = min(6000, max(60, int(rng.lognormvariate(math.log(450), 0.8))))
                key = rng.choice(keys)
                out = list(key)
                while len(out) < n_words:
                    nxt = chain.get(key)
                    if not nxt:
                        key = rng.choice(keys)
                        out += key
                        continue
                    word = rng.choice(nxt)
                    out.append(word)
                    key = (key[1], word)
                text = " ".join(out).replace(" \n ", "\n").replace(" \n\n ", "\n\n").strip()
                line = json.dumps({"id": doc_id, "text": text}) + "\n"
                doc_id += 1
                fh.write(line)
                size += len(line)
        paths.append(path)
    return paths, source


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def worker_seconds(out: Path, stage: str | None = None) -> tuple[float, float]:
    """(CPU, wall) seconds the worker processes spent in their tasks (each task records both);
    ``stage``: only the clean or the tokens tasks."""
    markers = [
        json.loads(p.read_text())
        for folder in ("clean", "tokens")
        if stage in (None, folder)
        for p in (out / ".work" / folder).glob("*.json")
    ]
    return sum(m.get("cpu_seconds", 0.0) for m in markers), sum(m.get("seconds", 0.0) for m in markers)


def file_digest(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def clean_breakdown(paths: list[Path], repeats: int) -> None:
    """CPU per character of each step of the clean stage, in this process, best of ``repeats``:
    JSONL parse, normalization, the filters with and without language ID, SHA-256."""
    from data_prep.api import load_data_prep_config
    from data_prep.filters import DocumentFilter
    from data_prep.normalize import normalize_encoded
    from data_prep.readers import InputFile, ReadLog, read_documents

    cfg = load_data_prep_config(None, ["input.paths=[x]"])
    with_language = DocumentFilter(cfg.clean)
    without_language = DocumentFilter(cfg.clean)
    without_language.language = None
    best: dict[str, float] = {}
    chars = 0
    for _ in range(repeats):
        times: dict[str, float] = dict.fromkeys(
            ("read", "normalize", "filters", "filters without language", "sha256"), 0.0
        )
        chars = 0
        for path in paths:
            started = time.process_time()
            texts = [
                t
                for batch in read_documents(InputFile(str(path), "jsonl"), cfg.input, ReadLog(str(path)))
                for t in batch
            ]
            times["read"] += time.process_time() - started
            started = time.process_time()
            normalized = [normalize_encoded(t) for t in texts]
            times["normalize"] += time.process_time() - started
            for name, doc_filter in (("filters", with_language), ("filters without language", without_language)):
                started = time.process_time()
                for text, encoded in normalized:
                    doc_filter(text, encoded)
                times[name] += time.process_time() - started
            started = time.process_time()
            for _, encoded in normalized:
                hashlib.sha256(encoded).digest()
            times["sha256"] += time.process_time() - started
            chars += sum(len(t) for t, _ in normalized)
        for name, seconds in times.items():
            best[name] = min(best.get(name, math.inf), seconds)
    print(f"clean stage, CPU per character of {chars:,} characters (best of {repeats}):")
    for name, seconds in best.items():
        print(f"  {name:26s} {seconds / chars * 1e9:6.1f} ns/char")
    total = best["read"] + best["normalize"] + best["filters"] + best["sha256"]
    print(f"  {'total':26s} {total / chars * 1e9:6.1f} ns/char")


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({', '.join(f'{v:.3f}' for v in values)})"


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=48, help="synthetic JSONL size in MB")
    parser.add_argument("--shards", type=int, default=8, help="files of the 'many' layout")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repetitions; the best time counts")
    parser.add_argument("--workdir", help="default: a temporary directory, removed at the end")
    parser.add_argument(
        "--breakdown", action="store_true", help="only the clean stage's steps, in this process (no pipeline runs)"
    )
    parser.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="data_prep config overrides for every run, e.g. clean.quality.enabled=false (the cost floor without filters)",
    )
    args = parser.parse_args()

    from data_prep.api import load_data_prep_config
    from data_prep.pipeline import run
    from data_prep.tokenizer import load_tokenizer

    work = Path(args.workdir or tempfile.mkdtemp(prefix="data_prep_bench_"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average at start: {os.getloadavg()}  (cores: {os.cpu_count()})")
    (work / "input").mkdir(exist_ok=True)
    inputs, source = sorted((work / "input").glob("*.jsonl")), "an earlier run of this benchmark (--workdir)"
    if not inputs:
        inputs, source = generate_jsonl(work / "input", args.mb, args.shards)
    (work / "one").mkdir(exist_ok=True)
    large = work / "one" / "all.jsonl"
    if not large.exists():
        with open(large, "wb") as fh:
            for path in inputs:
                fh.write(path.read_bytes())
    in_bytes = sum(p.stat().st_size for p in inputs)
    if args.breakdown:
        clean_breakdown(inputs, args.repeats)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        return ExitCode.OK
    shard_bytes = load_data_prep_config(None, [f"input.paths=[{large}]"]).input.shard_bytes
    print(
        f"input: {len(inputs)} JSONL files ('many') or one file ('one', cut into {shard_bytes / 2**20:.0f} MiB "
        f"byte ranges), {in_bytes / 1e6:.1f} MB, text from {source}"
    )

    started = time.perf_counter()
    import megatron.core.datasets.indexed_dataset  # noqa: F401  (fixed start-up cost, timed here)

    megatron_import = time.perf_counter() - started
    layouts = {"many": work / "input", "one": work / "one"}
    base = ["runtime.progress=false", *args.set]
    setup = work / "setup"
    shutil.rmtree(setup, ignore_errors=True)
    started = time.perf_counter()
    manifest = run(
        load_data_prep_config(
            None,
            [
                *base,
                f"input.paths=[{layouts['many']}]",
                f"output.dir={setup}",
                f"tokenizer.vocab_size={args.vocab_size}",
                "tokenizer.sample_chars=20000000",
                "runtime.workers=2",
            ],
        )
    )
    setup_seconds = time.perf_counter() - started
    tokenizer_path = setup / manifest["tokenizer"]["path"]
    tokenizer = load_tokenizer(tokenizer_path)
    kept_docs = manifest["documents"]["kept"]
    print(
        f"setup run (2 workers, trains the tokenizer: vocab {tokenizer.vocab_size}): {setup_seconds:.1f} s; "
        f"{manifest['documents']['read']} documents read, {kept_docs} kept; filters: "
        f"{ {k: v for k, v in manifest['filters'].items() if v} }"
    )

    import pyarrow as pa

    utf8: list[bytes] = []
    for arrow in sorted((setup / ".work" / "clean").glob("*.arrow")):
        with pa.memory_map(str(arrow)) as src:
            utf8 += [text.encode() for text in pa.ipc.open_file(src).read_all().column(0).to_pylist()]
    batch = load_data_prep_config(None, [*base, "input.paths=[x]"]).tokenizer.encode_batch_docs
    text_chars = sum(len(text.decode()) for text in utf8)  # characters of the kept texts

    def raw() -> tuple[float, float, int, None]:
        texts = [text.decode() for text in utf8]  # fresh str objects, untimed
        c0, t0 = cpu_seconds(), time.perf_counter()
        n = 0
        for i in range(0, len(texts), batch):
            n += sum(map(len, tokenizer.encode_batch_arrays(texts[i : i + batch])))
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        print(f"    raw: got {cpu / wall:.0%} of a core")
        print(f"    raw: {cpu:.2f} s CPU ({cpu / text_chars * 1e9:.1f} ns/char)")
        return wall, cpu, n + len(texts), None  # + one EOD per document

    def e2e(layout: str, workers: int) -> tuple[float, float, int, str]:
        out = work / f"e2e-{layout}-{workers}"
        shutil.rmtree(out, ignore_errors=True)
        cfg = load_data_prep_config(
            None,
            [
                *base,
                f"input.paths=[{layouts[layout]}]",
                f"output.dir={out}",
                f"tokenizer.path={tokenizer_path}",
                f"runtime.workers={workers}",
            ],
        )
        c0, t0 = cpu_seconds(), time.perf_counter()
        m = run(cfg)
        task_cpu, task_wall = worker_seconds(out)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0 + task_cpu
        clean_cpu, tokens_cpu = worker_seconds(out, "clean")[0], worker_seconds(out, "tokens")[0]
        print(
            f"    {layout}/{workers}: {m['run']['workers']} worker(s) over {len(list((out / '.work' / 'clean').glob('*.json')))} "
            f"shards; workers got {task_cpu / task_wall:.0%} of a core; CPU s: clean {clean_cpu:.2f} "
            f"({clean_cpu / text_chars * 1e9:.1f} ns/char), tokenize {tokens_cpu:.2f}, main process {cpu - task_cpu:.2f}"
        )
        digest = file_digest([out / f"{p}.{ext}" for p in ("train", "valid") for ext in ("bin", "idx")])
        return wall, cpu, m["train"]["tokens"] + m["valid"]["tokens"], digest

    runs = {"raw": raw}
    for layout in layouts:
        for workers in (1, 2):
            runs[f"{layout}/{workers}"] = lambda layout=layout, workers=workers: e2e(layout, workers)
    best: dict[str, tuple[float, float]] = {}
    per_rep: list[dict[str, float]] = []  # wall seconds of each measurement, by repetition
    per_rep_cpu: list[dict[str, float]] = []
    tokens: dict[str, int] = {}
    digests = set()
    for rep in range(args.repeats):
        per_rep.append({})
        per_rep_cpu.append({})
        for name, fn in runs.items():
            wall, cpu, n, digest = fn()
            if digest is not None:
                digests.add(digest)
            tokens[name] = n
            per_rep[-1][name] = wall
            per_rep_cpu[-1][name] = cpu
            old = best.get(name, (math.inf, math.inf))
            best[name] = (min(old[0], wall), min(old[1], cpu))
            print(f"  rep {rep} {name}: {wall:.2f} s wall, {cpu:.2f} s CPU, {n} tokens, {n / wall:,.0f} tok/s")
    if len(set(tokens.values())) != 1:
        print(f"ERROR: token counts differ: {tokens}")
        return ExitCode.FAILED
    if len(digests) != 1:
        print(f"ERROR: outputs differ between layouts / worker counts: {digests}")
        return ExitCode.FAILED
    n = tokens["raw"]
    raw_wall = best["raw"][0]
    print()
    print(f"tokens: {n:,} (vocab {tokenizer.vocab_size}, {in_bytes / n:.2f} input bytes per token)")
    print(f"raw tokenizer encode (1 thread): {n / raw_wall:12,.0f} tok/s   best of {args.repeats}")
    print()
    print(
        "| layout | workers | best wall s | tok/s | e2e time / raw encode time (best) "
        "| same-repetition median (each) | speed-up 1 -> 2 (best) "
        "| speed-up, same-repetition median | CPU-time e2e / raw (best) | CPU-time, same-repetition median (each) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for layout in layouts:
        for workers in (1, 2):
            name = f"{layout}/{workers}"
            wall, cpu = best[name]
            speed = median = ""
            if workers == 2:
                speed = f"{best[f'{layout}/1'][0] / wall:.2f}"
                ups = [r[f"{layout}/1"] / r[name] for r in per_rep]
                median = f"{statistics.median(ups):.2f} ({', '.join(f'{u:.2f}' for u in ups)})"
            ratio = wall / raw_wall if workers == 1 else wall * 2 / raw_wall
            label = "" if workers == 1 else " (x2 workers)"
            scale = 1 if workers == 1 else 2
            walls = [r[name] * scale / r["raw"] for r in per_rep]
            cpus = [r[name] / r["raw"] for r in per_rep_cpu]
            print(
                f"| {layout} | {workers} | {wall:.2f} | {n / wall:,.0f} | {ratio:.3f}{label} "
                f"| {_median(walls)} | {speed} | {median} | {cpu / best['raw'][1]:.3f} | {_median(cpus)} |"
            )
    print()
    print("goals: e2e time / raw encode time <= 1.05 with 1 worker; speed-up 1 -> 2 >= 1.8 for both layouts")
    print(f"fixed start-up, not in the ratios: Megatron import {megatron_import:.1f} s")
    print(f"outputs identical across layouts, runs and worker counts: {len(digests) == 1}")
    print(f"load average at end: {os.getloadavg()}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

"""How much of a CPU training step is spent building its micro-batches (the case for prefetch).

    OMP_NUM_THREADS=1 python benchmarks/data_loading.py [--steps 30] [--warmup 3]

For each shape (``tiny``: configs/tiny_cpu.yaml; ``bigger``: 8 layers of width 256, sequence
256, 16 sequences a step) and each data source (``mock``: megatron's MockGPTDataset;
``indexed``: a megatron .bin/.idx dataset of random tokens written here, read through
GPTDataset as a data_prep manifest is), the trainer's own session is built
(training.session.build_session) and each step is timed in two parts, alternating in one
loop: ``training.data.micro_batches`` (index lookups, memmap reads, collate) and
``backend.train_step`` plus the scheduler step (what the trainer's loop does). Prints
milliseconds per step for each and the ratio build / (build + step): the most any
prefetch could hide.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobscripts.quiet import quiet_libraries  # noqa: E402

SHAPES = {
    "tiny": [],
    "bigger": [
        "model.num_layers=8",
        "model.hidden_size=256",
        "model.seq_length=256",
        "training.global_batch_size=16",
        "training.micro_batch_size=4",
    ],
}
VOCAB = 2048


def write_indexed(folder: Path, tokens: int = 2_000_000) -> Path:
    """A manifest folder with train and valid prefixes of random documents (uint16 tokens)."""
    import numpy as np
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", tokens), ("valid", tokens // 20)):
        builder = IndexedDatasetBuilder(str(folder / f"{split}.bin"), dtype=np.uint16)
        left = n
        while left > 0:
            length = int(min(left, rng.integers(100, 2000)))
            doc = rng.integers(0, VOCAB - 1, size=length).astype(np.int64)
            doc[-1] = VOCAB - 1
            builder.add_document(torch.from_numpy(doc), [length])
            left -= length
        builder.finalize(str(folder / f"{split}.idx"))
    manifest = {
        "train": {"prefixes": ["train"]},
        "valid": {"prefixes": ["valid"]},
        "tokenizer": {"vocab_size": VOCAB, "eod_id": VOCAB - 1},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def measure(shape: str, source: str, data_dir: Path, run_dir: Path, steps: int, warmup: int) -> dict:
    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.data import micro_batches
    from training.distributed import shutdown
    from training.session import build_session

    repo = Path(__file__).resolve().parents[1]
    data = ["data.mock=true"] if source == "mock" else [f"data.manifest={data_dir}", "model.vocab_size=null"]
    overrides = [
        *SHAPES[shape],
        *data,
        f"run.dir={run_dir}",
        f"training.steps={steps + warmup}",
        "scheduler.warmup_steps=1",
        "logging.progress_bar=false",
        "parallel.device=cpu",
        "checkpoint.final=false",
    ]
    cfg = load_config(RunConfig, repo / "configs" / "tiny_cpu.yaml", overrides)
    s = build_session(cfg, force=True, is_main=True)
    build, step = [], []
    try:
        for k in range(steps + warmup):
            t0 = time.perf_counter()
            batches = micro_batches(s.data.datasets.train, s.data.plan, k)
            t1 = time.perf_counter()
            s.backend.train_step(batches)
            s.scheduler.step(1)
            t2 = time.perf_counter()
            if k >= warmup:
                build.append(t1 - t0)
                step.append(t2 - t1)
    finally:
        if s.runlog is not None:
            s.runlog.close()
        shutdown()
    b, t = statistics.median(build), statistics.median(step)
    return {"shape": shape, "data": source, "build_ms": b * 1e3, "step_ms": t * 1e3, "ratio": b / (b + t)}


def main() -> int:
    quiet_libraries()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per case")
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.getLogger("train_gpt").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = write_indexed(Path(tmp) / "data")
        rows = []
        for shape in SHAPES:
            for source in ("mock", "indexed"):
                rows.append(measure(shape, source, data_dir, Path(tmp) / f"{shape}-{source}", args.steps, args.warmup))
                r = rows[-1]
                print(
                    f"{r['shape']:7s} {r['data']:8s} build {r['build_ms']:7.2f} ms  step {r['step_ms']:8.2f} ms"
                    f"  build / (build + step) = {r['ratio']:.2%}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

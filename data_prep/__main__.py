"""Command line: ``python -m data_prep --config FILE [key=value ...]`` or the flag form.

Exit codes: 0 done; 1 the run failed (error budget exceeded, nothing readable, a crash),
work so far is kept and a rerun resumes; 2 invalid config or command line (nothing done).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

EXAMPLES = """examples:
  python -m data_prep --config configs/data_prep/jsonl_dump.yaml runtime.workers=8
  python -m data_prep --input 'shards/*.jsonl.gz' --output out/ --vocab-size 2048
  python -m data_prep --input crawl/ --format wet --output out/ --tokenizer tokenizer.model
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m data_prep",
        description="Common Crawl shards (WET, WARC, JSONL, parquet) -> Megatron .bin/.idx datasets",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="YAML config (schema: data_prep/config.py, docs/data_prep.md)")
    p.add_argument("--input", action="append", help="input file, directory or glob (repeatable) -> input.paths")
    p.add_argument("--output", help="output directory -> output.dir")
    p.add_argument("--format", help="jsonl | parquet | wet | warc | auto -> input.format")
    p.add_argument("--text-key", help="JSONL/parquet text field -> input.text_key")
    p.add_argument("--vocab-size", type=int, help="train a SentencePiece model of this size -> tokenizer.vocab_size")
    p.add_argument("--tokenizer", help="existing SentencePiece .model or HF tokenizer.json -> tokenizer.path")
    p.add_argument("--workers", type=int, help="worker processes (0: in this process) -> runtime.workers")
    p.add_argument("--no-progress", action="store_true", help="no progress bars -> runtime.progress=false")
    p.add_argument("--restart", action="store_true", help="delete the output directory's work files first")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides, applied last")
    return p


def _flag_layer(args: argparse.Namespace) -> dict:
    layer: dict = {}

    def put(section: str, key: str, value) -> None:
        if value is not None:
            layer.setdefault(section, {})[key] = value

    put("input", "paths", args.input)
    put("input", "format", args.format)
    put("input", "text_key", args.text_key)
    put("output", "dir", args.output)
    put("tokenizer", "vocab_size", args.vocab_size)
    put("tokenizer", "path", args.tokenizer)
    put("runtime", "workers", args.workers)
    if args.no_progress:
        put("runtime", "progress", False)
    return layer


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr
    )
    logging.getLogger("data_prep").setLevel(logging.INFO)
    from data_prep.api import load_data_prep_config
    from data_prep.pipeline import DataPrepError, run
    from data_prep.readers import InputError
    from data_prep.tokenizer import TokenizerError
    from runconfig import ConfigError

    try:
        cfg = load_data_prep_config(args.config, args.overrides, [_flag_layer(args)])
    except ConfigError as exc:
        print(f"data_prep: config error: {exc}", file=sys.stderr)
        return 2
    if args.restart:
        shutil.rmtree(Path(cfg.output.dir) / ".work", ignore_errors=True)
    try:
        manifest = run(cfg)
    except (InputError, TokenizerError) as exc:
        print(f"data_prep: config error: {exc}", file=sys.stderr)
        return 2
    except DataPrepError as exc:
        print(f"data_prep: failed: {exc}", file=sys.stderr)
        return 1
    summary = {
        "output": str(Path(cfg.output.dir).resolve() / "manifest.json"),
        "train": manifest["train"],
        "valid": manifest["valid"],
        "dtype": manifest["dtype"],
        "tokenizer": manifest["tokenizer"]["path"],
        "documents": manifest["documents"],
        "filters": {k: v for k, v in manifest["filters"].items() if v},
        "skipped": manifest["skipped_total"],
        "elapsed_s": manifest["run"]["elapsed_s"],
    }
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How far lm-eval's log-likelihoods (exported model, hf backend) are from the megatron model's own.

    python -m eval lm-eval RUN_DIR --tasks pydoc_continuation --log-samples
    python benchmarks/lm_eval_vs_megatron.py RUN_DIR

Reads RUN_DIR/lm_eval_samples.jsonl and scores every (context, continuation) again with the
patched megatron model from the same checkpoint and the run's own tokenizer, split as
lm-eval's hf backend splits a request (tests/test_lm_eval.py). Prints the number of requests
and the largest and median absolute difference in nats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    from data_prep.manifest import read_manifest
    from data_prep.tokenizer import load_tokenizer
    from tests.test_lm_eval import encode_pair, megatron_loglik
    from training.checkpoint import find_checkpoint, load_model_weights, one_process_config
    from training.distributed import single_process
    from training.export_hf import read_run_config

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    run = parser.parse_args().run_dir
    cfg = read_run_config(run)
    source = read_manifest(cfg.data.manifest).tokenizer_path if cfg.data.manifest else cfg.data.tokenizer
    tok = load_tokenizer(source)
    rows = [json.loads(line) for line in (run / "lm_eval_samples.jsonl").read_text().splitlines()]
    with single_process():
        model = load_model_weights(one_process_config(cfg), find_checkpoint(run))
        diffs = [
            abs(
                r["loglikelihood"]
                - megatron_loglik(model, *encode_pair(tok, r["context"], r["continuation"]), cfg.model.seq_length)
            )
            for r in rows
        ]
    print(f"requests {len(diffs)}  max |diff| {max(diffs):.2e} nats  median {statistics.median(diffs):.2e}")


if __name__ == "__main__":
    main()

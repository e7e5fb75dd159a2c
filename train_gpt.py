"""Megatron-core GPT pretraining with width muP + depth-muP patches.

    python train_gpt.py --config configs/tiny_cpu.yaml [key=value ...] [--force]
    torchrun --nproc-per-node 8 train_gpt.py --config configs/gpt_100m_gpu.yaml

Writes the run directory of docs/contracts.md (config.yaml, parametrization.json,
metrics.jsonl, summary.json, checkpoints/) and resumes from it when rerun. Exit codes:
0 completed, 1 failed, 2 invalid config, 3 diverged, 4 run directory locked, 75 preempted.
"""

from __future__ import annotations

import argparse
import os
import sys

from jobscripts.quiet import quiet_libraries
from rundir.contract import ExitCode


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="train_gpt.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="run config YAML (see configs/ and runconfig/schema.py)")
    parser.add_argument("--force", action="store_true", help="retrain even if the run directory says it finished")
    # The DeepSpeed launcher appends --local_rank=N; torchrun and SLURM use LOCAL_RANK.
    parser.add_argument(
        "--local_rank", "--local-rank", dest="local_rank", type=int, default=None, help=argparse.SUPPRESS
    )
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. optimizer.lr=3e-3")
    return parser.parse_intermixed_args(argv)  # flags may sit among the key=value overrides


def main(argv: list[str] | None = None) -> ExitCode:
    quiet_libraries()
    args = parse_args(argv)
    if args.local_rank is not None:
        os.environ.setdefault("LOCAL_RANK", str(args.local_rank))
    from runconfig import ConfigError, load_config
    from runconfig.schema import RunConfig

    try:
        cfg = load_config(RunConfig, args.config, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    from training.runner import Trainer

    return Trainer(cfg, force=args.force).run()


if __name__ == "__main__":
    sys.exit(main())

"""What the CPU pipeline path's torch function mode costs: forward + backward of one stage with
``training.pipeline.cuda_placements_on_cpu`` active (as around megatron's schedule) over the
same step without it, measured in one run.

    python benchmarks/cpu_pipeline_mode.py [--rounds 12] [overrides of configs/tiny_cpu.yaml ...]

The mode sends every torch call through a Python ``__torch_function__``; the cost is per call,
so it shrinks as the model grows. Rounds alternate A/B so drift in machine load hits both; the
ratio of medians is printed. The clock is the process's CPU time (one thread).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from runconfig import load_config  # noqa: E402
from runconfig.schema import RunConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--steps", type=int, default=5, help="forward + backward passes per round")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from training.distributed import single_process
    from training.model import build_model
    from training.pipeline import cuda_placements_on_cpu

    cfg = load_config(RunConfig, "configs/tiny_cpu.yaml", args.overrides)
    m = cfg.model
    with single_process():
        model = build_model(cfg, m.vocab_size)
        tokens = torch.randint(0, m.vocab_size, (cfg.training.micro_batch_size, m.seq_length))
        positions = torch.arange(m.seq_length).expand_as(tokens)

        def steps() -> float:
            start = time.process_time()
            for _ in range(args.steps):
                model(tokens, positions, None, labels=tokens).mean().backward()
            return time.process_time() - start

        steps()
        plain, mode = [], []
        for _ in range(args.rounds):
            plain.append(steps())
            with cuda_placements_on_cpu():
                mode.append(steps())
    a, b = statistics.median(plain), statistics.median(mode)
    print(f"forward+backward, {args.steps} passes per round, {args.rounds} rounds (CPU s, median):")
    print(f"  plain {a:.4f}  under the mode {b:.4f}  ratio {b / a:.3f}")


if __name__ == "__main__":
    main()

"""How many runs a study plans and how long they should take on one GPU: an estimate, stated.

    python benchmarks/gpu_study_budget.py [--study gpu_h100] [--startup-s 15] [--us-per-token-layer 0.09]
        [--step-overhead-ms 10] [--start-gain 4] [--step-gain 1.5] [--train-tokens 8841957]

The planner (study/planner.py) runs to completion on a planted answer: each preset's loss is
a parabola in log2 LR (0.1 nats per octave squared) whose optimum moves with log2 depth
(sp -0.3, depth_mup 0, ode +0.2 octave per doubling, from the middle of the base grid), plus
seed noise of 0.02 nats; the run count hardly depends on these choices (every (preset, depth)
gets its window and its seeds). Each run is then costed:

    run = start-up + steps x (us_per_token_layer x tokens per step x L + step overhead)

with the constants above: the issue's scaling of the 124M GPU profile (0.6 s per 131k-token
step at MFU 0.2 -> ~0.09 us per token per layer at width 256, sequence 512), 10 ms per step of
embedding, output layer and optimizer, and 15 s of start-up (imports, CUDA context, data,
model build: benchmarks/run_startup.py measures it). Packed ``runs_per_gpu`` to a GPU, the
start-ups (CPU work) overlap ``start-gain`` times on the node's cores and the steps share the
GPU with an assumed ``step-gain`` (benchmarks/gpu_packing.py measures it). Prints the runs per
depth, the serial and packed estimates, and the tokens each run reads against the corpus.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rundir.contract import ExitCode  # noqa: E402
from study.planner import Point  # noqa: E402
from study.preview import fixed_design  # noqa: E402
from study.spec import Study, load_study  # noqa: E402


@dataclass(frozen=True)
class Costs:
    startup_s: float = 15.0
    us_per_token_layer: float = 0.09
    step_overhead_ms: float = 10.0
    start_gain: float = 4.0
    step_gain: float = 1.5

    def steps_s(self, s: Study, depth: int) -> float:
        tokens = s.batch * s.seq_length
        per_step = self.us_per_token_layer * 1e-6 * tokens * depth + self.step_overhead_ms * 1e-3
        evals = 2 * s.eval_batches / 3  # two evaluations, forward only: a third of a step per batch
        return (s.steps + evals) * per_step


def planned_runs(s: Study, seed: int = 0) -> list[Point]:
    """Every point the planner asks for on the planted answer (study.preview's fixed design: the
    study has no goals, or their sequential phase is left out)."""
    return fixed_design(s, seed)


def estimate(s: Study, costs: Costs) -> dict:
    runs = planned_runs(s)
    by_depth = Counter(p.depth for p in runs)
    start = costs.startup_s * len(runs)
    steps = sum(n * costs.steps_s(s, depth) for depth, n in by_depth.items())
    packed = start / min(costs.start_gain, s.runs_per_gpu) + steps / (costs.step_gain if s.runs_per_gpu > 1 else 1)
    return {
        "runs": len(runs),
        "by_depth": dict(sorted(by_depth.items())),
        "serial_s": start + steps,
        "packed_s": packed,
        "tokens_per_run": s.steps * s.batch * s.seq_length,
    }


def main() -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="gpu_h100")
    parser.add_argument("--startup-s", type=float, default=Costs.startup_s)
    parser.add_argument("--us-per-token-layer", type=float, default=Costs.us_per_token_layer)
    parser.add_argument("--step-overhead-ms", type=float, default=Costs.step_overhead_ms)
    parser.add_argument("--start-gain", type=float, default=Costs.start_gain)
    parser.add_argument("--step-gain", type=float, default=Costs.step_gain)
    parser.add_argument(
        "--train-tokens", type=int, default=8_841_957, help="the corpus' train tokens (mix, vocab 8192)"
    )
    args = parser.parse_args()
    s = load_study(args.study)
    costs = Costs(args.startup_s, args.us_per_token_layer, args.step_overhead_ms, args.start_gain, args.step_gain)
    e = estimate(s, costs)
    print(f"study {s.name}: {e['runs']} planned runs on the planted answer, by depth {e['by_depth']}")
    for depth in s.depths:
        print(f"  L={depth}: {costs.startup_s + costs.steps_s(s, depth):.1f} s per run "
              f"({costs.steps_s(s, depth):.1f} s of steps)")  # fmt: skip
    print(f"serial: {e['serial_s'] / 60:.1f} min; packed {s.runs_per_gpu} per GPU: {e['packed_s'] / 60:.1f} min "
          f"(start-ups / {min(costs.start_gain, s.runs_per_gpu):g}, steps / {costs.step_gain:g})")  # fmt: skip
    print(f"each run reads {e['tokens_per_run']:,} tokens: {e['tokens_per_run'] / args.train_tokens:.2f} passes "
          f"over {args.train_tokens:,} train tokens")  # fmt: skip
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

"""``python -m training.show --config FILE [key=value ...] [--json] [--gpus N]``: print the resolved table.

The model is built on the ``meta`` device (no memory, no init), so the table of a
multi-billion-parameter config prints in seconds and lists megatron's real parameter names.
Below the table: parameter counts (total, per GPU at the config's TP and PP), model-state
memory per GPU (``training.footprint``; ``--gpus N`` gives the data-parallel size the
distributed optimizer shards over), activation memory per GPU and the peak of the largest
pipeline stage (``training.footprint.activation_memory``; the model built by ``training.footprint.meta_model``) and model FLOPs per token and step (``training.flops``).
``--json`` prints the table alone (the same JSON as a run's ``parametrization.json``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from jobscripts.quiet import quiet_libraries
from runconfig import ConfigError, OverridesParser, load_config
from runconfig.schema import RunConfig
from rundir.contract import ExitCode


def size_lines(cfg: RunConfig, params: list[tuple[str, list[int], bool]], gpus: int | None = None) -> list[str]:
    """Parameter counts, model states per GPU and model FLOPs of ``cfg``, whose one-stage model
    has ``params`` (``training.footprint.split_parameters``), on ``gpus`` GPUs (None: tensor x
    pipeline parallel size, data-parallel 1)."""
    from training.flops import forward_flops_per_token
    from training.footprint import GIB, stage_counts, state_bytes

    m, par = cfg.model, cfg.parallel
    tp, pp = par.tensor_model_parallel_size, par.pipeline_model_parallel_size
    counts, vocab, dp = stage_counts(cfg, params, gpus)
    b = state_bytes(cfg, dp)
    full, causal = (3 * forward_flops_per_token(cfg, vocab, causal=c) for c in (False, True))
    tokens = cfg.training.global_batch_size * m.seq_length
    sharded = f" (sharded over DP={b.dp})" if b.dp > 1 else ""
    return [
        f"parameters: {counts.total:,} = embedding {counts.embedding:,} + output layer {counts.output:,} "
        f"+ layers and final norm {counts.blocks:,} (vocabulary padded to {vocab:,})",
        f"per GPU at TP={tp} PP={pp} (largest pipeline stage): {counts.per_gpu:,} parameters; "
        f"{tp * pp * dp} GPU(s), DP={dp}" + ("" if gpus else " (--gpus N for another data-parallel size)"),
        f"model states per GPU: weights {b.weights} + grads {b.grads} + optimizer {b.optimizer}{sharded} = "
        f"{b.per_parameter:.4g} bytes/parameter = {counts.per_gpu * b.per_parameter / GIB:.3g} GiB",
        *memory_lines(cfg, counts, vocab, dp),
        f"model FLOPs per token, forward + backward: {full / 1e9:.4g} GFLOP (full attention matrix, the MFU "
        f"numerator; Megatron-LM 0.16.1 counts the causal half: {causal / 1e9:.4g} GFLOP); "
        f"per step ({tokens:,} tokens): {full * tokens:.4g} FLOP",
    ]


def memory_lines(cfg: RunConfig, counts: Any, vocab: int, dp: int) -> list[str]:
    """Activations and the peak per GPU (``training.footprint.activation_memory``)."""
    from training.footprint import CUDA_CONTEXT_MIB, GIB, MIB, ActivationShape, activation_memory, peak_stage

    m = cfg.model
    if m.transformer_impl != "local":
        return [f"activations: not estimated for model.transformer_impl={m.transformer_impl} (the local layers only)"]
    shape = ActivationShape.of(cfg, vocab)
    worst = peak_stage(activation_memory(cfg, vocab, counts, dp))
    recompute = m.recompute + (f" {','.join(m.recompute_modules)}" if m.recompute == "selective" else "")
    recompute += f" every {m.recompute_num_layers} layer(s)" if m.recompute == "full" else ""
    precision = "bf16" if shape.bytes == 2 else "fp32"
    eager = "; torch.compile and CUDA graphs not modeled" if m.compile or m.cuda_graphs else ""
    where = f"stage {worst.stage} of {shape.pp}, " if shape.pp > 1 else ""
    return [
        f"activations per GPU ({where}micro-batch {shape.b} x sequence {shape.s}, {precision}, "
        f"{shape.kernel} attention, recompute {recompute}; {worst.in_flight} micro-batch(es) in flight): "
        f"saved for backward {worst.saved / GIB:.3g} GiB (one layer {shape.layer(shape.modules) / MIB:.4g} MiB, "
        f"the loss's fp32 softmax {shape.tokens * (shape.vocab // shape.tp) * 4 / MIB:.4g} MiB), "
        f"peak {worst.activations_peak / GIB:.3g} GiB{eager}",
        f"peak per GPU: model states {worst.model_states / GIB:.3g} + activations {worst.activations_peak / GIB:.3g} "
        f"= {worst.peak / GIB:.3g} GiB (not counted: the CUDA context, ~{CUDA_CONTEXT_MIB} MiB; NCCL buffers; the "
        "allocator's fragmentation; cuBLAS/cuDNN workspaces; the backward's gradient temporaries)",
    ]


def main(argv: list[str] | None = None) -> ExitCode:
    quiet_libraries()
    parser = OverridesParser(
        prog="python -m training.show", description=__doc__.splitlines()[0], override_schema=RunConfig
    )
    parser.add_argument("--config", required=True, help="run config YAML")
    parser.add_argument("--json", action="store_true", help="print the table as JSON (without the size lines)")
    parser.add_argument(
        "--gpus", type=int, default=None, help="GPUs of the run: the data-parallel size the optimizer shards over"
    )
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(RunConfig, args.config, args.overrides)
        if args.gpus is not None:
            from runconfig.validate import validate_layout

            try:
                if args.gpus < 1:
                    raise ValueError("must be at least 1")
                validate_layout(cfg, args.gpus)
            except ValueError as exc:
                raise ValueError(f"--gpus {args.gpus}: {exc}") from None
        from patches.table import build_table, global_parameters
        from training.footprint import meta_model

        resolved, model = meta_model(cfg)
        table = build_table(resolved, global_parameters(model))
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if args.json:
        print(json.dumps(table, indent=2))
    else:
        from patches.table import format_table
        from training.footprint import split_parameters

        print(format_table(table))
        print()
        print("\n".join(size_lines(cfg, split_parameters(model), args.gpus)))
    return ExitCode.OK


if __name__ == "__main__":
    from jobscripts.cli import exit_with

    exit_with(main)

"""Losses, grad norms, a held-out loss and diagnostics rows of a few steps of the CPU backend
in one parallel layout, from the same initial weights in every layout; prints JSON on rank 0.

Run alone for the one-process reference, or under ``torchrun --nproc-per-node N`` with
``--tp``/``--pp`` (data parallelism takes the rest of the world). The initial weights are the
one-stage model's: megatron seeds each pipeline stage differently (seed + 100 x stage, as
megatron-LM does), so the script first builds the model with one stage (TP shards are
layout-independent on the CPU: megatron initializes the full matrix and splits it) and copies
each parameter into this rank's stage by its global name. Extra ``key=value`` arguments override
the config (another preset or base depth); ``stages`` records, per rank, the branch multipliers
its layers apply and each of its parameters' peak LR.
"""

import argparse
import json
import warnings

import torch

warnings.filterwarnings("ignore")

STEPS, GLOBAL_BATCH, MICRO_BATCH, SEQ, VOCAB = 4, 8, 2, 32, 128


def config(tp: int, pp: int, tied: bool, overrides: list[str]):
    from runconfig import load_config
    from runconfig.schema import RunConfig

    return load_config(
        RunConfig,
        "configs/tiny_cpu.yaml",
        [
            "model.num_layers=4",
            "model.hidden_size=64",
            "model.num_attention_heads=4",
            f"model.seq_length={SEQ}",
            f"model.vocab_size={VOCAB}",
            f"model.untie_embeddings_and_output_weights={str(not tied).lower()}",
            "parametrization.preset=depth_mup",
            "parametrization.base_num_layers=2",
            f"parallel.tensor_model_parallel_size={tp}",
            f"parallel.pipeline_model_parallel_size={pp}",
            f"training.global_batch_size={GLOBAL_BATCH}",
            f"training.micro_batch_size={MICRO_BATCH}",
            "optimizer.lr=0.01",
            "optimizer.clip_grad=0.5",
            *overrides,
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--tied", action="store_true", help="tie the output layer to the embedding")
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    args = parser.parse_args()
    from megatron.core import parallel_state

    from patches.table import global_named_parameters
    from training.backends import CpuBackend
    from training.data import BatchPlan
    from training.diagnostics import Diagnostics
    from training.distributed import init_distributed, shutdown
    from training.model import build_model, padded_vocab_size, resolve
    from training.session import gather_table, stage_layer_offset

    info = init_distributed("cpu", tp=args.tp)  # one stage first: the reference initial weights
    one_stage = config(args.tp, 1, args.tied, args.overrides)
    vocab = padded_vocab_size(VOCAB, 2, 128)  # the same rows in every layout (megatron pads to 128 x TP)
    torch.manual_seed(0)
    initial = {name: p.detach().clone() for name, p, _ in global_named_parameters(build_model(one_stage, vocab))}
    parallel_state.destroy_model_parallel()
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tp, pipeline_model_parallel_size=args.pp)

    cfg = config(args.tp, args.pp, args.tied, args.overrides)
    resolved = resolve(cfg)
    model = build_model(cfg, vocab, resolved=resolved)
    with torch.no_grad():
        for name, p, _ in global_named_parameters(model, stage_layer_offset(cfg)):
            p.copy_(initial[name])
        if model.post_process and getattr(model.output_layer.weight, "shared", False):
            model.output_layer.weight.copy_(initial["embedding.word_embeddings.weight"])
    table = gather_table(cfg, model, resolved)
    backend = CpuBackend(cfg, model, resolved)
    for g in backend.param_groups:
        g["lr"] = g["max_lr"]
    # what each rank's stage really applies: its layers' branch multipliers and each of its
    # parameters' peak LR (by global name), gathered to rank 0
    from patches.layer_spec import branch_multipliers

    names = {id(p): name for name, p, _ in global_named_parameters(model, stage_layer_offset(cfg))}
    peak_lrs = {names[id(p)]: g["max_lr"] for g in backend.param_groups for p in g["params"] if id(p) in names}
    stages = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(
        stages,
        {
            "pp_rank": parallel_state.get_pipeline_model_parallel_rank(),
            "branch_multipliers": sorted(branch_multipliers(model)),
            "peak_lrs": peak_lrs,
        },
    )

    plan = BatchPlan(
        GLOBAL_BATCH,
        MICRO_BATCH,
        parallel_state.get_data_parallel_world_size(),
        parallel_state.get_data_parallel_rank(),
    )
    tokens = torch.randint(0, VOCAB, ((STEPS + 1) * GLOBAL_BATCH, SEQ + 1), generator=torch.Generator().manual_seed(1))

    def batches(step: int) -> list[dict[str, torch.Tensor]]:
        out = []
        for j in range(plan.num_microbatches):
            rows = tokens[list(plan.indices(step, j))]
            out.append(
                {
                    "tokens": rows[:, :-1],
                    "labels": rows[:, 1:],
                    "loss_mask": torch.ones(rows.shape[0], SEQ),
                    "position_ids": torch.arange(SEQ).expand(rows.shape[0], SEQ),
                }
            )
        return out

    probe = {k: batches(STEPS)[0][k] for k in ("tokens", "position_ids")}
    pp = parallel_state.get_pipeline_model_parallel_world_size()
    diagnostics = Diagnostics(
        model,
        1,
        probe,
        layer_offset=stage_layer_offset(cfg),
        tp_group=parallel_state.get_tensor_model_parallel_group(),
        pp_group=parallel_state.get_pipeline_model_parallel_group() if pp > 1 else None,
        dp_group=parallel_state.get_data_parallel_group(with_context_parallel=True),
    )
    losses, norms, rows = [], [], []
    for step in range(STEPS):
        diagnostics.before_step(step + 1)
        result = backend.train_step(batches(step))
        rows += diagnostics.after_step(step + 1)
        losses.append(result.loss)
        norms.append(result.grad_norm)
    held_out = backend.evaluate(batches(STEPS))
    if info.rank == 0:
        layout = {
            "tp": parallel_state.get_tensor_model_parallel_world_size(),
            "pp": pp,
            "dp": parallel_state.get_data_parallel_world_size(),
        }
        print(
            json.dumps(
                {
                    "layout": layout,
                    "losses": losses,
                    "grad_norms": norms,
                    "held_out": held_out,
                    "diagnostics": rows,
                    "table": table,
                    "stages": stages,
                }
            )
        )
    shutdown()


if __name__ == "__main__":
    main()

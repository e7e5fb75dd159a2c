"""Losses of a patched model at init and after 3 optimizer steps; prints JSON on rank 0.

Run alone for TP=1 or under ``torchrun --nproc-per-node 2`` with ``--tp 2``.
"""

import argparse
import json
import warnings

import torch

warnings.filterwarnings("ignore")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides")
    args = parser.parse_args()
    from megatron.core import parallel_state

    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.diagnostics import Diagnostics
    from training.distributed import init_distributed, shutdown
    from training.model import build_model, resolve
    from training.optim import CpuOptimizer

    info = init_distributed("cpu", tp=args.tp)
    cfg = load_config(
        RunConfig,
        "configs/tiny_cpu.yaml",
        [
            "model.num_layers=4",
            "model.hidden_size=64",
            "model.num_attention_heads=4",
            "model.vocab_size=128",
            "parametrization.preset=depth_mup",
            "parametrization.base_num_layers=2",
            "parametrization.base_hidden_size=32",
            "parametrization.base_head_dim=8",
            f"parallel.tensor_model_parallel_size={args.tp}",
            "optimizer.lr=0.01",
            "optimizer.clip_grad=0.5",
            *args.overrides,
        ],
    )
    torch.manual_seed(0)
    model = build_model(cfg, 128)
    opt = CpuOptimizer(cfg, [model], resolve(cfg))
    for g in opt.param_groups:
        g["lr"] = g["max_lr"]
    gen = torch.Generator().manual_seed(1)
    losses, norms = [], []
    tokens = torch.randint(0, 128, (4, 33), generator=gen)  # one batch: the loss must fall
    positions = torch.arange(32).unsqueeze(0).expand(4, 32)
    probe = {"tokens": tokens[:, :-1], "position_ids": positions}
    diagnostics = Diagnostics(model, 4, probe, tp_group=parallel_state.get_tensor_model_parallel_group())
    rows = []
    for step in range(1, 5):
        loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
        opt.zero_grad()
        loss.backward()
        losses.append(loss.item())
        diagnostics.before_step(step)
        norms.append(opt.step()[1])
        rows += diagnostics.after_step(step)
    if info.rank == 0:
        print(
            json.dumps(
                {
                    "tp": parallel_state.get_tensor_model_parallel_world_size(),
                    "losses": losses,
                    "grad_norms": norms,
                    "diagnostics": rows,
                }
            )
        )
    shutdown()


if __name__ == "__main__":
    main()

"""Diagnostics over distributed-optimizer shards: under ``torchrun --nproc-per-node 2`` (gloo),
each rank holds an uneven fp32 ``main_param`` shard of every bf16 parameter, as megatron's
distributed optimizer does (rank 0 holds none of every third parameter: ``main_param`` None,
as megatron leaves it); a planted update is applied to the shards. Prints, on rank 0, the
largest relative error of the logged weight and update RMS against the whole tensors, which
every rank can compute."""

import json
import warnings

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore")


def main() -> None:
    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.diagnostics import Diagnostics
    from training.distributed import init_distributed, shutdown
    from training.model import build_model, resolve

    info = init_distributed("cpu")
    cfg = load_config(RunConfig, "configs/tiny_cpu.yaml", ["model.num_layers=2", "model.vocab_size=128"])
    torch.manual_seed(0)
    model = build_model(cfg, 128, resolved=resolve(cfg)).to(torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    full_before, full_update = {}, {}
    for i, (name, p) in enumerate(model.named_parameters()):
        flat = p.detach().float().reshape(-1)
        cut = [0, 0, flat.numel()] if i % 3 == 0 else [0, flat.numel() // 3, flat.numel()]  # rank 0: none of some
        lo, hi = cut[info.rank], cut[info.rank + 1]
        p.main_param = flat[lo:hi].clone() if hi > lo else None
        p.main_param_sharded = True
        full_before[name] = flat.clone()
        full_update[name] = 1e-3 * torch.randn(flat.numel(), generator=g)
        p._planted = full_update[name][lo:hi]
    diagnostics = Diagnostics(model, 1, None, dp_group=dist.group.WORLD)
    diagnostics.before_step(1)
    for p in model.parameters():
        if p.main_param is not None:
            p.main_param.add_(p._planted)
    rows = diagnostics.after_step(1)
    if info.rank == 0:
        rms = lambda t: float(t.double().pow(2).mean().sqrt())  # noqa: E731
        err = 0.0
        for r in rows:
            w, u = rms(full_before[r["param"]]), rms(full_update[r["param"]])
            err = max(err, abs(r["weight_rms"] - w) / max(w, 1e-30), abs(r["update_rms"] - u) / u)  # zero biases: 0
        print(json.dumps({"rows": len(rows), "params": len(full_before), "max_rel_error": err}))
    shutdown()


if __name__ == "__main__":
    main()

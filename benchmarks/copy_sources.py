"""Which module and line issues each copy of a training forward + backward, from the dispatcher.

    python benchmarks/copy_sources.py --config configs/gpt_100m_gpu.yaml                 # one layer, CPU
    python benchmarks/copy_sources.py --config configs/gpt_100m_gpu.yaml --model         # whole model
    python benchmarks/copy_sources.py --config configs/gpt_100m_gpu.yaml model.rope_impl=megatron

Runs the forward and backward of one transformer layer (or, with ``--model``, of the whole
model on one micro-batch with its loss) under a ``TorchDispatchMode`` that records every
data-movement op the ATen dispatcher sees (concatenations, copies, casts, fills, slice and
select gradients, repeats) with where it came from: the last megatron or toolkit source line on
the Python stack for forward ops, and for backward ops the autograd node and the forward line
that created it (anomaly mode keeps the forward traceback on each node). The shape is the
config's, shrunk to ``--hidden/--heads/--seq/--batch`` unless ``--full-shape`` (the op list
does not depend on the size). On CPU the SDPA kernel is PyTorch's CPU flash kernel: copies a
CUDA attention kernel makes inside itself are not ATen calls seen here (step_profile.py's
``--copies`` lists those on a GPU).
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from rundir.contract import ExitCode  # noqa: E402

REPO = str(Path(__file__).resolve().parents[1])
# ATen ops that move or fill memory without arithmetic (overloads folded into the base name).
COPY_OPS = frozenset(
    {
        "cat",
        "stack",
        "clone",
        "copy_",
        "_to_copy",
        "slice_backward",
        "select_backward",
        "slice_scatter",
        "select_scatter",
        "as_strided_scatter",
        "repeat_interleave",
        "repeat",
        "flip",
        "roll",
        "constant_pad_nd",
        "index_select",
        "zeros",
        "zeros_like",
        "new_zeros",
        "zero_",
        "fill_",
        "full",
        "new_full",
    }
)


@dataclass(frozen=True)
class CopyOp:
    op: str  # ATen op name without namespace and overload
    phase: str  # fwd | bwd
    node: str  # the autograd node running it (backward), else ""
    source: str  # "path:line code" of the megatron / toolkit line behind it
    shapes: tuple  # input tensor shapes (the tensors of a cat's list)


def _short(filename: str) -> str:
    return filename.split("site-packages/")[-1].replace(REPO + "/", "")


def _ours(filename: str) -> bool:
    return ("megatron" in filename or filename.startswith(REPO)) and not filename.endswith("copy_sources.py")


def _forward_source(lines: list[str]) -> str:
    """The last megatron/toolkit frame of a formatted traceback (anomaly mode's node metadata)."""
    text = "".join(lines).splitlines()
    found = ""
    for i, line in enumerate(text):
        stripped = line.strip()
        if stripped.startswith("File ") and '"' in stripped and _ours(stripped.split('"')[1]):
            path, lineno = _short(stripped.split('"')[1]), stripped.split("line ")[1].split(",")[0]
            code = text[i + 1].strip() if i + 1 < len(text) else ""
            found = f"{path}:{lineno} {code}"
    return found


class CopyLog(TorchDispatchMode):
    """Records the data-movement ops dispatched while active (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[CopyOp] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func._schema.name.split("::")[-1]
        if name not in COPY_OPS:
            return out
        tensors = args[0] if name in ("cat", "stack") else args
        shapes = tuple(tuple(t.shape) for t in tensors if isinstance(t, torch.Tensor))
        node = torch._C._current_autograd_node()
        if node is not None:
            source = _forward_source(node.metadata.get("traceback_", []))
            self.ops.append(CopyOp(name, "bwd", node.name(), source, shapes))
        else:
            frames = [f for f in traceback.extract_stack() if _ours(f.filename)]
            source = f"{_short(frames[-1].filename)}:{frames[-1].lineno} {frames[-1].line}" if frames else "?"
            self.ops.append(CopyOp(name, "fwd", "", source, shapes))
        return out


def record(fn) -> list[CopyOp]:
    """The copies ``fn()`` (a forward + backward) dispatches, in order."""
    with torch.autograd.set_detect_anomaly(True, check_nan=False), CopyLog() as log:
        fn()
    return log.ops


def layer_step(model: torch.nn.Module, seq: int, batch: int, seed: int = 0):
    """Forward + backward of the model's first decoder layer on random hidden states, with the
    model's own RoPE table (a random output gradient: contiguous, as in training)."""
    layer = model.decoder.layers[0]
    hidden = model.config.hidden_size
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(seq, batch, hidden, generator=g).to(next(model.parameters()))
    x.requires_grad_(True)
    grad = torch.randn(seq, batch, hidden, generator=g).to(x)
    rope = model.rotary_pos_emb(seq) if getattr(model, "rotary_pos_emb", None) is not None else None

    def run() -> None:
        out, _ = layer(x, attention_mask=None, rotary_pos_emb=rope)
        out.backward(grad)

    return run


def model_step(model: torch.nn.Module, vocab: int, seq: int, batch: int, seed: int = 0):
    """Forward + backward of the whole model on one micro-batch of random tokens (loss: token mean)."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
    device = next(model.parameters()).device
    inputs, labels = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    positions = torch.arange(seq, device=device).unsqueeze(0).expand(batch, seq)

    def run() -> None:
        model(inputs, positions, None, labels=labels).float().mean().backward()

    return run


def summary(ops: list[CopyOp]) -> list[tuple[int, CopyOp]]:
    """(count, op) per distinct (op, phase, node, source), in first-seen order."""
    keys = Counter((o.op, o.phase, o.node, o.source) for o in ops)
    seen: dict[tuple, CopyOp] = {}
    for o in ops:
        seen.setdefault((o.op, o.phase, o.node, o.source), o)
    return [(keys[k], o) for k, o in seen.items()]


def main(argv: list[str] | None = None) -> ExitCode:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--model", action="store_true", help="the whole model on one micro-batch, not one layer")
    parser.add_argument("--full-shape", action="store_true", help="keep the config's width, heads and sequence")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("overrides", nargs="*", help="key=value config overrides")
    args = parser.parse_args(argv)

    from runconfig import load_config
    from runconfig.schema import RunConfig
    from training.distributed import init_distributed, seed_everything, shutdown
    from training.model import Placement, build_model

    shape = [] if args.full_shape else [
        f"model.hidden_size={args.hidden}", f"model.num_attention_heads={args.heads}",
        f"model.seq_length={args.seq}", "model.kv_channels=null", "model.ffn_hidden_size=null",
        f"model.vocab_size={args.vocab}", f"parametrization.base_hidden_size={args.hidden}",
        "parametrization.base_head_dim=null", "model.num_query_groups=null",
    ]  # fmt: skip
    cuda = args.device == "cuda"
    precision = "bf16" if cuda else "fp32"
    cfg = load_config(
        RunConfig,
        args.config,
        [
            *shape,
            f"parallel.device={args.device}",
            f"training.precision={precision}",
            "data.mock=true",
            *args.overrides,
        ],
    )
    init_distributed(args.device)
    try:
        seed_everything(0, args.device)
        vocab = cfg.model.vocab_size
        model = build_model(cfg, vocab, Placement(device=args.device, bf16=cuda))
        seq, batch = cfg.model.seq_length, args.batch
        fn = model_step(model, vocab, seq, batch) if args.model else layer_step(model, seq, batch)
        fn()  # warm-up: lazily built tables (RoPE, caches) are not copies of a step
        ops = record(fn)
    finally:
        shutdown()
    what = "whole model, one micro-batch" if args.model else "one layer"
    fwd = sum(o.phase == "fwd" for o in ops)
    print(f"{what}: {len(ops)} data-movement ops ({fwd} forward, {len(ops) - fwd} backward)")
    print(f"{'n':>3} {'op':16s} {'phase':5s} {'autograd node':32s} source")
    for count, o in summary(ops):
        print(f"{count:3d} {o.op:16s} {o.phase:5s} {o.node[:32]:32s} {o.source[:150]}")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())

"""A config's size before it runs: parameters per GPU and the model states they hold.

Read from the global parameter names and shapes of the model ``training.show`` builds on the
meta device, split the way megatron-core splits a GPT:

* tensor parallelism divides the parameters megatron marks as split (``tensor_model_parallel``,
  read by ``patches.table.tp_partition_dim``): the column-parallel matrices and their biases
  (``linear_qkv``, ``linear_fc1``, linear1's ``linear_fc``), the row-parallel matrices
  (``linear_proj``, ``linear_fc2``; their biases stay whole), the word embedding and the output
  layer (the vocabulary is padded to a multiple of 128 x TP first); norms and learned position
  embeddings are whole on every rank;
* pipeline stage k of P holds layers [k L/P, (k+1) L/P), the first also the embeddings, the
  last the final norm and the output layer, or with tied embeddings and P > 1 its copy of the
  word embedding (megatron keeps one per end of the pipeline).

Model states are bytes per parameter on the GPU path (megatron DDP with fp32 gradient
buffers, megatron's optimizer; Megatron-LM's docs/user-guide/features/dist_optimizer.md):
bf16 weights 2 + fp32 gradients 4 + fp32 main weights 4 + Adam's two moments 8 = 18, and
with the distributed optimizer 6 + 12/DP (main weights and moments sharded over the
data-parallel ranks); fp32: 4 + 4 + 8 = 16, distributed 8 + 8/DP; SGD keeps one momentum
buffer (none at momentum 0) instead of two moments. Activations, the CUDA context, NCCL
buffers and the allocator's fragmentation come on top and are not estimated here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from patches.table import global_named_parameters, layer_of, tp_partition_dim
from runconfig.schema import RunConfig

GIB = 2**30


@dataclass(frozen=True)
class ParameterCounts:
    total: int  # the model's parameters (global shapes, each tensor once)
    embedding: int  # embedding.* (word, and learned position embeddings)
    output: int  # the untied output layer (0 when tied)
    per_stage: tuple[int, ...]  # on one GPU of each pipeline stage (tensor-parallel shard)

    @property
    def blocks(self) -> int:
        """The transformer layers and the final norm."""
        return self.total - self.embedding - self.output

    @property
    def per_gpu(self) -> int:
        """On one GPU of the largest pipeline stage: what its memory has to hold."""
        return max(self.per_stage)


def split_parameters(model: torch.nn.Module) -> list[tuple[str, list[int], bool]]:
    """(global name, shape, split over tensor-parallel ranks) of each parameter of a one-process
    model (TP = PP = 1) built with initialization on: megatron marks its split weights then."""
    return [(name, list(p.shape), tp_partition_dim(p) is not None) for name, p, _ in global_named_parameters(model)]


def count_parameters(
    params: Iterable[tuple[str, list[int], bool]], num_layers: int, tp: int, pp: int, tied: bool
) -> ParameterCounts:
    """Counts of (global name, global shape, split over TP) rows under TP = ``tp`` and PP = ``pp``."""
    total = embedding = output = 0
    stages = [0] * pp
    for name, shape, split in params:
        n = 1
        for dim in shape:
            n *= dim
        total += n
        local = n // tp if split else n
        layer = layer_of(name)
        if layer is not None:
            stages[layer * pp // num_layers] += local
        elif name.startswith("embedding."):
            embedding += n
            stages[0] += local
            if tied and pp > 1 and name == "embedding.word_embeddings.weight":
                stages[-1] += local
        else:  # final norm, output layer
            output += n if name == "output_layer.weight" else 0
            stages[-1] += local
    return ParameterCounts(total, embedding, output, tuple(stages))


@dataclass(frozen=True)
class StateBytes:
    weights: int  # bytes per parameter
    grads: int
    optimizer: int  # fp32 main weights (bf16) and the optimizer's buffers, before sharding
    dp: int  # the optimizer part is divided by this (1 without the distributed optimizer)

    @property
    def per_parameter(self) -> float:
        return self.weights + self.grads + self.optimizer / self.dp


def state_bytes(cfg: RunConfig, dp: int) -> StateBytes:
    """Bytes per parameter of model states for ``cfg`` at data-parallel size ``dp``."""
    gpu = cfg.parallel.device != "cpu"  # auto: the GPU path, where the memory matters
    bf16 = cfg.training.precision == "bf16" or (cfg.training.precision == "auto" and gpu)
    if cfg.optimizer.name == "sgd":
        buffers = 4 if cfg.optimizer.sgd_momentum > 0 else 0
    else:
        buffers = 8  # Adam's first and second moments, fp32
    sharded = gpu and cfg.parallel.use_distributed_optimizer
    return StateBytes(2 if bf16 else 4, 4, buffers + (4 if bf16 else 0), dp if sharded else 1)

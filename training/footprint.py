"""A config's size before it runs: parameters per GPU and the model states they hold.

Read from the global parameter names and shapes of the model ``training.show`` builds on the
meta device, split the way megatron-core splits a GPT:

* tensor parallelism divides the parameters megatron marks as split (``tensor_model_parallel``,
  read by ``patches.table.tp_partition_dim``): the column-parallel matrices and their biases
  (``linear_qkv``, ``linear_fc1``, linear1's ``linear_fc``), the row-parallel matrices
  (``linear_proj``, ``linear_fc2``; their biases stay whole), the word embedding and the output
  layer (the vocabulary is padded to a multiple of ``model.make_vocab_size_divisible_by`` x TP
  first); norms and learned position embeddings are whole on every rank;
* pipeline stage k of P holds layers [k L/P, (k+1) L/P), the first also the embeddings, the
  last the final norm and the output layer, or with tied embeddings and P > 1 its copy of the
  word embedding (megatron keeps one per end of the pipeline).

Model states are bytes per parameter on the GPU path (megatron DDP with fp32 gradient
buffers, megatron's optimizer; Megatron-LM's docs/user-guide/features/dist_optimizer.md):
bf16 weights 2 + fp32 gradients 4 + fp32 main weights 4 + Adam's two moments 8 = 18, and
with the distributed optimizer 6 + 12/DP (main weights and moments sharded over the
data-parallel ranks); fp32: 4 + 4 + 8 = 16, distributed 8 + 8/DP; SGD keeps one momentum
buffer (none at momentum 0) instead of two moments.

Activations (:func:`activation_memory`) are the bytes this toolkit's model saves for backward,
counted tensor by tensor from what its modules save (each storage once), in the spirit of
Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
Table 2: ``s b h (34 + 5 a s / h)`` bytes per layer for fp16 with dropout) and Megatron-LM's
``megatron/training/theoretical_memory_usage.py``, but for the modules that really run here:
megatron-core's local layers, the toolkit's SDPA core attention and RoPE
(``training/attention.py``), megatron's cross-entropy. Per layer and micro-batch, with
``e`` bytes per activation (2 bf16, 4 fp32), TP ``t``, ``/sp`` = divided by ``t`` under
sequence parallelism, query width ``q = heads d / t``:

* each norm keeps its input ``s b h e /sp`` (LayerNorm also mean and rstd, ``s b /sp`` each, fp32
  on CUDA; RMSNorm its fp32 rstd on CUDA, and on CPU torch's composite keeps fp32 input and
  output); the matrix after it keeps the norm's output ``s b h e /sp`` (megatron's linears save
  their local input and gather it again in backward);
* attention keeps what the kernel's inputs hold: the fused QKV projection ``s b (heads + 2
  groups) d e / t`` while ``v`` (or an unrotated ``q`` or ``k``) is a view of it, rotated
  ``q`` (``s b q e``) and ``k`` as new tensors, GQA's repeated ``k`` and ``v`` (``s b q e``
  each, then the projection is not kept); the fused kernels (flash, cuDNN, efficient, and
  PyTorch's CPU flash kernel) add their output ``s b q e`` and fp32 logsumexp ``b heads s``,
  never the ``s x s`` scores; the output projection keeps its input, which is the kernel's
  output itself where the kernel lays it out in ``q``'s dimension order (flash on CPU and
  CUDA, cuDNN) and a copy otherwise (efficient, math). The math kernel keeps fp32
  scaled ``q`` and ``k``, the fp32 probabilities ``b heads s s`` (with dropout also its
  mask and the dropped probabilities) and ``v`` (fp32 copy in bf16);
* the MLP keeps ``s b f e / t`` per saved tensor: 2 for gelu (input and output), 1 for relu
  (its output is fc2's input), 5 for unfused SwiGLU (fc1's output counts twice: it is ``2f``
  wide), 3 for megatron's fused bias-SwiGLU; linear1 keeps ``phi``'s tensor ``s b h e``
  (gathered over TP);
* hidden dropout keeps a mask per dropout (1 byte on CUDA, ``e`` on CPU).

Selective recompute (megatron-core's ``recompute_modules``) keeps for ``core_attn`` only the
core attention's inputs and the output projection's input, for ``mlp`` only the MLP's input,
for ``layernorm`` only the norms' inputs (their outputs are freed and recomputed); full
recompute keeps one ``s b h e /sp`` per chunk of ``recompute_num_layers`` layers (and RoPE's fp32
frequencies once). Outside the layers: the token ids (and learned-position ids), 8 bytes each;
the last stage's final norm, output layer input and the loss's fp32 softmax ``s b V / t x 4``
with its target ids. Pipeline stage ``k`` of ``P`` holds ``min(P - k, M)`` micro-batches in
flight (1F1B, ``M`` micro-batches per step) and every stage but the last keeps its output per
micro-batch (megatron's schedules do not free it). The peak adds what exists only for a moment:
the bf16 logits beside their fp32 copy in the loss (``2 s b V / t``), or one recomputed layer
chunk in backward. Not counted: the CUDA context, NCCL buffers, the caching allocator's
fragmentation, cuBLAS/cuDNN workspaces, the backward's gradient temporaries (a few ``s b h``
and ``s b f`` of one layer at a time) and the weight-gradient copy of one matrix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

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


# ----------------------------------------------------------------------------- activations

MIB = 2**20
CUDA_CONTEXT_MIB = 600  # a CUDA context with torch's kernels loaded (H100, torch 2.x: 500-600 MiB)
SELECTIVE_MODULES = ("core_attn", "mlp", "layernorm")


@dataclass(frozen=True)
class StageMemory:
    """One GPU of pipeline stage ``stage``: bytes for one step of ``cfg``."""

    stage: int
    in_flight: int  # micro-batches whose activations the stage holds at once
    model_states: int
    saved: int  # activations saved for backward, all in-flight micro-batches
    transient: int  # on top of ``saved`` at the peak (bf16 logits, a recomputed chunk)

    @property
    def activations_peak(self) -> int:
        return self.saved + self.transient

    @property
    def peak(self) -> int:
        return self.model_states + self.activations_peak


@dataclass(frozen=True)
class ActivationShape:
    """What decides the activation bytes of a config, read once (:meth:`of`)."""

    s: int
    b: int
    h: int
    heads: int
    groups: int
    d: int
    ffn: int
    vocab: int
    layers: int
    tp: int
    pp: int
    sp: bool
    bytes: int  # per activation element: 2 bf16, 4 fp32
    cuda: bool
    norm: str
    activation: str
    block: str
    phi: str
    bias: bool
    rope: str  # "" (learned positions), "toolkit", "megatron"
    kernel: str  # flash | cudnn | efficient | math
    hidden_dropout: float
    attention_dropout: float
    recompute: str
    modules: frozenset[str]
    chunk: int  # recompute_num_layers (full)

    @classmethod
    def of(cls, cfg: RunConfig, vocab: int, device: str | None = None) -> ActivationShape:
        """``device`` (cpu | cuda) overrides ``parallel.device`` (auto: the GPU path, as state_bytes)."""
        m, par = cfg.model, cfg.parallel
        cuda = (device or par.device) != "cpu"
        bf16 = cfg.training.precision == "bf16" or (cfg.training.precision == "auto" and cuda)
        kernel = m.attention_backend
        if kernel == "auto":  # PyTorch's pick: fused where it can (cuDNN on Hopper, training/attention.py)
            if cuda:
                kernel = "cudnn" if bf16 else "efficient"  # flash and cuDNN take fp16/bf16 only
            else:
                kernel = "math" if m.attention_dropout > 0 else "flash"  # CPU flash has no dropout
        rope = "" if m.position_embedding_type != "rope" else m.rope_impl
        return cls(
            s=m.seq_length, b=cfg.training.micro_batch_size, h=m.hidden_size, heads=m.num_attention_heads,
            groups=m.num_query_groups or m.num_attention_heads, d=m.head_dim, ffn=m.ffn_hidden_size or 4 * m.hidden_size,
            vocab=vocab, layers=m.num_layers, tp=par.tensor_model_parallel_size, pp=par.pipeline_model_parallel_size,
            sp=par.sequence_parallel and par.tensor_model_parallel_size > 1, bytes=2 if bf16 else 4, cuda=cuda,
            norm=m.normalization, activation=m.activation, block=m.block, phi=m.linear1_phi, bias=m.add_bias_linear,
            rope=rope, kernel=kernel, hidden_dropout=m.hidden_dropout, attention_dropout=m.attention_dropout,
            recompute=m.recompute, modules=frozenset(m.recompute_modules if m.recompute == "selective" else ()),
            chunk=m.recompute_num_layers,
        )  # fmt: skip

    # -- pieces, bytes per micro-batch on one GPU
    @property
    def tokens(self) -> int:
        return self.s * self.b

    @property
    def hidden(self) -> int:
        """One ``s b h`` activation, split over TP under sequence parallelism."""
        return self.tokens * self.h * self.bytes // (self.tp if self.sp else 1)

    def norm_bytes(self, recomputed: bool) -> int:
        """What a norm keeps: its input, and its statistics unless it is recomputed."""
        rows = self.tokens // (self.tp if self.sp else 1)
        if recomputed:
            return self.hidden
        if self.norm == "LayerNorm":  # mean and rstd
            return self.hidden + 2 * rows * (4 if self.cuda else self.bytes)
        if self.cuda:  # torch's fused RMSNorm: input and fp32 rstd
            return self.hidden + rows * 4
        return 2 * rows * self.h * 4 + rows * 4  # CPU composite: fp32 input and output, rstd

    def mask(self, elements: int) -> int:
        """A dropout mask: bool on CUDA, the activation's dtype on CPU."""
        return elements * (1 if self.cuda else self.bytes) if self.hidden_dropout > 0 else 0

    def attention_bytes(self, recompute_core: bool) -> int:
        """The attention's saved tensors from the QKV projection's output to the output
        projection's input (the norm and the projection input before it excluded)."""
        heads, groups, e, n = self.heads // self.tp, self.groups // self.tp, self.bytes, self.tokens
        q = n * heads * self.d * e  # one query-wide tensor
        mixed = n * (heads + 2 * groups) * self.d * e  # the fused QKV projection
        gqa = heads != groups
        q_new = bool(self.rope) or gqa  # rotated, or megatron's reshape copies a grouped q
        rope_tables = 4 * self.s * self.d * e if self.rope == "megatron" else 0  # cos, sin for q and k
        # the core attention's inputs: v (and an unrotated q or k) are views of the projection
        inputs = mixed + (q if q_new else 0) + (n * groups * self.d * e if self.rope else 0)
        if recompute_core:  # megatron checkpoints the core attention: its inputs, and its output
            return rope_tables + inputs + q
        # what SDPA is given: GQA's k and v repeated to every head (then the projection is free)
        given = 3 * q if gqa else inputs
        if self.kernel == "math":
            acc = 4  # PyTorch's math kernel computes in fp32 (bf16 inputs upcast)
            scores = self.b * heads * self.s * self.s * acc
            v = n * heads * self.d * 4 if e != 4 else (q if gqa else mixed)
            dropout = 0
            if self.attention_dropout > 0:  # its mask and the dropped probabilities
                dropout = self.b * heads * self.s * self.s * ((1 if self.cuda else acc) + acc)
            return rope_tables + 2 * n * heads * self.d * acc + scores + dropout + v + q  # + output copy
        lse_rows = -(-self.s // 32) * 32 if self.kernel == "efficient" and self.cuda else self.s
        lse = self.b * heads * lse_rows * 4
        # the output projection's input is the kernel's output where the kernel lays it out in
        # q's dimension order, [s, b, heads, d] (flash: empty_like(q); cuDNN: matching layout)
        aliased = self.kernel in ("flash", "cudnn")
        return rope_tables + given + q + lse + (0 if aliased else q)

    def mlp_bytes(self, recompute_mlp: bool) -> int:
        """The MLP's saved tensors after its input."""
        if recompute_mlp:
            return 0
        if self.block == "linear1":  # phi of the gathered output (relu keeps its output, abs and gelu their input)
            return self.tokens * self.h * self.bytes
        f = self.tokens * self.ffn * self.bytes // self.tp
        if self.activation == "relu":
            return f
        if self.activation == "gelu":
            return 2 * f
        fused = self.cuda and self.bias  # megatron's bias-SwiGLU: fc1's output (2f) and its result
        return 3 * f if fused else 5 * f

    def layer(self, modules: frozenset[str] = frozenset()) -> int:
        """Bytes one transformer layer saves for one micro-batch, recomputing ``modules``."""
        ln = "layernorm" in modules
        norm_out = 0 if ln else self.hidden  # the matrix after a norm keeps the norm's output
        dropout = 2 * self.mask(self.tokens * self.h // (self.tp if self.sp else 1))
        mlp_input = 0 if ln else self.hidden
        return (
            self.norm_bytes(ln) + norm_out + self.attention_bytes("core_attn" in modules)
            + self.norm_bytes(ln) + mlp_input + self.mlp_bytes("mlp" in modules) + dropout
        )  # fmt: skip

    def embedding(self) -> int:
        ids = self.tokens * 8 * (1 if self.rope else 2)  # token ids (and learned-position ids), int64
        masked = self.tokens if self.tp > 1 else 0  # VocabParallelEmbedding's out-of-range mask
        return ids + masked + self.mask(self.tokens * self.h // (self.tp if self.sp else 1))

    def head(self) -> int:
        """The last stage's final norm, output layer input and loss (fp32 softmax, target ids)."""
        softmax = self.tokens * (self.vocab // self.tp) * 4
        return self.norm_bytes(False) + self.hidden + softmax + self.tokens * (1 + 8)

    def shared(self) -> int:
        """Once per stage: RoPE's tables, shared by every layer and micro-batch."""
        if self.recompute == "full":
            return self.s * self.d * 4 if self.rope else 0  # the fp32 frequencies each chunk keeps
        return 2 * self.s * self.d * self.bytes if self.rope == "toolkit" else 0

    def stage(self, k: int, microbatches: int) -> tuple[int, int, int]:
        """(in-flight micro-batches, saved bytes, transient bytes) of pipeline stage ``k``."""
        layers = self.layers // self.pp
        first, last = k == 0, k == self.pp - 1
        if self.recompute == "full":
            per_layers = -(-layers // self.chunk) * self.hidden  # each chunk's input
            recomputed = min(self.chunk, layers) * self.layer()
        else:
            per_layers = layers * self.layer(self.modules)
            recomputed = self.layer() - self.layer(self.modules)  # one layer's recomputed part
        per_mb = per_layers + (self.embedding() if first else 0) + (self.head() if last else self.hidden)
        in_flight = min(self.pp - k, microbatches)
        saved = in_flight * per_mb + self.shared()
        if not last:
            return in_flight, saved, recomputed
        logits = self.tokens * (self.vocab // self.tp) * 2 if self.bytes == 2 else 0  # bf16 beside fp32
        # the logits exist at the start of backward; a recomputed chunk once the head is freed
        return in_flight, saved, max(logits, recomputed - self.head())


def activation_memory(cfg: RunConfig, vocab: int, counts: ParameterCounts, dp: int) -> list[StageMemory]:
    """Each pipeline stage's model states and activations for ``cfg`` (padded vocabulary
    ``vocab``, parameter ``counts``) at data-parallel size ``dp``: one GPU of each stage."""
    shape = ActivationShape.of(cfg, vocab)
    microbatches = cfg.training.global_batch_size // (cfg.training.micro_batch_size * dp)
    per_param = state_bytes(cfg, dp).per_parameter
    stages = []
    for k, params in enumerate(counts.per_stage):
        in_flight, saved, transient = shape.stage(k, microbatches)
        stages.append(StageMemory(k, in_flight, int(params * per_param), saved, transient))
    return stages


def peak_stage(stages: list[StageMemory]) -> StageMemory:
    """The stage whose GPU needs the most memory."""
    return max(stages, key=lambda st: st.peak)


def vocab_size_of(cfg: RunConfig) -> int:
    """The vocabulary size a run will use (from the config, else the data manifest)."""
    from runconfig import ConfigError

    if cfg.model.vocab_size is not None:
        return cfg.model.vocab_size
    if cfg.data.manifest:
        from data_prep.manifest import read_manifest

        return read_manifest(cfg.data.manifest).vocab_size
    if cfg.data.tokenizer:
        from data_prep.tokenizer import load_tokenizer

        return load_tokenizer(cfg.data.tokenizer).vocab_size
    raise ConfigError("model.vocab_size: needed to build the table (or give data.manifest / data.tokenizer)")


def meta_model(cfg: RunConfig) -> tuple[Any, torch.nn.Module]:
    """``cfg``'s resolved parametrization and its patched model as one stage (TP = PP = 1) on the
    meta device: no memory; initialization on, which costs nothing there and is what makes
    megatron mark the weights it splits over tensor-parallel ranks (:func:`split_parameters`)."""
    from training.checkpoint import one_process_config
    from training.distributed import single_process
    from training.model import Placement, build_model, padded_vocab_size, resolve

    resolved = resolve(cfg)
    vocab = padded_vocab_size(
        vocab_size_of(cfg), cfg.parallel.tensor_model_parallel_size, cfg.model.make_vocab_size_divisible_by
    )
    with single_process(), torch.device("meta"):
        return resolved, build_model(one_process_config(cfg), vocab, Placement(initialize=True), resolved=resolved)


def stage_counts(
    cfg: RunConfig, params: list[tuple[str, list[int], bool]], gpus: int | None = None
) -> tuple[ParameterCounts, int, int]:
    """(parameter counts, padded vocabulary, data-parallel size) of ``cfg`` on ``gpus`` GPUs (None:
    TP x PP, data-parallel 1), whose one-stage model has ``params`` (:func:`split_parameters`)."""
    m, par = cfg.model, cfg.parallel
    tp, pp = par.tensor_model_parallel_size, par.pipeline_model_parallel_size
    counts = count_parameters(params, m.num_layers, tp, pp, tied=not m.untie_embeddings_and_output_weights)
    vocab = next(shape[0] for name, shape, _ in params if name == "embedding.word_embeddings.weight")
    return counts, vocab, (gpus or tp * pp) // (tp * pp)


def config_peak(cfg: RunConfig, gpus: int | None = None) -> StageMemory:
    """The memory per GPU of ``cfg``'s largest pipeline stage on ``gpus`` GPUs (None: TP x PP,
    data-parallel 1), from its model built on the meta device (:func:`meta_model`)."""
    counts, vocab, dp = stage_counts(cfg, split_parameters(meta_model(cfg)[1]), gpus)
    return peak_stage(activation_memory(cfg, vocab, counts, dp))

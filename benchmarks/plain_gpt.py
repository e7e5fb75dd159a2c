"""A plain-PyTorch GPT of a run config's shape: the reference the toolkit's throughput is judged by.

What a pretraining team would write without Megatron (nanoGPT / llm.c style): pre-LN blocks,
one fused QKV ``Linear``, PyTorch SDPA with a causal mask, megatron's rotary layout (pairs
``(x_i, x_{i+d/2})``, base 10000) or learned positions, exact GELU (or ReLU / SwiGLU), an
untied or tied output layer, the summed token cross-entropy computed inside ``forward`` so
``torch.compile`` sees the whole step. It imports nothing of the toolkit;
:func:`load_megatron_weights` (which does) copies a toolkit model's weights in, with the
parametrization's multipliers folded into the weights exactly as the Hugging Face export does
(``training.hf_layout``), so both compute the same function.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    layers: int
    heads: int
    seq: int
    groups: Optional[int] = None  # query groups (GQA); None: heads
    head_dim: Optional[int] = None  # None: hidden // heads
    ffn: Optional[int] = None  # None: 4 * hidden
    norm: str = "LayerNorm"  # LayerNorm | RMSNorm
    eps: float = 1e-5
    activation: str = "gelu"  # gelu | relu | swiglu
    bias: bool = False  # biases of the linear layers (norms always have theirs, as megatron's)
    rope: bool = True  # False: learned absolute positions
    tied: bool = False

    @property
    def d(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def g(self) -> int:
        return self.groups or self.heads

    @property
    def f(self) -> int:
        return self.ffn or 4 * self.hidden


def shape_of(cfg: Any, vocab: int) -> Shape:
    """The :class:`Shape` of a toolkit ``RunConfig`` (duck-typed: any object with its ``model`` keys)."""
    m = cfg.model
    if m.block != "standard":
        raise ValueError(f"model.block={m.block!r}: the plain GPT has standard blocks only")
    return Shape(
        vocab=vocab,
        hidden=m.hidden_size,
        layers=m.num_layers,
        heads=m.num_attention_heads,
        seq=m.seq_length,
        groups=m.num_query_groups,
        head_dim=m.kv_channels,
        ffn=m.ffn_hidden_size,
        norm=m.normalization,
        eps=m.layernorm_epsilon,
        activation=m.activation,
        bias=m.add_bias_linear,
        rope=m.position_embedding_type == "rope",
        tied=not m.untie_embeddings_and_output_weights,
    )


def _norm(shape: Shape) -> nn.Module:
    if shape.norm == "RMSNorm":
        return nn.RMSNorm(shape.hidden, eps=shape.eps)
    return nn.LayerNorm(shape.hidden, eps=shape.eps)


def rope_tables(seq: int, d: int, device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin ``[seq, d]`` of megatron's RotaryEmbedding (base 10000, halves repeated)."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32, device=device) / d))
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32, device=device), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x [b, heads, s, d]``: x cos + rotate_half(x) sin."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.heads, self.groups, self.d = shape.heads, shape.g, shape.d
        self.qkv = nn.Linear(shape.hidden, (shape.heads + 2 * shape.g) * shape.d, bias=shape.bias)
        self.proj = nn.Linear(shape.heads * shape.d, shape.hidden, bias=shape.bias)

    def forward(self, x: torch.Tensor, rope: Optional[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split([self.heads * self.d, self.groups * self.d, self.groups * self.d], dim=-1)
        q = q.view(b, s, self.heads, self.d).transpose(1, 2)
        k = k.view(b, s, self.groups, self.d).transpose(1, 2)
        v = v.view(b, s, self.groups, self.d).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, *rope), apply_rope(k, *rope)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.groups != self.heads)
        return self.proj(out.transpose(1, 2).reshape(b, s, self.heads * self.d))


class MLP(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.gated = shape.activation == "swiglu"
        self.act = {"gelu": F.gelu, "relu": F.relu, "swiglu": F.silu}[shape.activation]
        self.fc1 = nn.Linear(shape.hidden, shape.f * (2 if self.gated else 1), bias=shape.bias)
        self.fc2 = nn.Linear(shape.f, shape.hidden, bias=shape.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.gated:  # megatron's GLU: act(first half) * second half
            gate, up = h.chunk(2, dim=-1)
            return self.fc2(self.act(gate) * up)
        return self.fc2(self.act(h))


class Block(nn.Module):
    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.ln1, self.attn, self.ln2, self.mlp = _norm(shape), Attention(shape), _norm(shape), MLP(shape)

    def forward(self, x: torch.Tensor, rope: Optional[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), rope)
        return x + self.mlp(self.ln2(x))


class PlainGPT(nn.Module):
    """``forward(tokens [b, s], labels [b, s] | None)``: the summed token cross-entropy, or the
    logits ``[b, s, vocab]`` without labels."""

    def __init__(self, shape: Shape) -> None:
        super().__init__()
        self.shape = shape
        self.tok_emb = nn.Embedding(shape.vocab, shape.hidden)
        self.pos_emb = None if shape.rope else nn.Embedding(shape.seq, shape.hidden)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.ln_f = _norm(shape)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)
        if shape.tied:
            self.lm_head.weight = self.tok_emb.weight
        if shape.rope:
            cos, sin = rope_tables(shape.seq, shape.d)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self, std: float = 0.02) -> None:
        """GPT-2's init: N(0, 0.02), output projections N(0, 0.02 / sqrt(2L)), norms 1, biases 0."""
        for name, p in self.named_parameters():
            if p.dim() == 1:
                (p.fill_(1.0) if name.endswith("weight") else p.zero_())
            elif name.endswith(("proj.weight", "fc2.weight")):
                p.normal_(0.0, std / math.sqrt(2 * self.shape.layers))
            else:
                p.normal_(0.0, std)

    def forward(self, tokens: torch.Tensor, labels: Optional[torch.Tensor] = None) -> torch.Tensor:
        s = tokens.shape[1]
        x = self.tok_emb(tokens)
        if self.pos_emb is not None:
            x = x + self.pos_emb(torch.arange(s, device=tokens.device))
        rope = (self.rope_cos[:s], self.rope_sin[:s]) if self.shape.rope else None
        for block in self.blocks:
            x = block(x, rope)
        logits = self.lm_head(self.ln_f(x))
        if labels is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum")


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices and embeddings, none on norms and biases (megatron's default)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def load_megatron_weights(plain: PlainGPT, state: dict[str, torch.Tensor], cfg: Any, resolved: Any) -> None:
    """Copy a (single-rank) toolkit GPTModel's state dict into ``plain``, the parametrization's
    multipliers folded into the weights (``training.hf_layout``'s folds: exact in real arithmetic)."""
    from training.hf_layout import _layer_tensors, folds

    f = folds(cfg, resolved)
    sd = {
        "tok_emb.weight": state["embedding.word_embeddings.weight"] * f.embedding,
        "ln_f.weight": state["decoder.final_layernorm.weight"],
    }
    if "decoder.final_layernorm.bias" in state:
        sd["ln_f.bias"] = state["decoder.final_layernorm.bias"]
    if plain.pos_emb is not None:
        sd["pos_emb.weight"] = state["embedding.position_embeddings.weight"] * f.embedding
    names = {"o": "attn.proj", "fc1": "mlp.fc1", "fc2": "mlp.fc2", "input_layernorm": "ln1", "pre_mlp_layernorm": "ln2"}
    for i in range(plain.shape.layers):
        t = _layer_tensors(state, i, cfg, f)
        for suffix, kind in (("_w", "weight"), ("_b", "bias")):
            if "q" + suffix in t:
                sd[f"blocks.{i}.attn.qkv.{kind}"] = torch.cat([t["q" + suffix], t["k" + suffix], t["v" + suffix]], 0)
            for short, module in names.items():
                if short + suffix in t:
                    sd[f"blocks.{i}.{module}.{kind}"] = t[short + suffix]
    if not plain.shape.tied:
        sd["lm_head.weight"] = state["output_layer.weight"] * f.logit
    own = plain.state_dict()
    missing = sorted(set(own) - set(sd) - ({"lm_head.weight"} if plain.shape.tied else set()))
    if missing:
        raise ValueError(f"load_megatron_weights: no megatron tensor for {missing}")
    with torch.no_grad():
        for name, tensor in sd.items():
            own[name].copy_(tensor)

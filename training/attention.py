"""Core attention on ``torch.nn.functional.scaled_dot_product_attention``.

megatron-core's ``DotProductAttention`` allocates from a CUDA memory buffer and so cannot
run on CPU; Transformer Engine may be absent on a GPU machine. This module implements the
same ``core_attention`` contract (``[s, b, heads, head_dim]`` in, ``[s, b, heads*head_dim]``
out, causal mask, ``config.softmax_scale``, GQA) with PyTorch's fused SDPA, which runs on
CPU and uses flash attention on GPU. The local layer spec uses it on both paths.

``backend`` pins PyTorch's kernel (``model.attention_backend``): "auto" lets PyTorch pick
(cuDNN's attention on Hopper in torch 2.11), the others name one ``SDPBackend``. The kernels
differ in the layouts they take without a copy: megatron hands over ``[s, b, h, d]`` views,
so the choice moves time between attention and copies (benchmarks/step_profile.py shows
where it goes).

:class:`RopeSelfAttention` is megatron's ``SelfAttention`` with RoPE applied by
:class:`RotaryQKV` straight from the fused QKV projection: megatron-core's unfused RoPE
(``rope_utils._apply_rotary_pos_emb_bshd``) issues 4 concatenations per layer forward (its
rotate-half and an empty pass-through part), and in backward 3 more concatenations plus 2
zero-filled slice gradients (benchmarks/copy_sources.py lists them). The math is the same:
``x cos + rotate_half(x) sin`` per half, written with ``addcmul_`` into one output.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from megatron.core import parallel_state, tensor_parallel
from megatron.core.transformer.attention import SelfAttention
from megatron.core.transformer.enums import AttnMaskType
from megatron.core.transformer.identity_op import IdentityOp
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig
from megatron.core.utils import divide
from torch.nn.attention import SDPBackend, sdpa_kernel

from runconfig.schema import ATTENTION_BACKENDS

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
assert set(BACKENDS) | {"auto"} == set(ATTENTION_BACKENDS)  # the schema's choices, each with a kernel


class SDPAttention(MegatronModule):
    """Causal self-attention core with megatron's constructor and forward signatures."""

    def __init__(
        self,
        config: TransformerConfig,
        layer_number: int,
        attn_mask_type: AttnMaskType,
        attention_type: str = "self",
        attention_dropout: Optional[float] = None,
        softmax_scale: Optional[float] = None,
        cp_comm_type: Optional[str] = None,
        pg_collection: object = None,
        backend: str = "auto",
    ) -> None:
        super().__init__(config=config)
        if backend != "auto" and backend not in BACKENDS:
            raise ValueError(f"SDPAttention: unknown backend {backend!r}; one of auto, {', '.join(BACKENDS)}")
        self.backend = BACKENDS.get(backend)
        if config.context_parallel_size != 1:
            raise ValueError("SDPAttention does not support context parallelism")
        if attn_mask_type != AttnMaskType.causal:
            raise ValueError(f"SDPAttention supports causal masks only, got {attn_mask_type}")
        tp = (
            pg_collection.tp.size()
            if pg_collection is not None and hasattr(pg_collection, "tp")
            else (parallel_state.get_tensor_model_parallel_world_size())
        )
        self.heads_per_partition = divide(config.num_attention_heads, tp)
        self.groups_per_partition = divide(config.num_query_groups, tp)
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(config.kv_channels)
        self.dropout_p = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: Optional[torch.Tensor],
        attn_mask_type: Optional[AttnMaskType] = None,
        attention_bias: Optional[torch.Tensor] = None,
        packed_seq_params: object = None,
    ) -> torch.Tensor:
        if attention_bias is not None or packed_seq_params is not None:
            raise ValueError("SDPAttention supports neither attention_bias nor packed sequences")
        sq, b, heads, head_dim = query.shape
        # [s, b, h, d] -> [b, h, s, d]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))
        if self.groups_per_partition != self.heads_per_partition:
            repeat = self.heads_per_partition // self.groups_per_partition
            k = k.repeat_interleave(repeat, dim=1)
            v = v.repeat_interleave(repeat, dim=1)
        dropout_p = self.dropout_p if self.training else 0.0
        if dropout_p > 0 and q.is_cuda:
            with tensor_parallel.get_cuda_rng_tracker().fork():
                out = self._sdpa(q, k, v, dropout_p)
        else:
            out = self._sdpa(q, k, v, dropout_p)
        return out.permute(2, 0, 1, 3).reshape(sq, b, heads * head_dim)

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
        if self.backend is None:
            return self._call(q, k, v, dropout_p)
        with sdpa_kernel(self.backend):
            return self._call(q, k, v, dropout_p)

    def _call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=self.softmax_scale
        )


def _rotate_into(out: torch.Tensor, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> None:
    """``out = x cos + sign * rotate_half(x) sin`` (megatron's non-interleaved layout: the pairs are
    ``(x_i, x_{i+d/2})``); ``sign=-1`` is the transpose, the gradient's rotation. Three kernels,
    no temporaries; ``x`` and ``out`` may be strided views."""
    h = x.shape[-1] // 2
    torch.mul(x, cos, out=out)
    out[..., :h].addcmul_(x[..., h:], sin[..., :h], value=-sign)
    out[..., h:].addcmul_(x[..., :h], sin[..., h:], value=sign)


class RotaryQKV(torch.autograd.Function):
    """Fused QKV projection ``[s, b, groups, (per_group + 2) * d]`` -> rotated q ``[s, b, heads, d]``,
    rotated k and v ``[s, b, groups, d]`` (v a view of the projection, as megatron's split gives).

    The backward writes the projection's gradient in place, the rotated parts through the
    transposed rotation and v's part by one copy: what megatron's split, RoPE and the
    concatenation that joins the split's gradients do, without the intermediate tensors.
    """

    @staticmethod
    def forward(ctx, mixed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, per_group: int):
        s, b, groups, width = mixed.shape
        d = width // (per_group + 2)
        x = mixed.view(s, b, groups, per_group + 2, d)
        q = torch.empty(s, b, groups, per_group, d, dtype=mixed.dtype, device=mixed.device)
        k = torch.empty(s, b, groups, d, dtype=mixed.dtype, device=mixed.device)
        _rotate_into(q, x[:, :, :, :per_group], cos.unsqueeze(-2), sin.unsqueeze(-2), 1.0)
        _rotate_into(k, x[:, :, :, per_group], cos, sin, 1.0)
        ctx.save_for_backward(cos, sin)
        ctx.per_group = per_group
        ctx.shape = mixed.shape
        return q.view(s, b, groups * per_group, d), k, x[:, :, :, per_group + 1]

    @staticmethod
    def backward(ctx, dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor):
        cos, sin = ctx.saved_tensors
        s, b, groups, width = ctx.shape
        m = ctx.per_group
        d = width // (m + 2)
        grad = torch.empty(ctx.shape, dtype=dq.dtype, device=dq.device)
        g = grad.view(s, b, groups, m + 2, d)
        _rotate_into(g[:, :, :, :m], dq.view(s, b, groups, m, d), cos.unsqueeze(-2), sin.unsqueeze(-2), -1.0)
        _rotate_into(g[:, :, :, m], dk, cos, sin, -1.0)
        g[:, :, :, m + 1].copy_(dv)
        return grad, None, None, None


def rotary_qkv_ops(mixed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, per_group: int):
    """:class:`RotaryQKV`'s function in plain tensor ops: megatron's split and rotate-half. What
    ``torch.compile`` traces (inductor fuses the split, rotation and gradient concatenation)."""
    s, b, groups, width = mixed.shape
    d = width // (per_group + 2)
    q, k, v = mixed.split([per_group * d, d, d], dim=3)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    return rotate(q.reshape(s, b, groups * per_group, d)), rotate(k), v


# The last RoPE table's cosines and sines: megatron's RotaryEmbedding.forward is lru-cached,
# so every layer (and every step) at one sequence length gets the same frequency tensor.
_COS_SIN: list = [None]


def _cos_sin(freqs: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    cached = _COS_SIN[0]
    if cached is None or cached[0] is not freqs or cached[1] != dtype or cached[4] != freqs._version:
        # megatron: (torch.cos(freqs) * mscale).to(t.dtype) with mscale 1.0 here
        cached = (freqs, dtype, torch.cos(freqs).to(dtype), torch.sin(freqs).to(dtype), freqs._version)
        _COS_SIN[0] = cached
    return cached[2], cached[3]


class RopeSelfAttention(SelfAttention):
    """megatron's ``SelfAttention`` whose q/k/v split applies RoPE with :class:`RotaryQKV`.

    Taken when the layer would run megatron's unfused bshd RoPE on a self-attention training or
    evaluation forward (no inference context, packed sequences, interleaved or partial rotary,
    YaRN scaling, q/k layer norms, output gate, or query groups split across tensor-parallel
    ranks); anything else runs megatron's own code unchanged.
    """

    _freqs: Optional[torch.Tensor] = None

    def _takes(self, rotary_pos_emb, inference_context, packed_seq_params, extra) -> bool:
        c = self.config
        return (
            isinstance(rotary_pos_emb, torch.Tensor)
            and inference_context is None
            and packed_seq_params is None
            and not any(v is not None for v in extra)
            and not c.apply_rope_fusion
            and not c.rotary_interleaved
            and not c.multi_latent_attention
            and not c.attention_output_gate
            and not c.test_mode
            and not getattr(c, "fused_single_qkv_rope", False)
            and not hasattr(c, "yarn_rotary_scaling_factor")
            and not (c.no_rope_freq and c.no_rope_freq[self.layer_number - 1])
            and isinstance(self.q_layernorm, (type(None), IdentityOp))
            and isinstance(self.k_layernorm, (type(None), IdentityOp))
            and c.num_query_groups >= self.world_size
            and rotary_pos_emb.shape[-1] == self.hidden_size_per_attention_head
        )

    def forward(
        self,
        hidden_states,
        attention_mask,
        key_value_states=None,
        inference_context=None,
        rotary_pos_emb=None,
        rotary_pos_cos=None,
        rotary_pos_sin=None,
        rotary_pos_cos_sin=None,
        attention_bias=None,
        packed_seq_params=None,
        sequence_len_offset=None,
        *,
        inference_params=None,
    ):
        extra = (key_value_states, rotary_pos_cos, rotary_pos_sin, rotary_pos_cos_sin, inference_params)
        take = self._takes(rotary_pos_emb, inference_context, packed_seq_params, extra)
        self._freqs = rotary_pos_emb if take else None
        try:
            return super().forward(
                hidden_states,
                attention_mask,
                key_value_states=key_value_states,
                inference_context=inference_context,
                rotary_pos_emb=None if take else rotary_pos_emb,
                rotary_pos_cos=rotary_pos_cos,
                rotary_pos_sin=rotary_pos_sin,
                rotary_pos_cos_sin=rotary_pos_cos_sin,
                attention_bias=attention_bias,
                packed_seq_params=packed_seq_params,
                sequence_len_offset=sequence_len_offset,
                inference_params=inference_params,
            )
        finally:
            self._freqs = None

    def get_query_key_value_tensors(self, hidden_states, key_value_states=None, output_gate=False, split_qkv=True):
        if self._freqs is None or output_gate or not split_qkv:
            return super().get_query_key_value_tensors(hidden_states, key_value_states, output_gate, split_qkv)
        mixed, _ = self.linear_qkv(hidden_states)
        groups = self.num_query_groups_per_partition
        per_group = self.num_attention_heads_per_partition // groups
        mixed = mixed.view(*mixed.shape[:2], groups, -1)
        cos, sin = _cos_sin(self._freqs, mixed.dtype)
        if torch.compiler.is_compiling():  # dynamo cannot trace RotaryQKV's strided out= writes
            return rotary_qkv_ops(mixed, cos, sin, per_group)
        return RotaryQKV.apply(mixed, cos, sin, per_group)

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
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from megatron.core import parallel_state, tensor_parallel
from megatron.core.transformer.enums import AttnMaskType
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

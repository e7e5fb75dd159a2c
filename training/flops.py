"""Model FLOPs per training step and MFU against the dense bf16 peak of the GPU.

Counts matmul FLOPs (2 per multiply-add) of the forward pass and multiplies by 3 for
forward + backward. No activation recompute (model FLOPs, not hardware FLOPs).

The attention score and context products are counted over the full s x s matrix, not its
causal half: PaLM's MFU definition (Chowdhery et al. 2022, appendix B: 6N + 12·L·H·Q·T per
token), Megatron-LM's ``num_floating_point_operations`` up to core 0.11, and what
``torch.utils.flop_counter`` counts for SDPA's math kernel (benchmarks/gpu_vs_plain.py checks
the formula against it, for the toolkit's model and the plain reference alike). Megatron-LM
0.12 onwards, the 0.16.1 this toolkit pins included, counts the causal half (``causal=True``
here): its logged TFLOP/s for the same step is lower by ``3·2·s·q·L`` per token (7% for a
Llama-2-7B shape at sequence 4096). MFU and TFLOP/s logged by the trainer and the benchmarks
all use the full count, so the toolkit/plain ratio and issue 26's MFU goals compare like with like.
"""

from __future__ import annotations

from typing import Optional

from runconfig.schema import RunConfig

# Dense bf16 tensor-core peaks in FLOP/s (never the 2:4-sparse figures).
PEAK_BF16_FLOPS = (
    ("H200", 989.4e12),
    ("H100", 989.4e12),  # SXM; the PCIe card is 756e12 and reports "H100 PCIe"
    ("A100", 312e12),
    ("L40S", 362e12),
)
PCIE_H100 = 756e12


def forward_flops_per_token(cfg: RunConfig, vocab_size: int, causal: bool = False) -> float:
    """Forward matmul FLOPs per token, logits included; ``causal``: attention's score and
    context products over the causal half of the matrix (Megatron-LM 0.12+'s count)."""
    m = cfg.model
    h, d, s = m.hidden_size, m.head_dim, m.seq_length
    q = m.num_attention_heads * d
    kv = (m.num_query_groups or m.num_attention_heads) * d
    core = 2 * 2 * s * q // (2 if causal else 1)  # scores q.k and context p.v
    attention = 2 * h * (q + 2 * kv) + core + 2 * q * h
    if m.block == "linear1":
        mlp = 2 * h * h
    else:
        ffn = m.ffn_hidden_size or 4 * h
        mlp = 2 * h * ffn * (2 if m.activation == "swiglu" else 1) + 2 * ffn * h
    return m.num_layers * (attention + mlp) + 2 * h * vocab_size


def train_flops_per_step(cfg: RunConfig, vocab_size: int) -> float:
    tokens = cfg.training.global_batch_size * cfg.model.seq_length
    return 3 * forward_flops_per_token(cfg, vocab_size) * tokens


def peak_flops(device_name: str) -> Optional[float]:
    """Dense bf16 peak of a CUDA device name, or None when unknown."""
    if "H100" in device_name and "PCIe" in device_name:
        return PCIE_H100
    for key, peak in PEAK_BF16_FLOPS:
        if key in device_name:
            return peak
    return None

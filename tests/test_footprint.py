"""Sizes of large configs before they run, against hand counts: parameters per GPU
(training.footprint), model-state bytes, model FLOPs (training.flops), and what
``python -m training.show`` prints for them. Model-free, but for one meta-device build."""

from __future__ import annotations

from tests.conftest import tiny_config

# Llama-2-7B's shape: 32 layers, width 4096, 32 heads of 128, SwiGLU 11008, vocabulary 32000, RoPE,
# RMSNorm, no biases, untied output (6,738,415,616 parameters, the published 6.74B).
LLAMA_7B = (
    "model.num_layers=32",
    "model.hidden_size=4096",
    "model.num_attention_heads=32",
    "model.ffn_hidden_size=11008",
    "model.seq_length=4096",
    "model.vocab_size=32000",
    "model.position_embedding_type=rope",
    "model.normalization=RMSNorm",
    "model.activation=swiglu",
    "model.add_bias_linear=false",
    "parametrization.base_num_layers=8",
    "parametrization.base_hidden_size=4096",
)


def test_flops_of_llama_7b_full_and_causal():
    from training.flops import forward_flops_per_token, train_flops_per_step

    cfg = tiny_config(*LLAMA_7B, "training.global_batch_size=1024", "training.micro_batch_size=1")
    # per layer: QKV 2*4096*12288 = 100,663,296; scores and context 2*2*4096*4096 = 67,108,864;
    # projection 2*4096^2 = 33,554,432; SwiGLU fc1 2*4096*22016 = 180,355,072, fc2 90,177,536:
    # 471,859,200; x 32 = 15,099,494,400; logits 2*4096*32000 = 262,144,000
    assert forward_flops_per_token(cfg, 32000) == 15_361_638_400
    # the 6N + attention rule: 6 * 6,476,005,376 matrix parameters in the layers + 6*4096*32000
    # (logits) + 12 * 32 layers * 4096 positions * 4096 = 46,084,915,200 per token
    assert 3 * forward_flops_per_token(cfg, 32000) == 6 * 6_476_005_376 + 6 * 4096 * 32000 + 12 * 32 * 4096 * 4096
    # Megatron-LM 0.16.1's num_floating_point_operations (causal half): 32 x 2*4096*4096 fewer
    assert forward_flops_per_token(cfg, 32000, causal=True) == 15_361_638_400 - 32 * 33_554_432
    assert train_flops_per_step(cfg, 32000) == 46_084_915_200 * 1024 * 4096


def test_flops_of_gqa_count_the_smaller_key_and_value_projections():
    from training.flops import forward_flops_per_token

    cfg = tiny_config(*LLAMA_7B, "model.num_query_groups=8")
    # QKV 2*4096*(4096 + 2*1024) = 50,331,648 (was 100,663,296): per layer 421,527,552
    assert forward_flops_per_token(cfg, 32000) == 32 * 421_527_552 + 262_144_000 == 13_751_025_664
    assert forward_flops_per_token(cfg, 32000, causal=True) == 13_751_025_664 - 32 * 33_554_432

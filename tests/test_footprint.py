"""Sizes of large configs before they run, against hand counts: parameters per GPU
(training.footprint), model-state bytes, model FLOPs (training.flops), and what
``python -m training.show`` prints for them. Model-free, but for one meta-device build."""

from __future__ import annotations

import pytest

from tests.conftest import REPO, TINY, tiny_config

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


def llama_rows(layers, h, heads, groups, ffn, vocab):
    """(name, shape, split over TP) rows: every matrix split, the norms whole."""
    d = h // heads
    rows = [("embedding.word_embeddings.weight", [vocab, h], True)]
    for i in range(layers):
        p = f"decoder.layers.{i}."
        rows += [
            (p + "input_layernorm.weight", [h], False),
            (p + "self_attention.linear_qkv.weight", [(heads + 2 * groups) * d, h], True),
            (p + "self_attention.linear_proj.weight", [h, heads * d], True),
            (p + "pre_mlp_layernorm.weight", [h], False),
            (p + "mlp.linear_fc1.weight", [2 * ffn, h], True),
            (p + "mlp.linear_fc2.weight", [h, ffn], True),
        ]
    return rows + [("decoder.final_layernorm.weight", [h], False), ("output_layer.weight", [vocab, h], True)]


def test_llama_70b_at_tp8_pp4_per_gpu():
    from training.footprint import count_parameters

    # Llama-2-70B: 80 layers, width 8192, 64 heads, 8 query groups, SwiGLU 28672; vocabulary
    # 32000 padded to 32768 at TP=8. Per layer: QKV 8192*10240 = 83,886,080, projection
    # 67,108,864, fc1 469,762,048, fc2 234,881,024 (855,638,016 / 8 = 106,954,752 per rank) and
    # two norms of 8192 (whole): 106,971,136 per rank; 20 layers per stage: 2,139,422,720.
    counts = count_parameters(llama_rows(80, 8192, 64, 8, 28672, 32768), 80, tp=8, pp=4, tied=False)
    assert counts.total == 80 * 855_654_400 + 8192 + 2 * 32768 * 8192 == 68_989_231_104
    assert counts.total - 2 * 768 * 8192 == 68_976_648_192  # unpadded: the published 68.98B
    assert counts.embedding == counts.output == 268_435_456
    assert counts.per_stage == (
        2_139_422_720 + 33_554_432,  # + the word embedding's TP shard
        2_139_422_720,
        2_139_422_720,
        2_139_422_720 + 33_554_432 + 8192,  # + output layer shard and final norm
    )
    assert counts.per_gpu == 2_172_985_344


# What megatron-core 0.16.1 splits over tensor-parallel ranks in a GPT with biases and learned
# positions: column-parallel matrices and their biases, row-parallel matrices (not their
# biases), the word embedding and the output layer.
SPLIT_BY_MEGATRON = {
    "embedding.word_embeddings.weight",
    "self_attention.linear_qkv.weight",
    "self_attention.linear_qkv.bias",
    "self_attention.linear_proj.weight",
    "mlp.linear_fc1.weight",
    "mlp.linear_fc1.bias",
    "mlp.linear_fc2.weight",
    "output_layer.weight",
}


def _split(name):
    return name.split(".", 3)[-1] in SPLIT_BY_MEGATRON or name in SPLIT_BY_MEGATRON


@pytest.mark.parametrize("untied", [False, True])
def test_split_parameters_reads_megatrons_marks_on_the_model(megatron, untied):
    """The one owner of "which parameters TP splits" is megatron's ``tensor_model_parallel``
    attribute on the meta-built model (training.show's build), not a name pattern here."""
    from training.footprint import meta_model, split_parameters

    cfg = tiny_config(
        "model.add_bias_linear=true",
        "model.position_embedding_type=learned_absolute",
        f"model.untie_embeddings_and_output_weights={str(untied).lower()}",
    )
    _, model = meta_model(cfg)
    rows = split_parameters(model)
    assert {n for n, _, s in rows if s} == {n for n, _, _ in rows if _split(n)}
    assert "embedding.position_embeddings.weight" in {n for n, _, s in rows if not s}
    assert ("output_layer.weight" in {n for n, _, _ in rows}) == untied


def test_split_parameters_of_linear1_split_its_one_matrix(megatron):
    from training.footprint import meta_model, split_parameters

    _, model = meta_model(tiny_config("model.block=linear1"))
    split = {n for n, _, s in split_parameters(model) if s}
    assert "decoder.layers.0.mlp.linear_fc.weight" in split
    assert not any("norm" in n for n in split)


def test_tp_splits_what_megatron_splits_and_tied_pipelines_keep_two_embeddings():
    from training.footprint import count_parameters

    h, layer = 8, "decoder.layers.{}."
    rows = [("embedding.word_embeddings.weight", [32, h]), ("embedding.position_embeddings.weight", [16, h])]
    for i in range(2):
        p = layer.format(i)
        rows += [(p + n, s) for n, s in [
            ("input_layernorm.weight", [h]), ("input_layernorm.bias", [h]),
            ("self_attention.linear_qkv.weight", [24, h]), ("self_attention.linear_qkv.bias", [24]),
            ("self_attention.linear_proj.weight", [h, h]), ("self_attention.linear_proj.bias", [h]),
            ("pre_mlp_layernorm.weight", [h]), ("pre_mlp_layernorm.bias", [h]),
            ("mlp.linear_fc1.weight", [16, h]), ("mlp.linear_fc1.bias", [16]),
            ("mlp.linear_fc2.weight", [h, 16]), ("mlp.linear_fc2.bias", [h]),
        ]]  # fmt: skip
    rows += [("decoder.final_layernorm.weight", [h]), ("decoder.final_layernorm.bias", [h])]
    rows = [(n, s, _split(n)) for n, s in rows]
    counts = count_parameters(rows, 2, tp=2, pp=2, tied=True)
    # per layer on one of 2 TP ranks: norms 16 + QKV 96 + its bias 12 + projection 32 + its bias
    # (whole) 8 + norms 16 + fc1 64 + its bias 8 + fc2 64 + its bias (whole) 8 = 324 (600 in all)
    assert counts.total == 256 + 128 + 2 * 600 + 16 == 1600
    assert (counts.embedding, counts.output, counts.blocks) == (384, 0, 1216)
    # stage 0: word embedding shard 128 + learned positions (whole) 128 + layer 0; stage 1: layer 1 +
    # final norm 16 + its copy of the tied word embedding's shard 128
    assert counts.per_stage == (128 + 128 + 324, 324 + 16 + 128)
    assert count_parameters(rows, 2, tp=2, pp=1, tied=True).per_stage == (128 + 128 + 2 * 324 + 16,)


NO_DIST = ("parallel.use_distributed_optimizer=false",)


@pytest.mark.parametrize(
    "overrides,dp,expected",
    [
        ((), 4, (2, 4, 12, 4, 9.0)),  # bf16 + distributed optimizer: 6 + 12/d (Megatron-LM's table)
        (NO_DIST, 4, (2, 4, 12, 1, 18.0)),
        (("training.precision=fp32",), 4, (4, 4, 8, 4, 10.0)),  # 8 + 8/d
        (("optimizer.name=sgd", *NO_DIST), 4, (2, 4, 8, 1, 14.0)),
        (("optimizer.name=sgd", "optimizer.sgd_momentum=0", *NO_DIST, "training.precision=fp32"), 4, (4, 4, 0, 1, 8.0)),
        (("parallel.device=cpu", "training.precision=fp32"), 4, (4, 4, 8, 1, 16.0)),  # CPU path: torch AdamW
    ],
)
def test_model_state_bytes_per_parameter(overrides, dp, expected):
    from training.footprint import state_bytes

    cfg = tiny_config("parallel.device=cuda", "training.precision=bf16", *overrides)
    b = state_bytes(cfg, dp)
    assert (b.weights, b.grads, b.optimizer, b.dp, b.per_parameter) == expected


def test_show_prints_sizes_of_a_tp_pp_config(megatron, capsys):
    from training.show import main

    shape = [o for o in LLAMA_7B if not o.startswith("model.num_layers")]
    overrides = [*shape, "model.num_layers=4", "model.num_query_groups=8", "parallel.tensor_model_parallel_size=2",
                 "parallel.pipeline_model_parallel_size=2", "training.global_batch_size=8",
                 "training.micro_batch_size=4", "parallel.device=cuda", "training.precision=bf16"]  # fmt: skip
    assert main(["--config", str(TINY), "--gpus", "8", *overrides]) == 0
    out = capsys.readouterr().out
    # per layer: QKV 4096*6144 = 25,165,824, projection 16,777,216, fc1 90,177,536, fc2
    # 45,088,768 (177,209,344; 88,604,672 per TP rank) + 2 norms 8192: 177,217,536
    assert "parameters: 971,018,240 = embedding 131,072,000 + output layer 131,072,000 " in out
    assert "+ layers and final norm 708,874,240 (vocabulary padded to 32,000)" in out
    # largest stage (the last): 2 x 88,612,864 + final norm 4096 + output shard 65,536,000
    assert "per GPU at TP=2 PP=2 (largest pipeline stage): 242,765,824 parameters; 8 GPU(s), DP=2\n" in out
    # 6 + 12/2 = 12 bytes: 2,913,189,888 B = 2.713 GiB
    assert "weights 2 + grads 4 + optimizer 12 (sharded over DP=2) = 12 bytes/parameter = 2.71 GiB" in out
    # 3 x (4 x 421,527,552 + 262,144,000) = 5,844,762,624; causal: 4 x 3 x 33,554,432 less;
    # x 8 sequences x 4096 tokens
    assert "forward + backward: 5.845 GFLOP (full attention matrix" in out
    assert "counts the causal half: 5.442 GFLOP); per step (32,768 tokens): 1.915e+14 FLOP" in out


@pytest.mark.parametrize(
    "gpus,needle",
    [("0", "--gpus 0: must be at least 1"), ("6", "--gpus 6: parallel: world size 6 is not divisible by tensor (2)")],
)
def test_show_refuses_a_gpu_count_the_layout_cannot_use(megatron, capsys, gpus, needle):
    from training.show import main

    code = main(["--config", str(TINY), "--gpus", gpus, "parallel.tensor_model_parallel_size=2",
                 "parallel.pipeline_model_parallel_size=2"])  # fmt: skip
    assert code == 2 and needle in capsys.readouterr().err


def test_activations_of_the_350m_config_by_hand():
    """configs/gpt_350m_gpu.yaml (24 x 1024, 16 heads of 64, sequence 2048, micro-batch 8, bf16,
    RoPE, gelu, LayerNorm, no biases, cuDNN attention on the GPU path), counted by hand."""
    from training.footprint import ActivationShape

    cfg = tiny_config("model.vocab_size=50304", path=REPO / "configs" / "gpt_350m_gpu.yaml")
    shape = ActivationShape.of(cfg, 50304)
    n, sbh = 2048 * 8, 2048 * 8 * 1024 * 2  # tokens; one s*b*h bf16 tensor
    # per layer, in s*b*h: 2 norm inputs + 2 norm outputs (QKV's, fc1's inputs) + the QKV
    # projection (3, v is a view of it) + rotated q and k (2) + the kernel's output, which is
    # also the output projection's input (1) + gelu's input and output (4 + 4) = 18; the norms'
    # fp32 mean and rstd 4 x n x 4; cuDNN's fp32 logsumexp 8 x 16 heads x 2048 x 4
    layer = 18 * sbh + 4 * n * 4 + 8 * 16 * 2048 * 4
    assert shape.layer() == layer == 605_290_496  # 577.25 MiB
    # + token ids 8n; final norm and output-layer input 2 sbh + 2n x 4; fp32 softmax n V 4;
    # target mask and ids 9n; the toolkit's RoPE cos and sin, once: 2 x 2048 x 64 x 2
    saved = 24 * layer + 8 * n + 2 * sbh + 8 * n + n * 50304 * 4 + 9 * n + 2 * 2048 * 64 * 2
    assert shape.stage(0, 16) == (1, saved, n * 50304 * 2)  # peak: + the bf16 logits
    assert saved == 17_891_737_600  # 16.66 GiB; peak 18.20 GiB


def test_pipeline_stages_hold_their_in_flight_micro_batches():
    """1F1B: stage k of P holds min(P - k, M) micro-batches; every stage but the last keeps its
    output per micro-batch; the first holds the token ids, the last the loss."""
    from training.footprint import ActivationShape

    base = ("model.num_layers=8", "model.position_embedding_type=rope", "parallel.device=cuda",
            "training.precision=bf16", "parallel.tensor_model_parallel_size=2",
            "parallel.sequence_parallel=true", "parallel.pipeline_model_parallel_size=4")  # fmt: skip
    shape = ActivationShape.of(tiny_config(*base), 512)
    layer, hidden = shape.layer(), shape.hidden
    assert hidden == 64 * 4 * 64 * 2 // 2  # s b h e, sequence split over TP=2
    head = shape.head()
    tables = 2 * 64 * 16 * 2
    got = [shape.stage(k, 2) for k in range(4)]  # M = 2 micro-batches per step
    assert [g[0] for g in got] == [2, 2, 2, 1]
    assert got[0][1] == 2 * (2 * layer + shape.embedding() + hidden) + tables
    assert got[1][1] == got[2][1] == 2 * (2 * layer + hidden) + tables
    assert got[3][1] == 2 * layer + head + tables
    assert got[3][2] == 64 * 4 * 256 * 2  # the bf16 logits of the vocabulary's TP half


@pytest.mark.parametrize(
    "recompute,kept",
    [
        (("model.recompute=full",), "chunk inputs"),
        (("model.recompute=full", "model.recompute_num_layers=2"), "chunk inputs"),
        (("model.recompute=selective", "model.recompute_modules=[core_attn,mlp]"), "layer"),
    ],
)
def test_recompute_trades_saved_bytes_for_a_recomputed_transient(recompute, kept):
    from training.footprint import ActivationShape

    cfg = tiny_config("parallel.device=cuda", "training.precision=bf16", *recompute)  # 4 layers
    shape, plain = ActivationShape.of(cfg, 512), ActivationShape.of(tiny_config("parallel.device=cuda"), 512)
    _, saved, transient = shape.stage(0, 1)
    _, plain_saved, _ = plain.stage(0, 1)
    outside = plain_saved - 4 * plain.layer()
    if kept == "chunk inputs":  # one s*b*h per chunk; in backward one chunk is recomputed
        chunk = cfg.model.recompute_num_layers
        assert saved == outside + 4 // chunk * shape.hidden
        assert transient == max(64 * 4 * 512 * 2, chunk * plain.layer() - plain.head())
    else:  # the MLP's activations go; the core attention keeps its inputs and output, so with a
        # fused kernel only its fp32 logsumexp (b heads s x 4) goes
        assert saved == outside + 4 * shape.layer(shape.modules)
        assert shape.layer(shape.modules) == plain.layer() - plain.mlp_bytes(False) - 4 * 4 * 64 * 4
        recomputed = plain.layer() - shape.layer(shape.modules)  # one layer's, in backward
        assert transient == max(64 * 4 * 512 * 2, recomputed - plain.head())

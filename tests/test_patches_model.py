"""The patched GPTModel: base-shape invariance, a hand-computed forward, init, refusals."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import tiny_config

VOCAB = 128


def build(cfg, patched=True, seed=1234):
    from training.model import build_model

    torch.manual_seed(seed)
    return build_model(cfg, VOCAB, patched=patched)


def batch(seq, b=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (b, seq + 1), generator=g)
    positions = torch.arange(seq).unsqueeze(0).expand(b, seq)
    return tokens[:, :-1], positions, tokens[:, 1:]


BASE_SHAPE = (
    "model.num_layers=3",
    "model.hidden_size=64",
    "model.num_attention_heads=4",
    "model.seq_length=16",
    f"model.vocab_size={VOCAB}",
    "parametrization.base_num_layers=3",
    "parametrization.base_hidden_size=64",
    "parametrization.base_head_dim=16",
)

PRESET_CASES = [
    ("sp", "sp"),
    ("sp", "mup"),
    ("mup", "mup"),
    ("mup", "sp"),
    ("depth_mup", "mup"),
    ("depth_mup", "sp"),
    ("branch_only", "mup"),
    ("ode", "mup"),
    ("completep", "sp"),
    ("custom", "mup"),
]


@pytest.mark.parametrize("preset,width", PRESET_CASES)
def test_base_shape_equals_unpatched_megatron(megatron, preset, width):
    extra = ["parametrization.alpha=0.3", "parametrization.gamma=0.7"] if preset == "custom" else []
    cfg = tiny_config(*BASE_SHAPE, f"parametrization.preset={preset}", f"parametrization.width={width}", *extra)
    ref, pat = build(cfg, patched=False), build(cfg, patched=True)
    ref_params, pat_params = dict(ref.named_parameters()), dict(pat.named_parameters())
    assert ref_params.keys() == pat_params.keys()
    for name in ref_params:
        assert torch.equal(ref_params[name], pat_params[name]), f"init differs at {name}"
    tokens, positions, labels = batch(16)
    ref_logits, pat_logits = ref(tokens, positions, None), pat(tokens, positions, None)
    assert torch.allclose(ref_logits, pat_logits, rtol=0, atol=0)
    ref(tokens, positions, None, labels=labels).float().mean().backward()
    pat(tokens, positions, None, labels=labels).float().mean().backward()
    for name in ref_params:
        assert torch.allclose(ref_params[name].grad, pat_params[name].grad, rtol=0, atol=0), f"grad differs at {name}"


def _hand_attention(layer, x, scale):
    """Megatron's SelfAttention by hand: fused QKV (per-head [q, k, v] layout), causal softmax."""
    attn = layer.self_attention
    heads, d = attn.config.num_attention_heads, attn.config.kv_channels
    qkv = torch.nn.functional.linear(x, attn.linear_qkv.weight, attn.linear_qkv.bias)
    s, b, _ = qkv.shape
    q, k, v = qkv.view(s, b, heads, 3 * d).split(d, dim=-1)
    scores = torch.einsum("sbhd,tbhd->bhst", q, k) * scale
    scores = scores.masked_fill(torch.triu(torch.ones(s, s, dtype=torch.bool), 1), float("-inf"))
    ctx = torch.einsum("bhst,tbhd->sbhd", scores.softmax(-1), v).reshape(s, b, heads * d)
    return torch.nn.functional.linear(ctx, attn.linear_proj.weight, attn.linear_proj.bias)


def _hand_forward(model, tokens, positions, m, scale, out_mult, emb_mult, mlp):
    emb = model.embedding
    h = (emb.word_embeddings.weight[tokens] + emb.position_embeddings.weight[positions]).transpose(0, 1) * emb_mult
    for layer in model.decoder.layers:
        h = h + m * _hand_attention(layer, layer.input_layernorm(h), scale)
        h = h + m * mlp(layer, layer.pre_mlp_layernorm(h))
    h = model.decoder.final_layernorm(h)
    return (torch.nn.functional.linear(h, model.output_layer.weight) * out_mult).transpose(0, 1)


def _standard_mlp(layer, x):
    fc1, fc2 = layer.mlp.linear_fc1, layer.mlp.linear_fc2
    return torch.nn.functional.linear(
        torch.nn.functional.gelu(torch.nn.functional.linear(x, fc1.weight, fc1.bias)), fc2.weight, fc2.bias
    )


def _linear1_abs_mlp(layer, x):
    fc = layer.mlp.linear_fc
    y = torch.abs(torch.nn.functional.linear(x, fc.weight, fc.bias))
    return y - y.mean(-1, keepdim=True)


HAND = (
    "model.num_layers=2",
    "model.hidden_size=64",
    "model.num_attention_heads=4",
    "model.seq_length=12",
    f"model.vocab_size={VOCAB}",
    "parametrization.preset=depth_mup",
    "parametrization.base_num_layers=1",
    "parametrization.base_hidden_size=32",
    "parametrization.base_head_dim=8",
    "parametrization.output_multiplier=1.5",
    "parametrization.embedding_multiplier=2.0",
    "parametrization.block_multiplier=1.3",
)


@pytest.mark.parametrize("block,mlp", [("standard", _standard_mlp), ("linear1", _linear1_abs_mlp)])
def test_forward_equals_hand_computation(megatron, block, mlp):
    cfg = tiny_config(*HAND, f"model.block={block}", "model.linear1_phi=abs")
    model = build(cfg).eval()
    tokens, positions, _ = batch(12)
    # By hand: m = a * (L/L0)^-1/2 = 1.3 / sqrt(2); softmax scale sqrt(d0)/d = sqrt(8)/16;
    # logits * output_mult / m_d = 1.5 / 2; embeddings * 2.
    m, scale, out_mult, emb_mult = 1.3 / math.sqrt(2), math.sqrt(8) / 16, 0.75, 2.0
    with torch.no_grad():
        got = model(tokens, positions, None)
        want = _hand_forward(model, tokens, positions, m, scale, out_mult, emb_mult, mlp)
        unscaled = _hand_forward(model, tokens, positions, 1.0, 0.25, 1.0, 1.0, mlp)
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (got - want).abs().max()
    assert not torch.allclose(got, unscaled, rtol=1e-3, atol=1e-4)  # the multipliers matter here


def test_init_std_matches_table(megatron):
    from patches.roles import role_of
    from training.model import resolve

    cfg = tiny_config(
        "model.num_layers=8",
        "model.hidden_size=256",
        "model.num_attention_heads=4",
        f"model.vocab_size={VOCAB}",
        "parametrization.preset=depth_mup",
        "parametrization.base_num_layers=2",
        "parametrization.base_hidden_size=64",
    )
    model = build(cfg)
    resolved = resolve(cfg)
    by_hand = {  # sigma = 0.02, m_d = 4, L0 = 2
        "embedding": 0.02,
        "output": 0.02,
        "hidden_in": 0.02 / 2,
        "hidden_out": 0.02 / 2 / 2,
    }
    for name, p in model.named_parameters():
        role = role_of(name, p)
        if role in by_hand:
            assert resolved.roles[role].init_std == pytest.approx(by_hand[role])
            assert float(p.detach().std()) == pytest.approx(by_hand[role], rel=0.06), name
        elif name.endswith("bias"):
            assert torch.count_nonzero(p) == 0, name


def test_roles_and_refusals(megatron):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    import patches
    from patches.roles import UnsupportedParameterError, role_of
    from training.model import resolve

    assert role_of("module.module.decoder.layers.7.self_attention.linear_qkv.layer_norm_weight") == "block_vector"
    assert role_of("module.decoder.layers.0.mlp.linear_fc1.weight") == "hidden_in"
    assert role_of("output_layer.weight") == "output"
    with pytest.raises(UnsupportedParameterError, match="mixture-of-experts"):
        role_of("decoder.layers.0.mlp.router.weight")
    with pytest.raises(UnsupportedParameterError, match="no parametrization rule"):
        role_of("decoder.layers.0.self_attention.mystery.weight")
    cfg = tiny_config(f"model.vocab_size={VOCAB}")
    with pytest.raises(ValueError, match="not supported"):
        patches.patch_layer_spec(get_gpt_layer_local_spec(num_experts=4), resolve(cfg))


def test_attach_refuses_unpatched_spec(megatron):
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    import patches
    from training.attention import SDPAttention
    from training.model import resolve, transformer_config

    cfg = tiny_config(f"model.vocab_size={VOCAB}")  # depth_mup, L=4, L0=2: multiplier 1/sqrt(2)
    resolved = resolve(cfg)
    config = patches.configure_transformer_config(transformer_config(cfg), resolved)
    spec = get_gpt_layer_local_spec()
    spec.submodules.self_attention.submodules.core_attention = SDPAttention
    model = GPTModel(config, spec, VOCAB, cfg.model.seq_length)
    with pytest.raises(ValueError, match="patch_layer_spec"):
        patches.attach(model, resolved)

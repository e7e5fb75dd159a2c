"""RoPE straight from the fused QKV projection (``model.rope_impl=toolkit``) against megatron's
unfused RoPE (``model.rope_impl=megatron``, the previous path): same outputs and gradients,
and the copies it removes, counted from the ATen dispatcher (benchmarks/copy_sources.py)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tests.conftest import ROPE_SHAPE, ROPE_VOCAB, tiny_config

VOCAB = ROPE_VOCAB
SHAPE = ROPE_SHAPE


def run(cfg, seed=0):
    """Loss and every parameter's gradient of one micro-batch, weights seeded identically."""
    from training.model import build_model

    torch.manual_seed(seed)
    model = build_model(cfg, VOCAB)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, VOCAB, (3, 33), generator=g)
    positions = torch.arange(32).unsqueeze(0).expand(3, 32)
    loss = model(tokens[:, :-1], positions, None, labels=tokens[:, 1:]).float().mean()
    loss.backward()
    return model, float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize(
    "extra",
    [(), ("model.num_query_groups=2",), ("model.add_bias_linear=true", "parametrization.output_multiplier=2.0")],
    ids=["mha", "gqa", "bias-multipliers"],
)
def test_toolkit_rope_computes_megatrons_loss_and_gradients(megatron, extra):
    from training.attention import RopeSelfAttention

    old_model, old_loss, old = run(tiny_config(*SHAPE, *extra, "model.rope_impl=megatron"))
    new_model, new_loss, new = run(tiny_config(*SHAPE, *extra, "model.rope_impl=toolkit"))
    assert type(old_model.decoder.layers[0].self_attention).__name__ == "SelfAttention"
    assert isinstance(new_model.decoder.layers[0].self_attention, RopeSelfAttention)
    assert new_loss == pytest.approx(old_loss, rel=1e-6)
    assert old.keys() == new.keys()
    for name in old:  # float rounding only: the addcmul may fuse a multiply-add megatron rounds twice
        scale = old[name].abs().max()
        assert (new[name] - old[name]).abs().max() <= 1e-5 * scale, name


def test_rotary_qkv_backward_is_the_numerical_gradient():
    from training.attention import RotaryQKV

    g = torch.Generator().manual_seed(0)
    s, b, groups, per_group, d = 5, 2, 2, 2, 8
    mixed = torch.randn(s, b, groups, (per_group + 2) * d, generator=g, dtype=torch.float64, requires_grad=True)
    freqs = torch.randn(s, 1, 1, d // 2, generator=g, dtype=torch.float64)
    freqs = torch.cat((freqs, freqs), dim=-1)
    assert torch.autograd.gradcheck(lambda x: RotaryQKV.apply(x, freqs.cos(), freqs.sin(), per_group), (mixed,))


def test_rotary_qkv_forward_is_megatrons_rope():
    """q, k rotated as megatron's ``apply_rotary_pos_emb`` rotates them; v untouched."""
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    from training.attention import RotaryQKV

    g = torch.Generator().manual_seed(0)
    s, b, groups, per_group, d = 6, 2, 2, 3, 8
    mixed = torch.randn(s, b, groups, (per_group + 2) * d, generator=g)
    freqs = torch.randn(s, 1, 1, d // 2, generator=g)
    freqs = torch.cat((freqs, freqs), dim=-1)
    q, k, v = RotaryQKV.apply(mixed, freqs.cos(), freqs.sin(), per_group)
    ref_q, ref_k, ref_v = mixed.split([per_group * d, d, d], dim=3)
    ref_q = ref_q.reshape(s, b, groups * per_group, d)
    torch.testing.assert_close(q, _apply_rotary_pos_emb_bshd(ref_q, freqs), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(k, _apply_rotary_pos_emb_bshd(ref_k, freqs), rtol=1e-6, atol=1e-6)
    assert torch.equal(v, ref_v)


def layer_copies(cfg) -> Counter:
    from benchmarks.copy_sources import layer_step, record
    from training.model import build_model

    torch.manual_seed(0)
    model = build_model(cfg, VOCAB)
    step = layer_step(model, seq=32, batch=2)
    step()  # the RoPE table and the cos/sin cache are built once, not per step
    return Counter((o.op, o.phase, o.source.split(" ")[0]) for o in record(step))


def test_toolkit_rope_removes_the_copies_megatrons_rope_makes(megatron):
    """One layer's forward + backward. Megatron's RoPE: per q and k a rotate-half concatenation
    and an empty pass-through concatenation forward; backward a concatenation for the chunk and a
    zero-filled slice gradient each, and one concatenation joining the q/k/v split's gradients
    (9). The toolkit's: only the copy of v's gradient into the projection's gradient (1)."""
    rope = "megatron/core/models/common/embeddings/rope_utils.py"
    before = layer_copies(tiny_config(*SHAPE, "model.rope_impl=megatron"))
    assert before == {
        ("cat", "fwd", f"{rope}:84"): 2,
        ("cat", "fwd", f"{rope}:126"): 2,
        ("cat", "bwd", f"{rope}:83"): 2,
        ("slice_backward", "bwd", f"{rope}:113"): 2,
        ("cat", "bwd", "megatron/core/transformer/attention.py:1460"): 1,
    }
    after = layer_copies(tiny_config(*SHAPE, "model.rope_impl=toolkit"))
    assert sum(after.values()) == 1
    ((op, phase, source),) = after
    assert (op, phase) == ("copy_", "bwd") and source.startswith("training/attention.py:")


def test_learned_positions_take_megatrons_path_unchanged(megatron):
    """Without RoPE the subclass runs megatron's forward untouched: bit-identical."""
    absolute = [s for s in SHAPE if "position_embedding_type" not in s]
    _, old_loss, old = run(tiny_config(*absolute, "model.rope_impl=megatron"))
    _, new_loss, new = run(tiny_config(*absolute, "model.rope_impl=toolkit"))
    assert new_loss == old_loss
    assert all(torch.equal(old[n], new[n]) for n in old)


def test_bad_rope_impl_names_the_key():
    from runconfig import ConfigError

    with pytest.raises(ConfigError, match="model.rope_impl"):
        tiny_config("model.rope_impl=fused")

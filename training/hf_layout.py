"""A run's megatron GPT as a stock Hugging Face architecture, with every multiplier folded in.

Two layouts, chosen from the run's ``model`` section (anything else is refused, naming the
key, so an export never computes a different function):

* ``gpt2``: learned absolute positions, LayerNorm, GELU or ReLU (``GPT2LMHeadModel``);
* ``llama``: RoPE, RMSNorm, SwiGLU (``LlamaForCausalLM``; biases and GQA allowed).

The multipliers the parametrization adds (``patches.rules.ResolvedParametrization``) are
linear maps next to a weight, so each is folded into that weight exactly:

=====================  ===========================================  =========================
multiplier             megatron computes                            folded into
=====================  ===========================================  =========================
branch  ``a m_L^-α``   ``h + m (x W^T + b)`` (attention and MLP)    ``linear_proj``/``fc2`` W, b
softmax scale ``s``    ``softmax(s q k^T)``, HF uses ``1/sqrt(d)``  query rows of W, b: ``s sqrt(d)``
logit                  ``c (h W_out^T)``                            ``output_layer`` W
embedding              ``e (E[t] + P[pos])``                        word (and position) tables
=====================  ===========================================  =========================

RoPE rotates q, a linear map, so scaling q before or after it is the same. With tied
embeddings a logit or embedding multiplier other than 1 cannot be folded into one shared
table: refused.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from patches.rules import ResolvedParametrization
from runconfig.schema import RunConfig


class ExportError(ValueError):
    """The run cannot be expressed by a stock architecture; names the config key."""


@dataclass(frozen=True)
class Folds:
    """The factors folded into the weights (written to export.json)."""

    branch: float
    query: float
    logit: float
    embedding: float

    def to_json(self) -> dict[str, float]:
        return asdict(self)


LAYOUTS: dict[str, dict[str, Any]] = {
    # layout -> the model keys it requires (key -> allowed values)
    "gpt2": {
        "model.position_embedding_type": ("learned_absolute",),
        "model.normalization": ("LayerNorm",),
        "model.activation": ("gelu", "relu"),
    },
    "llama": {
        "model.position_embedding_type": ("rope",),
        "model.normalization": ("RMSNorm",),
        "model.activation": ("swiglu",),
    },
}


def _model_value(cfg: RunConfig, key: str) -> Any:
    return getattr(cfg.model, key.split(".", 1)[1])


def choose_layout(cfg: RunConfig, resolved: ResolvedParametrization) -> str:
    """``gpt2`` or ``llama`` for this run, or an :class:`ExportError` naming the config key."""
    m = cfg.model
    if m.block != "standard":
        raise ExportError(f"model.block={m.block!r}: TP-VI's one-matrix block has no Hugging Face architecture")
    if m.transformer_impl != "local":
        raise ExportError(f"model.transformer_impl={m.transformer_impl!r}: export reads the local layer spec's names")
    by_position = "gpt2" if m.position_embedding_type == "learned_absolute" else "llama"
    for key, allowed in LAYOUTS[by_position].items():
        if _model_value(cfg, key) not in allowed:
            raise ExportError(
                f"{key}={_model_value(cfg, key)!r}: with model.position_embedding_type="
                f"{m.position_embedding_type!r} the export layout is {by_position!r}, which needs {key} in "
                f"{list(allowed)}"
            )
    if by_position == "gpt2":
        if m.num_query_groups not in (None, m.num_attention_heads):
            raise ExportError(f"model.num_query_groups={m.num_query_groups}: GPT-2 has no grouped-query attention")
        if m.head_dim * m.num_attention_heads != m.hidden_size:
            raise ExportError(f"model.kv_channels={m.kv_channels}: GPT-2 needs head dim = hidden_size / heads")
    if not m.untie_embeddings_and_output_weights:
        for key, value in (
            ("parametrization.output_multiplier", resolved.output_multiplier),
            ("parametrization.embedding_multiplier", resolved.embedding_multiplier),
        ):
            if value != 1.0:
                raise ExportError(
                    f"model.untie_embeddings_and_output_weights=false with {key} giving a multiplier of {value:g}: "
                    "one shared table cannot carry it (train with untied embeddings to export)"
                )
    return by_position


def folds(cfg: RunConfig, resolved: ResolvedParametrization) -> Folds:
    return Folds(
        branch=float(resolved.branch_multiplier),
        query=float(resolved.effective_softmax_scale * math.sqrt(cfg.model.head_dim)),
        logit=float(resolved.output_multiplier),
        embedding=float(resolved.embedding_multiplier),
    )


def hf_config(layout: str, cfg: RunConfig, vocab_rows: int, eod_id: int) -> Any:
    """The transformers config; ``vocab_rows`` is megatron's padded vocabulary (logits over the
    padding rows enter the softmax in training, so the exported model keeps them). BOS is the
    end-of-document id, the token before every document the model trained on (as GPT-2's); so is
    the padding id (``pad_token_id``, as GPT-2 exports set ``pad_token = eos_token``): a padded
    position is masked out by the attention mask, so which id fills it does not matter."""
    m = cfg.model
    ffn = m.ffn_hidden_size or 4 * m.hidden_size
    tied = not m.untie_embeddings_and_output_weights
    bos = eod_id
    if layout == "gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=vocab_rows,
            n_positions=m.seq_length,
            n_embd=m.hidden_size,
            n_layer=m.num_layers,
            n_head=m.num_attention_heads,
            n_inner=ffn,
            activation_function=m.activation,  # exact erf GELU as megatron, not GPT-2's tanh "gelu_new"
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            layer_norm_epsilon=m.layernorm_epsilon,
            scale_attn_weights=True,
            tie_word_embeddings=tied,
            bos_token_id=bos,
            eos_token_id=eod_id,
            pad_token_id=eod_id,
            architectures=["GPT2LMHeadModel"],
        )
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_rows,
        hidden_size=m.hidden_size,
        intermediate_size=ffn,
        num_hidden_layers=m.num_layers,
        num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_query_groups or m.num_attention_heads,
        head_dim=m.head_dim,
        hidden_act="silu",
        max_position_embeddings=m.seq_length,
        rms_norm_eps=m.layernorm_epsilon,
        tie_word_embeddings=tied,
        attention_bias=m.add_bias_linear,
        mlp_bias=m.add_bias_linear,
        rope_theta=10000.0,  # megatron GPTModel's default rotary_base
        attention_dropout=0.0,
        bos_token_id=bos,
        eos_token_id=eod_id,
        pad_token_id=eod_id,
        architectures=["LlamaForCausalLM"],
    )


def _split_qkv(w: torch.Tensor, cfg: RunConfig) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """megatron's fused QKV rows, per query group ``[q_1..q_{np/ng}, k, v]``, as separate q, k, v."""
    m = cfg.model
    heads, groups, d = m.num_attention_heads, m.num_query_groups or m.num_attention_heads, m.head_dim
    per = heads // groups
    x = w.reshape(groups, per + 2, d, *w.shape[1:])
    q = x[:, :per].reshape(heads * d, *w.shape[1:])
    k = x[:, per].reshape(groups * d, *w.shape[1:])
    v = x[:, per + 1].reshape(groups * d, *w.shape[1:])
    return q, k, v


def _layer_tensors(state: dict[str, torch.Tensor], i: int, cfg: RunConfig, f: Folds) -> dict[str, torch.Tensor]:
    """Layer ``i``'s tensors with the folds applied, under neutral names (``o_w``, ``fc2_b``, ...):
    weights always, biases where the run has them."""
    p = f"decoder.layers.{i}."
    # neutral name -> (megatron module, fold applied to its weight and bias)
    modules = {
        "o": ("self_attention.linear_proj", f.branch),
        "fc1": ("mlp.linear_fc1", 1.0),
        "fc2": ("mlp.linear_fc2", f.branch),
        "input_layernorm": ("input_layernorm", 1.0),
        "pre_mlp_layernorm": ("pre_mlp_layernorm", 1.0),
    }
    out: dict[str, torch.Tensor] = {}
    for suffix, kind in (("_w", "weight"), ("_b", "bias")):
        qkv = state.get(f"{p}self_attention.linear_qkv.{kind}")
        if qkv is not None:
            q, k, v = _split_qkv(qkv, cfg)
            out.update({"q" + suffix: q * f.query, "k" + suffix: k, "v" + suffix: v})
        for name, (module, fold) in modules.items():
            tensor = state.get(f"{p}{module}.{kind}")
            if tensor is not None:
                out[name + suffix] = tensor * fold
    return out


def _gpt2_state(state: dict[str, torch.Tensor], cfg: RunConfig, f: Folds) -> dict[str, torch.Tensor]:
    m = cfg.model
    hidden = m.hidden_size
    zeros = torch.zeros
    sd = {
        "transformer.wte.weight": state["embedding.word_embeddings.weight"] * f.embedding,
        "transformer.wpe.weight": state["embedding.position_embeddings.weight"] * f.embedding,
        "transformer.ln_f.weight": state["decoder.final_layernorm.weight"],
        "transformer.ln_f.bias": state["decoder.final_layernorm.bias"],
    }
    for i in range(m.num_layers):
        t = _layer_tensors(state, i, cfg, f)
        h = f"transformer.h.{i}."
        ffn = t["fc1_w"].shape[0]
        qkv_b = [t.get(n, zeros(t["q_w"].shape[0])) for n in ("q_b", "k_b", "v_b")]
        sd.update(
            {
                # GPT-2's Conv1D stores weights as [in, out]: the transpose of a Linear's
                h + "ln_1.weight": t["input_layernorm_w"],
                h + "ln_1.bias": t["input_layernorm_b"],
                h + "attn.c_attn.weight": torch.cat([t["q_w"], t["k_w"], t["v_w"]], 0).t(),
                h + "attn.c_attn.bias": torch.cat(qkv_b),
                h + "attn.c_proj.weight": t["o_w"].t(),
                h + "attn.c_proj.bias": t.get("o_b", zeros(hidden)),
                h + "ln_2.weight": t["pre_mlp_layernorm_w"],
                h + "ln_2.bias": t["pre_mlp_layernorm_b"],
                h + "mlp.c_fc.weight": t["fc1_w"].t(),
                h + "mlp.c_fc.bias": t.get("fc1_b", zeros(ffn)),
                h + "mlp.c_proj.weight": t["fc2_w"].t(),
                h + "mlp.c_proj.bias": t.get("fc2_b", zeros(hidden)),
            }
        )
    if m.untie_embeddings_and_output_weights:
        sd["lm_head.weight"] = state["output_layer.weight"] * f.logit
    return sd


# The Llama module of each of _layer_tensors' neutral names (weights, and biases when the run has them).
_LLAMA_LINEARS = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "fc2": "mlp.down_proj",
}


def _llama_state(state: dict[str, torch.Tensor], cfg: RunConfig, f: Folds) -> dict[str, torch.Tensor]:
    m = cfg.model
    sd = {
        "model.embed_tokens.weight": state["embedding.word_embeddings.weight"] * f.embedding,
        "model.norm.weight": state["decoder.final_layernorm.weight"],
    }
    kinds = (("_w", "weight"), ("_b", "bias")) if m.add_bias_linear else (("_w", "weight"),)
    for i in range(m.num_layers):
        t = _layer_tensors(state, i, cfg, f)
        for suffix, _ in kinds:  # megatron's GLU: silu(first half of fc1) * second half
            t["gate" + suffix], t["up" + suffix] = t["fc1" + suffix].chunk(2, dim=0)
        h = f"model.layers.{i}."
        sd[h + "input_layernorm.weight"] = t["input_layernorm_w"]
        sd[h + "post_attention_layernorm.weight"] = t["pre_mlp_layernorm_w"]
        for short, module in _LLAMA_LINEARS.items():
            for suffix, kind in kinds:
                sd[f"{h}{module}.{kind}"] = t[short + suffix]
    if m.untie_embeddings_and_output_weights:
        sd["lm_head.weight"] = state["output_layer.weight"] * f.logit
    return sd


def hf_state_dict(layout: str, state: dict[str, torch.Tensor], cfg: RunConfig, f: Folds) -> dict[str, torch.Tensor]:
    """The full megatron state (training/full_state.py) as the layout's state dict, folds applied."""
    build = {"gpt2": _gpt2_state, "llama": _llama_state}[layout]
    return {k: v.detach().to(torch.float32).contiguous().clone() for k, v in build(state, cfg, f).items()}

"""Model provider: a run config -> a (patched) megatron-core GPTModel.

This is the toolkit's equivalent of Megatron-LM's ``model_provider`` and shows the three
patch calls a Megatron user adds to their own: ``configure_transformer_config`` before
building, ``patch_layer_spec`` on the layer spec, ``attach`` after building.
``patched=False`` builds the same model with none of them (the reference in tests and
benchmarks).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional

import torch
from megatron.core import parallel_state
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_config import TransformerConfig

import patches
from patches.rules import ResolvedParametrization
from runconfig.schema import RunConfig, resolve
from training.attention import RopeSelfAttention, SDPAttention
from training.pipeline import cuda_placements_on_cpu

ACTIVATIONS = {
    "gelu": (torch.nn.functional.gelu, False),
    "relu": (torch.nn.functional.relu, False),
    "swiglu": (torch.nn.functional.silu, True),
}


@dataclass(frozen=True)
class Placement:
    """Where the model runs; decides fusions and init placement."""

    device: str = "cpu"  # cpu | cuda
    bf16: bool = False
    initialize: bool = True  # False: skip weight init (meta-device tables, loading a checkpoint)


def transformer_config(cfg: RunConfig, placement: Placement = Placement()) -> TransformerConfig:
    """megatron TransformerConfig from the ``model`` and ``parallel`` sections (unpatched)."""
    m, par = cfg.model, cfg.parallel
    activation, gated = ACTIVATIONS[m.activation]
    on_gpu = placement.device == "cuda"
    dtype = torch.bfloat16 if placement.bf16 else torch.float32
    return TransformerConfig(
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_attention_heads=m.num_attention_heads,
        num_query_groups=m.num_query_groups,
        kv_channels=m.kv_channels,
        ffn_hidden_size=m.ffn_hidden_size,
        init_method_std=m.init_method_std,
        hidden_dropout=m.hidden_dropout,
        attention_dropout=m.attention_dropout,
        layernorm_epsilon=m.layernorm_epsilon,
        normalization=m.normalization,
        add_bias_linear=m.add_bias_linear,
        activation_func=activation,
        gated_linear_unit=gated,
        tensor_model_parallel_size=par.tensor_model_parallel_size,
        pipeline_model_parallel_size=par.pipeline_model_parallel_size,
        sequence_parallel=par.sequence_parallel and par.tensor_model_parallel_size > 1,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=placement.bf16,
        use_cpu_initialization=not on_gpu,
        perform_initialization=placement.initialize,
        # Fusions compile with torch.compile: on for GPU, off on CPU where they only cost time.
        bias_activation_fusion=on_gpu and m.activation in ("gelu", "swiglu") and m.add_bias_linear,
        bias_dropout_fusion=on_gpu,
        masked_softmax_fusion=False,
        gradient_accumulation_fusion=False,
        persist_layer_norm=False,
        attention_softmax_in_fp32=True,
        # megatron's native fused cross-entropy returns bf16 logit gradients: bf16 runs only
        cross_entropy_loss_fusion=on_gpu and placement.bf16 and m.cross_entropy_fusion,
        cross_entropy_fusion_impl="native",
        recompute_granularity=None if m.recompute == "none" else m.recompute,
        recompute_method="uniform" if m.recompute == "full" else None,
        recompute_num_layers=m.recompute_num_layers if m.recompute == "full" else None,
        recompute_modules=list(m.recompute_modules) if m.recompute == "selective" else None,
        cuda_graph_impl="local" if m.cuda_graphs and on_gpu else "none",
    )


def base_layer_spec(cfg: RunConfig) -> ModuleSpec:
    """The unpatched layer spec: local modules with SDPA attention, or Transformer Engine."""
    m = cfg.model
    if m.transformer_impl == "transformer_engine":
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

        return get_gpt_layer_with_transformer_engine_spec()
    spec = get_gpt_layer_local_spec(normalization=m.normalization)
    if m.rope_impl == "toolkit":
        spec.submodules.self_attention.module = RopeSelfAttention
    spec.submodules.self_attention.submodules.core_attention = ModuleSpec(
        module=SDPAttention, params={"backend": m.attention_backend}
    )
    return spec


def build_model(
    cfg: RunConfig,
    vocab_size: int,
    placement: Placement = Placement(),
    patched: bool = True,
    resolved: Optional[ResolvedParametrization] = None,
) -> GPTModel:
    """Build this rank's pipeline stage of the GPT model (parallel_state must be initialized)."""
    config = transformer_config(cfg, placement)
    spec = base_layer_spec(cfg)
    if patched:
        resolved = resolved or resolve(cfg)
        patches.configure_transformer_config(config, resolved)
        spec = patches.patch_layer_spec(spec, resolved, block=cfg.model.block, linear1_phi=cfg.model.linear1_phi)
    elif cfg.model.block != "standard":
        raise ValueError("model.block=linear1 exists only in the patched model")
    # A tied output weight of a pipeline model is synced with megatron's `.cuda()` + all-reduce:
    # on the CPU path the tensor stays where it is (training/pipeline.py).
    cpu_pipeline = placement.device != "cuda" and parallel_state.get_pipeline_model_parallel_world_size() > 1
    with cuda_placements_on_cpu() if cpu_pipeline else contextlib.nullcontext():
        model = GPTModel(
            config=config,
            transformer_layer_spec=spec,
            vocab_size=vocab_size,
            max_sequence_length=cfg.model.seq_length,
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=not cfg.model.untie_embeddings_and_output_weights,
            position_embedding_type=cfg.model.position_embedding_type,
            parallel_output=True,
        )
    if patched:
        patches.attach(model, resolved)
    if cfg.model.compile:
        compile_layers(model, cfg.model.compile_backend)
    if placement.device != "cuda":
        _rope_on_cpu(model)
    if placement.device == "cuda":
        model.cuda(torch.cuda.current_device())
    return model


def compile_layers(model: GPTModel, backend: str = "inductor") -> None:
    """``torch.compile`` each transformer layer in place (``nn.Module.compile``: parameter names
    and checkpoints unchanged). Dynamo splits a layer where megatron-core 0.16.1's
    ``RowParallelLinear`` calls ``warnings.warn`` (it passes no tensor-parallel group) and inside
    its activation-offloading context: the pieces between are compiled."""
    for layer in model.decoder.layers:
        layer.compile(backend=backend)


def _rope_on_cpu(model: GPTModel) -> None:
    """megatron-core 0.16.1's ``RotaryEmbedding.get_emb`` moves its frequencies to
    ``torch.cuda.current_device()`` unconditionally; on CPU the same table is computed where
    the frequencies are (its own ``get_freqs_non_repeated``, then the same layout)."""
    rope = getattr(model, "rotary_pos_emb", None)
    if rope is None:
        return

    def get_emb(max_seq_len: int, offset: int = 0) -> torch.Tensor:
        freqs = rope.get_freqs_non_repeated(max_seq_len, offset)
        if rope.rotary_interleaved:
            emb = torch.stack((freqs.view(-1, 1), freqs.view(-1, 1)), dim=-1).view(freqs.shape[0], -1)
        else:
            emb = torch.cat((freqs, freqs), dim=-1)
        return emb[:, None, None, :]

    rope.get_emb = get_emb


def padded_vocab_size(vocab_size: int, tp: int, divisible_by: int) -> int:
    """Megatron-LM's rule (``_vocab_size_with_padding``): the vocabulary padded up to a multiple
    of ``divisible_by`` (``model.make_vocab_size_divisible_by``, its
    ``--make-vocab-size-divisible-by``) x the tensor-parallel size ``tp``."""
    multiple = divisible_by * tp
    return -(-vocab_size // multiple) * multiple

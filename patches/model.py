"""Apply the parametrization to a TransformerConfig and to a built GPTModel.

Two calls around ``GPTModel(...)`` in a model provider:

* :func:`configure_transformer_config` before construction: init methods (input-side and
  branch-output hidden matrices) and the attention softmax scale.
* :func:`attach` after construction: the logit and embedding multipliers (forward hooks,
  registered only when they differ from 1), the output-layer init under width muP, and a
  check that the layer spec really carried the branch multiplier.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch
from megatron.core.transformer.transformer_config import TransformerConfig

from patches.layer_spec import branch_multipliers
from patches.rules import HIDDEN_IN, HIDDEN_OUT, OUTPUT, ResolvedParametrization

_ATTR = "depthmup_parametrization"


def normal_init(std: float) -> functools.partial:
    """Megatron's ``init_method_normal`` shape: a partial over ``torch.nn.init.normal_``."""
    return functools.partial(torch.nn.init.normal_, mean=0.0, std=std)


def _refuse_unsupported(config: TransformerConfig) -> None:
    checks = {
        "num_moe_experts": "mixture-of-experts",
        "mtp_num_layers": "multi-token prediction",
        "heterogeneous_block_specs": "heterogeneous layers",
        "apply_query_key_layer_scaling": "apply_query_key_layer_scaling (it rescales attention per layer)",
    }
    for attr, what in checks.items():
        if getattr(config, attr, None):
            raise ValueError(f"TransformerConfig.{attr}: {what} is not supported by the depth-muP patches")
    if config.apply_residual_connection_post_layernorm:
        raise ValueError("TransformerConfig.apply_residual_connection_post_layernorm: post-LN is not supported")


def configure_transformer_config(config: TransformerConfig, resolved: ResolvedParametrization) -> TransformerConfig:
    """Set init methods and softmax scale on ``config`` in place (call before GPTModel)."""
    _refuse_unsupported(config)
    shape = resolved.shape
    mismatch = {
        "num_layers": (config.num_layers, shape.num_layers),
        "hidden_size": (config.hidden_size, shape.hidden_size),
        "num_attention_heads": (config.num_attention_heads, shape.num_attention_heads),
        "kv_channels": (config.kv_channels, shape.kv_channels),
        "init_method_std": (config.init_method_std, resolved.init_method_std),
    }
    for key, (have, want) in mismatch.items():
        if have != want:
            raise ValueError(f"TransformerConfig.{key}={have} but the parametrization was resolved for {want}")
    # Megatron's output GEMM (logits) also uses config.init_method; attach() restores sigma
    # for it. Embeddings use config.embedding_init_method, which no preset changes.
    config.init_method = normal_init(resolved.roles[HIDDEN_IN].init_std)
    config.output_layer_init_method = normal_init(resolved.roles[HIDDEN_OUT].init_std)
    config.softmax_scale = resolved.softmax_scale
    setattr(config, _ATTR, resolved)
    return config


def _scale_first_arg(multiplier: float):
    def hook(_module: torch.nn.Module, args: tuple) -> tuple:
        return (args[0] * multiplier, *args[1:])

    return hook


def _scale_output(multiplier: float):
    def hook(_module: torch.nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        return output * multiplier

    return hook


def attach(model: torch.nn.Module | Iterable[torch.nn.Module], resolved: ResolvedParametrization) -> None:
    """Finish patching built GPTModel chunk(s): multipliers, output init, consistency checks."""
    chunks = [model] if isinstance(model, torch.nn.Module) else list(model)
    for chunk in chunks:
        config = chunk.config
        if getattr(config, _ATTR, None) is not resolved:
            raise ValueError("attach: call configure_transformer_config(config, resolved) before building the model")
        found = branch_multipliers(chunk)
        if found and found != {resolved.branch_multiplier}:
            raise ValueError(
                f"attach: layers apply branch multipliers {sorted(found)} but the parametrization needs "
                f"{resolved.branch_multiplier}; build the model with patch_layer_spec(spec, resolved)"
            )
        if getattr(chunk, _ATTR, None) is not None:
            raise ValueError("attach: this model is already patched")
        setattr(chunk, _ATTR, resolved)

        output_layer = getattr(chunk, "output_layer", None) if chunk.post_process else None
        if output_layer is not None:
            weight = output_layer.weight
            untied_here = weight is not None and not getattr(weight, "shared_embedding", False)
            rescale = resolved.roles[OUTPUT].init_std / resolved.roles[HIDDEN_IN].init_std
            if untied_here and config.perform_initialization and rescale != 1.0:
                # Built with config.init_method (hidden std); an N(0, s) draw times c is an
                # N(0, c*s) draw from the same random stream, so this is the exact sigma init.
                with torch.no_grad():
                    weight.mul_(rescale)
            if resolved.output_multiplier != 1.0:
                # Scaling the output layer's input equals scaling the logits (no bias) and
                # touches a hidden-sized tensor instead of a vocab-sized one.
                output_layer.register_forward_pre_hook(_scale_first_arg(resolved.output_multiplier))
        if chunk.pre_process and resolved.embedding_multiplier != 1.0:
            chunk.embedding.register_forward_hook(_scale_output(resolved.embedding_multiplier))


def resolved_of(model: torch.nn.Module) -> ResolvedParametrization | None:
    """The parametrization ``attach`` recorded on a model (unwrapping DDP-style wrappers)."""
    while model is not None:
        found = getattr(model, _ATTR, None)
        if found is not None:
            return found
        model = getattr(model, "module", None)
    return None

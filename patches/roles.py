"""Map megatron-core GPTModel parameter names to the spec's parameter roles.

The mapping is a table of name patterns. It covers the local (megatron-core) and the
Transformer-Engine layer specs, with or without DDP / Float16Module wrappers. Anything
it does not know (MoE routers and experts, MTP layers, new modules) is refused loudly:
a parameter silently given the wrong LR would invalidate a sweep.
"""

from __future__ import annotations

import re

import torch

from patches.rules import BLOCK_VECTOR, EMBEDDING, FINAL_NORM, HIDDEN_IN, HIDDEN_OUT, OUTPUT

_WRAPPER_PREFIX = re.compile(r"^(?:module\.)+")
_LAYER = r"decoder\.layers\.\d+\."

# (pattern on the unwrapped name, role). First match wins; order matters only for clarity.
ROLE_PATTERNS: tuple[tuple[re.Pattern, str], ...] = tuple(
    (re.compile(pattern), role)
    for pattern, role in (
        (r"^embedding\.(word|position)_embeddings\.weight$", EMBEDDING),
        (r"^output_layer\.weight$", OUTPUT),
        (r"^decoder\.final_layernorm\.(weight|bias)$", FINAL_NORM),
        (_LAYER + r"self_attention\.linear_qkv\.weight$", HIDDEN_IN),
        (_LAYER + r"mlp\.linear_fc1\.weight$", HIDDEN_IN),
        (_LAYER + r"self_attention\.linear_proj\.weight$", HIDDEN_OUT),
        (_LAYER + r"mlp\.linear_fc2\.weight$", HIDDEN_OUT),
        (_LAYER + r"mlp\.linear_fc\.weight$", HIDDEN_OUT),  # linear1 block's single matrix
        (_LAYER + r"(self_attention|mlp)\.linear_\w+\.bias$", BLOCK_VECTOR),
        (_LAYER + r"(input_layernorm|pre_mlp_layernorm)\.(weight|bias)$", BLOCK_VECTOR),
        (_LAYER + r"self_attention\.(q_layernorm|k_layernorm)\.(weight|bias)$", BLOCK_VECTOR),
        (_LAYER + r"(self_attention\.linear_qkv|mlp\.linear_fc1)\.layer_norm_(weight|bias)$", BLOCK_VECTOR),
    )
)

_UNSUPPORTED = (
    (re.compile(r"\.mlp\.(router|experts|shared_experts)\."), "mixture-of-experts layers"),
    (re.compile(r"^mtp\."), "multi-token-prediction layers"),
)


class UnsupportedParameterError(ValueError):
    """A parameter the parametrization has no rule for."""


def unwrap_name(name: str) -> str:
    """Drop the ``module.`` prefixes added by DDP / Float16Module wrappers."""
    return _WRAPPER_PREFIX.sub("", name)


def role_of(name: str, param: torch.Tensor | None = None) -> str:
    """The spec role of a parameter, by name. Tied output weights count as embeddings."""
    if param is not None and getattr(param, "shared_embedding", False):
        return EMBEDDING
    bare = unwrap_name(name)
    for pattern, why in _UNSUPPORTED:
        if pattern.search(bare):
            raise UnsupportedParameterError(f"{name}: {why} are not supported by the depth-muP patches")
    for pattern, role in ROLE_PATTERNS:
        if pattern.search(bare):
            return role
    raise UnsupportedParameterError(
        f"{name}: no parametrization rule for this parameter; add a pattern to patches.roles.ROLE_PATTERNS"
    )


def roles_by_name(module: torch.nn.Module) -> dict[str, str]:
    """Role of every trainable parameter of ``module`` (raises on the first unknown one)."""
    return {name: role_of(name, p) for name, p in module.named_parameters() if p.requires_grad}

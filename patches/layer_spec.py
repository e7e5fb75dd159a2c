"""Inject the parametrization into a megatron-core GPT layer spec (no subclassing).

``patch_layer_spec`` takes the spec a user would pass to ``GPTModel`` (local or
Transformer-Engine) and returns a copy whose ``self_attn_bda`` / ``mlp_bda`` apply the
residual-branch multiplier and, for ``block="linear1"``, whose MLP is the one-matrix
branch. The spec is shared by every layer and every pipeline stage, so the multiplier is
the one resolved from the model's total layer count.
"""

from __future__ import annotations

import copy

from megatron.core.transformer.mlp import MLP
from megatron.core.transformer.spec_utils import ModuleSpec
from megatron.core.transformer.transformer_layer import TransformerLayer, TransformerLayerSubmodules

from patches.branch import ScaledBiasDropoutAdd
from patches.linear1 import Linear1MLP
from patches.names import BLOCKS
from patches.rules import ResolvedParametrization


def _mlp_module(spec: ModuleSpec) -> object:
    return spec.module if isinstance(spec, ModuleSpec) else spec


def _check_supported(spec: ModuleSpec) -> TransformerLayerSubmodules:
    if not isinstance(spec, ModuleSpec) or spec.module is not TransformerLayer:
        raise ValueError(
            "patch_layer_spec: expected a ModuleSpec of megatron TransformerLayer "
            f"(e.g. get_gpt_layer_local_spec()), got {spec!r}; heterogeneous block specs are not supported"
        )
    sub = spec.submodules
    mlp = _mlp_module(sub.mlp)
    try:
        from megatron.core.extensions.transformer_engine import TEFusedMLP
    except ImportError:  # pragma: no cover - TE absent
        TEFusedMLP = None  # noqa: N806
    allowed = tuple(m for m in (MLP, TEFusedMLP, Linear1MLP) if m is not None)
    if mlp not in allowed:
        raise ValueError(
            f"patch_layer_spec: MLP module {getattr(mlp, '__name__', mlp)} is not supported "
            "(mixture-of-experts and custom MLPs have no depth-muP rule here)"
        )
    if sub.cross_attention is not None and _mlp_module(sub.cross_attention).__name__ != "IdentityOp":
        raise ValueError("patch_layer_spec: cross-attention layers are not supported")
    return sub


def patch_layer_spec(
    spec: ModuleSpec, resolved: ResolvedParametrization, block: str = "standard", linear1_phi: str = "relu"
) -> ModuleSpec:
    """A copy of ``spec`` with the branch multiplier (and optionally the linear1 MLP) injected."""
    if block not in BLOCKS:
        raise ValueError(f"model.block: must be one of {list(BLOCKS)}, got {block!r}")
    _check_supported(spec)
    patched = copy.deepcopy(spec)
    sub = patched.submodules
    bda = ModuleSpec(module=ScaledBiasDropoutAdd, params={"multiplier": resolved.branch_multiplier})
    sub.self_attn_bda = bda
    sub.mlp_bda = bda
    if block == "linear1":
        sub.mlp = ModuleSpec(module=Linear1MLP, params={"phi": linear1_phi})
    return patched


def branch_multipliers(model: object) -> set[float]:
    """The branch multipliers a built model really applies (1.0 for unpatched layers)."""
    found: set[float] = set()
    for module in model.modules():
        if isinstance(module, TransformerLayer):
            for bda in (module.self_attn_bda, module.mlp_bda):
                found.add(bda.multiplier if isinstance(bda, ScaledBiasDropoutAdd) else 1.0)
    return found

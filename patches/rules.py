"""The engine: turn a :class:`Parametrization` and a model shape into numbers.

Every number the patches apply (branch multiplier, softmax scale, logit multiplier, init
std, LR / weight-decay / epsilon factor per parameter role) is computed here and nowhere
else, from the tables below (spec: docs/parametrization.md). The module is pure Python so
the tables can be checked by hand and printed without building a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from patches.parametrization import Parametrization

# Parameter roles (see patches.roles for how Megatron parameter names map to them).
EMBEDDING = "embedding"  # word / position embeddings
OUTPUT = "output"  # untied output_layer (logits)
FINAL_NORM = "final_norm"  # decoder.final_layernorm
HIDDEN_IN = "hidden_in"  # input-side hidden matrices: linear_qkv, linear_fc1
HIDDEN_OUT = "hidden_out"  # branch-output matrices: linear_proj, linear_fc2, linear1's matrix
BLOCK_VECTOR = "block_vector"  # biases and norm weights inside transformer layers

ROLES = (EMBEDDING, OUTPUT, FINAL_NORM, HIDDEN_IN, HIDDEN_OUT, BLOCK_VECTOR)
MATRIX_ROLES = (EMBEDDING, OUTPUT, HIDDEN_IN, HIDDEN_OUT)
IN_BLOCK_ROLES = (HIDDEN_IN, HIDDEN_OUT, BLOCK_VECTOR)


@dataclass(frozen=True)
class LrRule:
    """LR factor = m_d ** width_power (width muP only) * m_L ** (depth exponent)."""

    width_power: int
    depth: str  # "none" | "-gamma" | "alpha-gamma"


# Spec tables "Learning rates". Adam/AdamW updates are scale-invariant per entry, so hidden
# matrices get 1/m_d; SGD's gradient already carries the branch multiplier, so the raw
# depth exponent there is alpha - gamma.
LR_RULES: dict[str, dict[str, LrRule]] = {
    "adam": {
        EMBEDDING: LrRule(0, "none"),
        OUTPUT: LrRule(0, "none"),
        FINAL_NORM: LrRule(0, "none"),
        HIDDEN_IN: LrRule(-1, "-gamma"),
        HIDDEN_OUT: LrRule(-1, "-gamma"),
        BLOCK_VECTOR: LrRule(0, "-gamma"),
    },
    "sgd": {
        EMBEDDING: LrRule(1, "none"),
        OUTPUT: LrRule(1, "none"),
        FINAL_NORM: LrRule(1, "none"),
        HIDDEN_IN: LrRule(0, "alpha-gamma"),
        HIDDEN_OUT: LrRule(0, "alpha-gamma"),
        BLOCK_VECTOR: LrRule(1, "alpha-gamma"),
    },
}

# Roles Megatron leaves out of weight decay (its standard rule: biases and 1-D params).
NO_WEIGHT_DECAY_ROLES = (FINAL_NORM, BLOCK_VECTOR)

OPTIMIZER_FAMILIES = {"adam": "adam", "adamw": "adam", "sgd": "sgd"}


@dataclass(frozen=True)
class ModelShape:
    """The dimensions the rules depend on. ``num_layers`` is the model's TOTAL layer count
    (all pipeline stages), which is what the depth multiplier must use."""

    num_layers: int
    hidden_size: int
    num_attention_heads: int
    head_dim: Optional[int] = None  # kv_channels; None -> hidden_size // num_attention_heads

    @property
    def kv_channels(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class RoleRule:
    """Everything the patches do to the parameters of one role."""

    role: str
    init_std: Optional[float]  # None: Megatron's default (zeros for biases, ones/zeros for norms)
    forward_multiplier: float  # multiplier on the computation the parameter belongs to
    lr_factor: float  # multiplies eta (and the min LR); the scheduler's warmup/decay applies on top
    wd_factor: float  # Megatron wd_mult
    eps: Optional[float]  # Adam epsilon of the group; None for SGD


@dataclass(frozen=True)
class ResolvedParametrization:
    """The numbers for one (parametrization, model shape, optimizer) triple."""

    parametrization: Parametrization
    shape: ModelShape
    optimizer: str  # adam | adamw | sgd
    family: str  # adam | sgd
    alpha: float
    gamma: float
    width: str  # sp | mup
    base_num_layers: int
    base_hidden_size: int
    base_head_dim: int
    width_ratio: float  # m_d = n / n0
    depth_ratio: float  # m_L = L / L0
    branch_multiplier: float  # a * m_L^-alpha
    softmax_scale: Optional[float]  # None: Megatron's default 1/sqrt(d), bit-exact
    effective_softmax_scale: float
    output_multiplier: float  # on the logits
    embedding_multiplier: float
    init_method_std: float  # sigma
    adam_eps: Optional[float]
    roles: dict[str, RoleRule] = field(repr=False)

    @property
    def preset(self) -> str:
        return self.parametrization.preset


def _depth_exponent(kind: str, alpha: float, gamma: float) -> float:
    return {"none": 0.0, "-gamma": -gamma, "alpha-gamma": alpha - gamma}[kind]


def resolve(
    parametrization: Parametrization,
    shape: ModelShape,
    optimizer: str = "adamw",
    init_method_std: float = 0.02,
    adam_eps: float = 1e-8,
) -> ResolvedParametrization:
    """Compute every multiplier and per-role factor (spec sections Forward / Init / LR)."""
    if optimizer not in OPTIMIZER_FAMILIES:
        raise ValueError(f"optimizer.name: must be one of {sorted(OPTIMIZER_FAMILIES)}, got {optimizer!r}")
    family = OPTIMIZER_FAMILIES[optimizer]
    p = parametrization
    alpha, gamma, width = p.resolved_alpha, p.resolved_gamma, p.resolved_width
    mup = width == "mup"

    L, n, d = shape.num_layers, shape.hidden_size, shape.kv_channels
    L0 = p.base_num_layers or L
    n0 = p.base_hidden_size or n
    d0 = p.base_head_dim or d
    m_L = L / L0
    m_d = n / n0

    branch = p.block_multiplier * m_L**-alpha

    # Softmax scale. Keep None (Megatron computes 1/sqrt(d) itself) whenever the rule
    # reduces to the default, so the base shape is bit-identical to unpatched Megatron.
    if mup and d != d0:
        softmax_scale: Optional[float] = p.attn_multiplier * math.sqrt(d0) / d
    elif p.attn_multiplier != 1.0:
        softmax_scale = p.attn_multiplier / math.sqrt(d)
    else:
        softmax_scale = None
    effective_softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)

    output_mult = p.output_multiplier / m_d if mup else p.output_multiplier

    sigma = init_method_std
    width_init = 1.0 / math.sqrt(m_d) if mup else 1.0
    # Branch-output matrices: depth comes from the multiplier when alpha > 0, never twice.
    out_depth = 2 * L0 if alpha > 0 else 2 * L
    init_std = {
        EMBEDDING: sigma,
        OUTPUT: sigma,
        FINAL_NORM: None,
        HIDDEN_IN: sigma * width_init,
        HIDDEN_OUT: sigma * width_init / math.sqrt(out_depth),
        BLOCK_VECTOR: None,
    }
    forward = {
        EMBEDDING: p.embedding_multiplier,
        OUTPUT: output_mult,
        FINAL_NORM: 1.0,
        HIDDEN_IN: branch,
        HIDDEN_OUT: branch,
        BLOCK_VECTOR: branch,
    }

    roles: dict[str, RoleRule] = {}
    for role in ROLES:
        rule = LR_RULES[family][role]
        lr = (m_d**rule.width_power if mup else 1.0) * m_L ** _depth_exponent(rule.depth, alpha, gamma)
        wd = 0.0 if role in NO_WEIGHT_DECAY_ROLES else 1.0
        if p.independent_weight_decay and wd:
            wd = wd / lr  # keeps (eta * lr) * (wd * wd_factor) equal to eta * wd in every group
        eps = None
        if family == "adam":
            eps = adam_eps * lr if p.scale_epsilon else adam_eps
        roles[role] = RoleRule(role, init_std[role], forward[role], lr, wd, eps)

    return ResolvedParametrization(
        parametrization=p,
        shape=shape,
        optimizer=optimizer,
        family=family,
        alpha=alpha,
        gamma=gamma,
        width=width,
        base_num_layers=L0,
        base_hidden_size=n0,
        base_head_dim=d0,
        width_ratio=m_d,
        depth_ratio=m_L,
        branch_multiplier=branch,
        softmax_scale=softmax_scale,
        effective_softmax_scale=effective_softmax_scale,
        output_multiplier=output_mult,
        embedding_multiplier=p.embedding_multiplier,
        init_method_std=sigma,
        adam_eps=adam_eps if family == "adam" else None,
        roles=roles,
    )

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

from patches.names import OPTIMIZER_FAMILIES
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
class Exponent:
    """A power of a width ratio, ``const + per_s * s``: ``s`` is Yaida's metaparameter
    (``parametrization.yaida_s``); the rules other than ``yaida`` have ``per_s = 0``."""

    const: float = 0.0
    per_s: float = 0.0

    def at(self, s: float) -> float:
        return self.const + self.per_s * s


@dataclass(frozen=True)
class WidthRule:
    """How one width rule scales each role with ``m_d = n / n0`` (spec: docs/parametrization.md).

    A role missing from a mapping has exponent 0 (SP's value at every width). ``lr`` has one
    mapping per optimizer family; a family listed in ``refused`` has no rule and is refused
    with that reason.
    """

    init: dict[str, Exponent]  # init std multiplied by m_d ** e
    output_multiplier: Exponent  # logits multiplied by m_d ** e
    softmax: Exponent  # softmax scale = attn_multiplier / sqrt(d) * (d / d0) ** e
    lr: dict[str, dict[str, Exponent]]  # LR factor m_d ** e, per family and role
    refused: dict[str, str] = field(default_factory=dict)


E = Exponent
# Spec tables "Width rules". mup: Adam/AdamW updates are scale-invariant per entry, so hidden
# matrices get 1/m_d; SGD keeps hidden matrices at eta and raises the vector-like roles by
# m_d, with the logit multiplier 1/m_d (TP-V Table 3). yaida: Yaida's equations (32)-(36) with
# n = fan-in: hidden matrices init var C_W/n and LR tensor lambda_W/n; the output matrix init
# var C_W/n^(1+s) and LR tensor lambda_W/n^(1+s); biases and vectors lambda_b; global eta =
# n^s eta_0, folded into every role's factor (so hidden matrices n^(s-1), vectors n^s,
# output n^-1). The embedding's fan-in is the vocabulary, fixed in width: init constant, LR n^s.
# The softmax exponent -s/2 is this toolkit's interpolation (the paper treats MLPs): NT's
# 1/sqrt(d) at s=0, muP's 1/d at s=1.
WIDTH_RULES: dict[str, WidthRule] = {
    "sp": WidthRule(init={}, output_multiplier=E(), softmax=E(), lr={"adam": {}, "sgd": {}}),
    "mup": WidthRule(
        init={HIDDEN_IN: E(-0.5), HIDDEN_OUT: E(-0.5)},
        output_multiplier=E(-1.0),
        softmax=E(-0.5),
        lr={
            "adam": {HIDDEN_IN: E(-1.0), HIDDEN_OUT: E(-1.0)},
            "sgd": {EMBEDDING: E(1.0), OUTPUT: E(1.0), FINAL_NORM: E(1.0), BLOCK_VECTOR: E(1.0)},
        },
    ),
    "yaida": WidthRule(
        init={HIDDEN_IN: E(-0.5), HIDDEN_OUT: E(-0.5), OUTPUT: E(-0.5, -0.5)},
        output_multiplier=E(),
        softmax=E(0.0, -0.5),
        lr={
            "sgd": {
                EMBEDDING: E(0.0, 1.0),
                OUTPUT: E(-1.0),
                FINAL_NORM: E(0.0, 1.0),
                HIDDEN_IN: E(-1.0, 1.0),
                HIDDEN_OUT: E(-1.0, 1.0),
                BLOCK_VECTOR: E(0.0, 1.0),
            }
        },
        refused={
            "adam": "Yaida's family (equations 31-36) is derived for SGD and gives no rule for Adam; "
            "set optimizer.name=sgd, or use width=mup for Adam"
        },
    ),
}

# Depth part of the LR factor, per family and role: m_L ** exponent. Adam/AdamW: -gamma on
# everything inside blocks; SGD's gradient already carries the branch multiplier, so the
# raw depth exponent there is alpha - gamma.
DEPTH_LR_RULES: dict[str, dict[str, str]] = {
    "adam": {
        EMBEDDING: "none",
        OUTPUT: "none",
        FINAL_NORM: "none",
        HIDDEN_IN: "-gamma",
        HIDDEN_OUT: "-gamma",
        BLOCK_VECTOR: "-gamma",
    },
    "sgd": {
        EMBEDDING: "none",
        OUTPUT: "none",
        FINAL_NORM: "none",
        HIDDEN_IN: "alpha-gamma",
        HIDDEN_OUT: "alpha-gamma",
        BLOCK_VECTOR: "alpha-gamma",
    },
}


def power(m: float, e: float) -> float:
    """``m ** e``, computed as ``1/sqrt(m)``, ``sqrt(m)`` or an integer power where ``e`` is one
    (bit-identical to the closed forms the rules were first written with)."""
    if e == 0.0:
        return 1.0
    if e == -0.5:
        return 1.0 / math.sqrt(m)
    if e == 0.5:
        return math.sqrt(m)
    if float(e).is_integer():
        return m ** int(e)
    return m**e


def refusal(width: str, family: str) -> Optional[str]:
    """Why ``width`` has no rule for the optimizer ``family`` (None when it has one)."""
    rule = WIDTH_RULES[width]
    if family in rule.refused:
        return f"parametrization.width={width}: {rule.refused[family]}"
    return None


def emergent_scale(num_layers: int, hidden_size: int, s: float) -> float:
    """Yaida's gamma = L / n^(1-s) (equation 46): the degree of representation learning."""
    return num_layers / hidden_size ** (1.0 - s)


def emergent_scale_record(num_layers: int, hidden_size: int, s: float) -> dict[str, float]:
    """What runs record of it: ``{"s", "gamma": L / n^(1-s), "L_over_n"}``."""
    return {"s": s, "gamma": emergent_scale(num_layers, hidden_size, s), "L_over_n": num_layers / hidden_size}


def depth_at_fixed_scale(hidden_size: int, s: float, base_hidden_size: int, base_num_layers: int) -> int:
    """The depth that keeps gamma = L / n^(1-s) at its value for the base shape (rounded)."""
    return max(1, round(base_num_layers * (hidden_size / base_hidden_size) ** (1.0 - s)))


# Roles Megatron leaves out of weight decay (its standard rule: biases and 1-D params).
NO_WEIGHT_DECAY_ROLES = (FINAL_NORM, BLOCK_VECTOR)


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
    width: str  # sp | mup | yaida
    yaida_s: Optional[float]  # Yaida's metaparameter s (width yaida only)
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

    @property
    def emergent_scale(self) -> Optional[dict[str, float]]:
        """Yaida's gamma = L / n^(1-s) and the aspect ratio L / n (width yaida only)."""
        if self.yaida_s is None:
            return None
        return emergent_scale_record(self.shape.num_layers, self.shape.hidden_size, self.yaida_s)


def base_head_dim(shape: ModelShape, base_hidden_size: int) -> int:
    """d0 when ``parametrization.base_head_dim`` is unset: the head dim of the base model, i.e.
    this model at the base width with the same heads. ``model.kv_channels`` set: the base model
    has it too (d0 = d); unset: megatron's ``hidden_size / num_attention_heads`` at the base
    width (d0 = n0 / heads, so the muP softmax scale sqrt(d0)/d moves with the width)."""
    if shape.head_dim is not None:
        return shape.head_dim
    if base_hidden_size % shape.num_attention_heads:
        raise ValueError(
            f"parametrization.base_hidden_size: {base_hidden_size} is not divisible by "
            f"model.num_attention_heads={shape.num_attention_heads}, so the base model has no head dim; "
            "set parametrization.base_head_dim"
        )
    return base_hidden_size // shape.num_attention_heads


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
    refused = refusal(width, family)
    if refused:
        raise ValueError(refused)
    rule = WIDTH_RULES[width]
    s = p.yaida_s if p.yaida_s is not None else 0.0

    L, n, d = shape.num_layers, shape.hidden_size, shape.kv_channels
    L0 = p.resolved_base_num_layers(L)
    n0 = p.base_hidden_size or n
    # d0 only enters a softmax scale that moves with the head dim (mup; yaida with s > 0): other
    # rules keep the model's own d, so their tables are what they were before d0 was derived.
    d0 = p.base_head_dim or (base_head_dim(shape, n0) if rule.softmax.at(s) != 0.0 else d)
    m_L = L / L0
    m_d = n / n0

    branch = p.block_multiplier * m_L**-alpha

    # Softmax scale. Keep None (Megatron computes 1/sqrt(d) itself) whenever the rule
    # reduces to the default, so the base shape is bit-identical to unpatched Megatron.
    softmax_e = rule.softmax.at(s)
    if softmax_e == -0.5 and d != d0:  # muP's attn * sqrt(d0) / d, in its closed form
        softmax_scale: Optional[float] = p.attn_multiplier * math.sqrt(d0) / d
    elif softmax_e != 0.0 and d != d0:
        softmax_scale = p.attn_multiplier * power(d / d0, softmax_e) / math.sqrt(d)
    elif p.attn_multiplier != 1.0:
        softmax_scale = p.attn_multiplier / math.sqrt(d)
    else:
        softmax_scale = None
    effective_softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(d)

    output_e = rule.output_multiplier.at(s)
    output_mult = p.output_multiplier / m_d if output_e == -1.0 else p.output_multiplier * power(m_d, output_e)

    sigma = init_method_std

    def width_init(role: str) -> float:
        return power(m_d, rule.init[role].at(s)) if role in rule.init else 1.0

    # Branch-output matrices: depth comes from the multiplier when alpha > 0, never twice.
    out_depth = 2 * L0 if alpha > 0 else 2 * L
    init_std = {
        EMBEDDING: sigma * width_init(EMBEDDING),
        OUTPUT: sigma * width_init(OUTPUT),
        FINAL_NORM: None,
        HIDDEN_IN: sigma * width_init(HIDDEN_IN),
        HIDDEN_OUT: sigma * width_init(HIDDEN_OUT) / math.sqrt(out_depth),
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
    lr_width = rule.lr[family]
    for role in ROLES:
        width_lr = power(m_d, lr_width[role].at(s)) if role in lr_width else 1.0
        lr = width_lr * m_L ** _depth_exponent(DEPTH_LR_RULES[family][role], alpha, gamma)
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
        yaida_s=p.yaida_s if width == "yaida" else None,
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

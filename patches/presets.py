"""The parametrization presets as a table (spec: shared/design/parametrization.md, "Presets").

Policy is data: adding a preset means adding a row here, never a branch in the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Preset:
    name: str
    alpha: Optional[float]  # depth exponent of the residual-branch multiplier m_L^-alpha
    gamma: Optional[float]  # depth exponent of the per-block update size (Adam LR m_L^-gamma)
    width: str  # default width rule: "sp" or "mup"
    note: str


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("sp", 0.0, 0.0, "sp", "plain Megatron (standard parametrization)"),
        Preset("mup", 0.0, 0.0, "mup", "width muP only (Tensor Programs V)"),
        Preset("depth_mup", 0.5, 0.5, "mup", "TP-VI Depth-muP; with SGD the block LR is constant"),
        Preset("branch_only", 0.5, 0.0, "mup", "multiplier without LR scaling (TP-VI Fig. 10 ablation)"),
        Preset("ode", 1.0, 0.0, "mup", "neural-ODE / CompleteP scaling"),
        Preset("custom", None, None, "mup", "alpha and gamma given explicitly"),
    )
}

ALIASES: dict[str, str] = {"completep": "ode"}

# Width rule names; their tables are patches.rules.WIDTH_RULES (a test keeps the two in step).
WIDTH_RULE_NAMES = ("sp", "mup", "yaida")


def canonical_preset(name: str) -> str:
    """Resolve aliases (``completep`` -> ``ode``); raise naming the valid choices otherwise."""
    name = ALIASES.get(name, name)
    if name not in PRESETS:
        choices = sorted([*PRESETS, *ALIASES])
        raise ValueError(f"parametrization.preset: unknown preset {name!r}; choose from {choices}")
    return name

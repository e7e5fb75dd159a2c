"""The user-facing knobs of a parametrization, as a frozen dataclass.

This is both the ``parametrization:`` section of a run config and the object a Megatron-LM
user builds in their own ``pretrain_gpt.py``. It holds choices only; the numbers derived
from it for a given model shape live in :mod:`patches.rules`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from patches.presets import PRESETS, WIDTH_RULE_NAMES, canonical_preset


def base_depth(base_num_layers: Optional[int], num_layers: int) -> int:
    """L0: the base depth the depth rules scale from; unset means the model's own depth (ratio 1).

    The one place this default is decided: the rules, ``summary.json`` and ``results.csv`` use it.
    """
    return base_num_layers or num_layers


def _positive(name: str, value: Optional[float]) -> None:
    if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"parametrization.{name}: must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class Parametrization:
    """Width muP + depth scaling choices (see ``shared/design/parametrization.md``).

    ``base_*`` of ``None`` means "the model's own value", i.e. ratio 1 on that axis.
    """

    preset: str = "sp"
    width: Optional[str] = None  # "sp" | "mup" | "yaida"; None -> the preset's default
    yaida_s: Optional[float] = None  # Yaida's metaparameter s in [0, 1]; only with width "yaida"
    alpha: Optional[float] = None  # only with preset "custom"
    gamma: Optional[float] = None  # only with preset "custom"
    base_num_layers: Optional[int] = None
    base_hidden_size: Optional[int] = None
    base_head_dim: Optional[int] = None
    block_multiplier: float = 1.0  # the constant `a` in a * m_L^-alpha
    attn_multiplier: float = 1.0
    output_multiplier: float = 1.0
    embedding_multiplier: float = 1.0
    scale_epsilon: bool = False  # Adam eps scaled with each group's LR factor
    independent_weight_decay: bool = False  # keep lr * wd of every group equal to eta * wd

    def __post_init__(self) -> None:
        object.__setattr__(self, "preset", canonical_preset(self.preset))
        if self.width is not None and self.width not in WIDTH_RULE_NAMES:
            raise ValueError(f"parametrization.width: must be one of {list(WIDTH_RULE_NAMES)}, got {self.width!r}")
        if self.resolved_width == "yaida":
            s = self.yaida_s
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s) and 0.0 <= s <= 1.0):
                raise ValueError(f"parametrization.yaida_s: parametrization.width=yaida needs s in [0, 1], got {s!r}")
            object.__setattr__(self, "yaida_s", float(s))
        elif self.yaida_s is not None:
            raise ValueError(
                f"parametrization.yaida_s: applies to width 'yaida' only (width is {self.resolved_width!r})"
            )
        if self.preset == "custom":
            for key in ("alpha", "gamma"):
                value = getattr(self, key)
                if value is None or not math.isfinite(value):
                    raise ValueError(f"parametrization.{key}: preset 'custom' needs an explicit finite {key}")
        else:
            for key in ("alpha", "gamma"):
                if getattr(self, key) is not None:
                    raise ValueError(
                        f"parametrization.{key}: fixed by preset {self.preset!r} "
                        f"({PRESETS[self.preset].alpha if key == 'alpha' else PRESETS[self.preset].gamma}); "
                        "use preset=custom to set it"
                    )
        for key in ("base_num_layers", "base_hidden_size", "base_head_dim"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ValueError(f"parametrization.{key}: must be a positive integer, got {value!r}")
        for key in ("block_multiplier", "attn_multiplier", "output_multiplier", "embedding_multiplier"):
            _positive(key, getattr(self, key))

    def resolved_base_num_layers(self, num_layers: int) -> int:
        """L0 for a model of ``num_layers`` layers (:func:`base_depth`)."""
        return base_depth(self.base_num_layers, num_layers)

    @property
    def resolved_alpha(self) -> float:
        return float(self.alpha if self.preset == "custom" else PRESETS[self.preset].alpha)

    @property
    def resolved_gamma(self) -> float:
        return float(self.gamma if self.preset == "custom" else PRESETS[self.preset].gamma)

    @property
    def resolved_width(self) -> str:
        return self.width or PRESETS[self.preset].width

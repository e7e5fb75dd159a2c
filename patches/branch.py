"""The residual-branch multiplier, as a bias-dropout-add factory for megatron layer specs.

``TransformerLayer`` calls ``self.self_attn_bda(training, fused)(x_with_bias, residual, p)``
(and the same for ``mlp_bda``). :class:`ScaledBiasDropoutAdd` is built from a
``ModuleSpec(params={"multiplier": m})`` and returns a function computing
``residual + m * dropout(x + bias)``: the multiplier scales the branch output and its bias
before the add, exactly where the spec puts it, with no change to the branch modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional

import torch
from megatron.core.fusions.fused_bias_dropout import get_bias_dropout_add
from megatron.core.jit import jit_fuser
from torch import Tensor

BiasDropoutAdd = Callable[[tuple[Tensor, Optional[Tensor]], Tensor, float], Tensor]


def _scaled_bias_dropout_add(
    x_with_bias: tuple[Tensor, Optional[Tensor]], residual: Tensor, prob: float, training: bool, multiplier: float
) -> Tensor:
    x, bias = x_with_bias
    # As megatron: cast the residual to the branch dtype (mixed precision keeps both equal).
    residual = residual if residual.dtype == x.dtype else residual.to(x.dtype)
    if bias is not None:
        x = x + bias
    out = torch.nn.functional.dropout(x, p=prob, training=training)
    # One kernel: residual + multiplier * out, so the multiplier costs no extra pass.
    return torch.add(residual, out, alpha=multiplier)


@jit_fuser
def _scaled_bias_dropout_add_fused_train(
    x_with_bias: tuple[Tensor, Optional[Tensor]], residual: Tensor, prob: float, multiplier: float
) -> Tensor:
    return _scaled_bias_dropout_add(x_with_bias, residual, prob, True, multiplier)


@jit_fuser
def _scaled_bias_dropout_add_fused_inference(
    x_with_bias: tuple[Tensor, Optional[Tensor]], residual: Tensor, prob: float, multiplier: float
) -> Tensor:
    return _scaled_bias_dropout_add(x_with_bias, residual, prob, False, multiplier)


@dataclass(frozen=True)
class ScaledBiasDropoutAdd:
    """Drop-in for megatron's ``get_bias_dropout_add`` with a residual-branch multiplier.

    With ``multiplier == 1`` it returns megatron's own function, so an unscaled model runs
    megatron's code path bit for bit.
    """

    multiplier: float

    def __call__(self, training: bool, fused: bool) -> BiasDropoutAdd:
        if self.multiplier == 1.0:
            return get_bias_dropout_add(training, fused)
        m = float(self.multiplier)
        if fused:
            fn = _scaled_bias_dropout_add_fused_train if training else _scaled_bias_dropout_add_fused_inference
            return lambda x_with_bias, residual, prob: fn(x_with_bias, residual, prob, m)
        return lambda x_with_bias, residual, prob: _scaled_bias_dropout_add(x_with_bias, residual, prob, training, m)

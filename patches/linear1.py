"""TP-VI's block-depth-1 MLP branch ("linear1"): ``MS(phi(W x + b))``.

Tensor Programs VI proves Depth-muP optimal for residual blocks with ONE matrix; the
standard transformer MLP has two (block depth 2, Section 9). This module lets the same
Megatron model swap its MLP branch for the one-matrix block, with mean subtraction (MS)
over the hidden dimension and ``phi`` in relu / abs / gelu (abs maximizes feature
diversity, Section 8.3), so both cases can be trained and compared.
"""

from __future__ import annotations

from typing import Optional

import torch
from megatron.core import parallel_state
from megatron.core.tensor_parallel import ColumnParallelLinear
from megatron.core.transformer.module import MegatronModule
from megatron.core.transformer.transformer_config import TransformerConfig

from patches.names import LINEAR1_PHIS

PHI = {
    "relu": torch.nn.functional.relu,
    "abs": torch.abs,
    "gelu": torch.nn.functional.gelu,
}
assert tuple(PHI) == LINEAR1_PHIS


class Linear1MLP(MegatronModule):
    """One hidden-by-hidden matrix, ``phi``, then mean subtraction. Returns ``(out, None)``.

    The matrix is the branch output, so it is initialised with the config's
    ``output_layer_init_method`` (role ``hidden_out``). Its output is gathered across
    tensor-parallel ranks because ``phi`` and MS need the whole hidden vector.
    """

    def __init__(
        self,
        config: TransformerConfig,
        phi: str = "relu",
        tp_group: Optional[torch.distributed.ProcessGroup] = None,
        submodules: object = None,
    ) -> None:
        super().__init__(config=config)
        if phi not in PHI:
            raise ValueError(f"model.linear1_phi: must be one of {sorted(PHI)}, got {phi!r}")
        if config.sequence_parallel:
            raise ValueError("model.block=linear1 does not support parallel.sequence_parallel")
        self.phi_name = phi
        self.phi = PHI[phi]
        self.linear_fc = ColumnParallelLinear(
            config.hidden_size,
            config.hidden_size,
            config=config,
            init_method=config.output_layer_init_method,
            bias=config.add_bias_linear,
            gather_output=True,
            skip_bias_add=False,
            tp_group=tp_group if tp_group is not None else parallel_state.get_tensor_model_parallel_group(),
        )

    def forward(self, hidden_states: torch.Tensor, **_: object) -> tuple[torch.Tensor, None]:
        out, _bias = self.linear_fc(hidden_states)
        out = self.phi(out)
        return out - out.mean(dim=-1, keepdim=True), None

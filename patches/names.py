"""The names the parametrization accepts, each list defined once (the config schema's ``Literal``
types and the engine's checks both come from here). Standard library only: reading a config
must not import megatron."""

from __future__ import annotations

from typing import Literal, get_args

OptimizerName = Literal["adam", "adamw", "sgd"]  # adam: L2 weight decay; adamw: decoupled
OptimizerFamily = Literal["adam", "sgd"]  # whose LR rules apply (docs/parametrization.md)
# Optimizer -> the family of LR rules that applies to it (and megatron's optimizer name).
OPTIMIZER_FAMILIES: dict[str, OptimizerFamily] = {"adam": "adam", "adamw": "adam", "sgd": "sgd"}

BlockName = Literal["standard", "linear1"]  # linear1: TP-VI's one-matrix MLP branch, MS(phi(W x))
BLOCKS: tuple[str, ...] = get_args(BlockName)
Linear1Phi = Literal["relu", "abs", "gelu"]  # phi of the linear1 block
LINEAR1_PHIS: tuple[str, ...] = get_args(Linear1Phi)

assert set(OPTIMIZER_FAMILIES) == set(get_args(OptimizerName))

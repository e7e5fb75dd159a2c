"""Width muP + depth-muP for megatron-core GPTModel (spec: docs/parametrization.md).

The calls a Megatron model provider and optimizer set-up need::

    resolved = patches.resolve(Parametrization(preset="depth_mup", base_num_layers=2), shape, "adamw")
    patches.configure_transformer_config(config, resolved)          # init methods, softmax scale
    spec = patches.patch_layer_spec(spec, resolved)                  # residual-branch multiplier
    model = GPTModel(config, spec, ...); patches.attach(model, resolved)   # logit/embedding mults
    overrides = patches.param_group_overrides(resolved, lr, min_lr)  # per-role LRs
    optimizer = get_megatron_optimizer(opt_config, [model], config_overrides=overrides)

Attributes are imported lazily so that reading a config (``patches.parametrization``)
does not pay for importing megatron-core.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "patch_layer_spec": "patches.layer_spec",
    "attach": "patches.model",
    "configure_transformer_config": "patches.model",
    "resolved_of": "patches.model",
    "check_distinct_groups": "patches.optimizer",
    "group_identifier": "patches.optimizer",
    "group_name": "patches.optimizer",
    "param_group_overrides": "patches.optimizer",
    "Parametrization": "patches.parametrization",
    "ALIASES": "patches.presets",
    "PRESETS": "patches.presets",
    "UnsupportedParameterError": "patches.roles",
    "role_of": "patches.roles",
    "ModelShape": "patches.rules",
    "ResolvedParametrization": "patches.rules",
    "resolve": "patches.rules",
    "build_table": "patches.table",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'patches' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__

"""The run config: its schema (:mod:`runconfig.schema`), loading (YAML + dotted overrides,
:mod:`runconfig.loader`) and validation (:mod:`runconfig.validate`).

The only layer above ``patches`` that knows the parametrization's key names. The run
directory and exit codes are :mod:`rundir`'s; atomic writes and job scripts :mod:`jobscripts`'.
"""

from typing import Any

from runconfig.loader import (
    ConfigBuilder,
    ConfigError,
    OverridesParser,
    changed_keys,
    describe_changes,
    dump_yaml,
    flatten,
    load_config,
    load_yaml,
    override_hint,
    to_dict,
    unrecognized_message,
)

__all__ = [
    "ConfigBuilder",
    "ConfigError",
    "OverridesParser",
    "changed_keys",
    "describe_changes",
    "dump_yaml",
    "flatten",
    "load_config",
    "load_yaml",
    "override_hint",
    "to_dict",
    "unrecognized_message",
]

_MOVED = {"atomic_write_text": "jobscripts.atomic", "atomic_write_bytes": "jobscripts.atomic"}


def __getattr__(name: str) -> Any:
    """``runconfig.atomic_write_*``: deprecated aliases (removed in the next release)."""
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"runconfig.{name} moved to {_MOVED[name]}.{name}; import it from there", DeprecationWarning, stacklevel=2
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module 'runconfig' has no attribute {name!r}")

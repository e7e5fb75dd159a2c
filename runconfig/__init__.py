"""Config loading shared by every entry point: YAML + dotted overrides over dataclass schemas."""

from runconfig.loader import (
    ConfigError,
    atomic_write_bytes,
    atomic_write_text,
    dump_yaml,
    flatten,
    load_config,
    to_dict,
)

__all__ = ["ConfigError", "atomic_write_bytes", "atomic_write_text", "dump_yaml", "flatten", "load_config", "to_dict"]

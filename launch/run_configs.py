"""Loading run configs for validation: ``runconfig.load_config(RunConfig, ...)`` plus the data check.

``runconfig.schema`` is imported inside the function: it pulls in the parametrization
package, which is heavy, and the commands that only run or summarize an expanded sweep
never need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from launch.errors import LaunchError
from runconfig import ConfigError, flatten, load_config, to_dict


def load_run_config(path: str | Path, overrides: Sequence[str] = (), *, where: str = "") -> Any:
    """The validated ``RunConfig`` a trainer would build from ``path`` and ``overrides``.

    Raises :class:`LaunchError` whose message starts with ``where`` (e.g. the grid entry) and
    then the loader's own, which names the file and the dotted key.
    """
    from runconfig.schema import RunConfig

    try:
        cfg = load_config(RunConfig, path, overrides)
        cfg.check_data_source()
    except (ConfigError, ValueError) as exc:
        raise LaunchError(f"{where}{exc}") from None
    return cfg


def flat_config(cfg: Any) -> dict[str, Any]:
    """``{"model.num_layers": 4, ...}`` of a loaded config."""
    return flatten(to_dict(cfg))

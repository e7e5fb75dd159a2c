"""Loading run configs for validation: ``runconfig.load_config(RunConfig, ...)`` plus the data check
(:class:`RunConfigs`: many of them on one file).

``runconfig.schema`` is imported inside the function: it pulls in the parametrization
package, which is heavy, and the commands that only run or summarize an expanded sweep
never need it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from launch.errors import LaunchError
from runconfig import ConfigBuilder, ConfigError, flatten, to_dict


class RunConfigs:
    """:func:`load_run_config` for many override lists on one config file (a sweep's grid points):
    the file is read and merged once (``runconfig.ConfigBuilder``); the same configs and errors."""

    def __init__(self, path: str | Path, *, where: str = "") -> None:
        from runconfig.schema import RunConfig

        try:
            self._builder = ConfigBuilder(RunConfig, path)
        except ConfigError as exc:
            raise LaunchError(f"{where}{exc}") from None

    def load(self, overrides: Sequence[str] = (), *, where: str = "") -> Any:
        """The validated ``RunConfig`` a trainer would build from the file and ``overrides``.

        Raises :class:`LaunchError` whose message starts with ``where`` (e.g. the grid entry) and
        then the loader's own, which names the file and the dotted key.
        """
        try:
            cfg = self._builder.build(overrides)
            cfg.check_data_source()
        except (ConfigError, ValueError) as exc:
            raise LaunchError(f"{where}{exc}") from None
        return cfg

    def load_with(self, loaded: Any, values: Mapping[str, Any], overrides: Sequence[str], *, where: str = "") -> Any:
        """:meth:`load` of ``overrides``, which differ from those ``loaded`` came from only in ``values``
        (dotted keys -> typed values): ``runconfig.ConfigBuilder.build_with``, the same config or error."""
        try:
            cfg = self._builder.build_with(loaded, values, overrides)
            cfg.check_data_source()
        except (ConfigError, ValueError) as exc:
            raise LaunchError(f"{where}{exc}") from None
        return cfg


def load_run_config(path: str | Path, overrides: Sequence[str] = (), *, where: str = "") -> Any:
    """The validated ``RunConfig`` a trainer would build from ``path`` and ``overrides``
    (:class:`LaunchError` starting with ``where`` when it is not)."""
    return RunConfigs(path, where=where).load(overrides, where=where)


def flat_config(cfg: Any) -> dict[str, Any]:
    """``{"model.num_layers": 4, ...}`` of a loaded config."""
    return flatten(to_dict(cfg))


def config_values(cfg: Any, keys: Iterable[str]) -> dict[str, Any]:
    """``{key: value}`` of a loaded config for the dotted ``keys`` (each a single setting): the
    entries of :func:`flat_config` without flattening the whole tree (a third of a 10000-point
    expansion); values are copies, as there."""
    return {key: copy.deepcopy(functools.reduce(getattr, key.split("."), cfg)) for key in keys}

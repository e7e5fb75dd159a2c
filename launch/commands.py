"""The train command line: the single source every launcher and executor wraps.

``train_gpt.py`` takes ``--config FILE [key=value ...] [--force]`` (docs/contracts.md). Which
program plays ``train_gpt.py`` is injectable so that launch can be built and tested before,
or independently of, the real trainer: ``--train-cmd`` / a sweep's ``train_cmd`` field /
``$DEPTHMUP_TRAIN_CMD`` / ``python <repo>/train_gpt.py``, first one set wins. A sweep records
the first three (``sweep.yaml`` ``train_cmd``); without one it records none, and each ``launch
run`` takes the running checkout's own trainer (:func:`given_trainer`).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from launch.errors import LaunchError

TRAIN_CMD_ENV = "DEPTHMUP_TRAIN_CMD"
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRAINER_SCRIPT = REPO_ROOT / "train_gpt.py"

TrainerSpec = Union[str, Sequence[str], None]


def trainer_command(explicit: TrainerSpec = None) -> list[str]:
    """The trainer program as argv: ``explicit`` (a list, or a string split like a shell would),
    else ``$DEPTHMUP_TRAIN_CMD``, else ``[sys.executable, <repo>/train_gpt.py]``."""
    source, value = "trainer command", explicit
    if not value:
        source, value = f"${TRAIN_CMD_ENV}", os.environ.get(TRAIN_CMD_ENV)
    if not value:
        return [sys.executable, str(DEFAULT_TRAINER_SCRIPT)]
    argv = shlex.split(value) if isinstance(value, str) else [str(v) for v in value]
    if not argv:
        raise LaunchError(f"{source}: empty command")
    return argv


def given_trainer(explicit: TrainerSpec = None) -> list[str] | None:
    """The trainer a user gave (``explicit``, else ``$DEPTHMUP_TRAIN_CMD``) as argv; None where
    none was given: the toolkit's own, which :func:`trainer_command` resolves where it runs."""
    if not explicit and not os.environ.get(TRAIN_CMD_ENV):
        return None
    return trainer_command(explicit)


def old_default_trainer(argv: Sequence[str]) -> bool:
    """Whether ``argv`` has the form a sweep expanded before :func:`given_trainer` recorded for
    "no trainer given": ``[<abs path>/python..., <abs path>/train_gpt.py]`` (that checkout's
    interpreter and trainer, absolute)."""
    return (
        len(argv) == 2
        and all(Path(a).is_absolute() for a in argv)
        and Path(argv[0]).name.startswith("python")
        and Path(argv[1]).name == DEFAULT_TRAINER_SCRIPT.name
    )


def yaml_value(value: Any) -> str:
    """``value`` in the YAML syntax of an override, so that the trainer reads back exactly it.

    Strings are JSON-quoted (a JSON string is a YAML double-quoted scalar), which keeps
    spaces, quotes, ``#``, ``:`` and words like ``yes``/``null`` literal.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (str, bool, int, float, list, tuple, dict)) or value is None:
        return json.dumps(value)
    raise LaunchError(f"cannot write a {type(value).__name__} value as an override: {value!r}")


def format_override(key: str, value: Any) -> str:
    """``key=value`` for the command line (see :func:`yaml_value`)."""
    return f"{key}={yaml_value(value)}"


@dataclass(frozen=True)
class TrainInvocation:
    """One call of the trainer: program, config file and overrides, as argv."""

    trainer: tuple[str, ...]
    config: str
    overrides: tuple[str, ...] = ()
    force: bool = False

    def argv(self) -> list[str]:
        return [*self.trainer, "--config", self.config, *self.overrides, *(["--force"] if self.force else [])]

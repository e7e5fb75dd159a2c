"""Shell words for generated scripts: user text is always quoted, our own expansions are not.

A token is a literal ``str`` (quoted with :func:`shlex.quote`), a :class:`Raw` fragment that
the toolkit itself writes (``"$SLURM_JOB_ID"``), or a :class:`Word` gluing both into one shell word
(``--rdzv-endpoint="$head_node":29500``). User-supplied text never becomes ``Raw``.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Union


class Raw(str):
    """A shell fragment written verbatim: only for expansions the toolkit generates itself."""


@dataclass(frozen=True)
class Word:
    """Several parts (literal or :class:`Raw`) that make one shell word."""

    parts: tuple[Union[str, Raw], ...]


Token = Union[str, Raw, Word]


def quote(token: Token) -> str:
    if isinstance(token, Word):
        return "".join(quote(part) for part in token.parts)
    if isinstance(token, Raw):
        return str(token)
    return shlex.quote(token)


def join(tokens: Iterable[Token]) -> str:
    return " ".join(quote(t) for t in tokens)


def comment(text: str) -> str:
    """A ``#`` line that stays one line whatever ``text`` holds."""
    return "# " + text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")

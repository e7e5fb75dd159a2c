"""What every entry point's ``--help`` shows: each option's default, where it has one; and
its exit when stdout's reader went away (:func:`exit_with`).

argparse prints a default only where the help text spells it out, and nothing for an option
without help, so ``--master-port`` or ``--steps`` read as if they had none. :func:`state_defaults`
walks a parser (and its subcommands' parsers) once it is built and ends each option's help with
``(default: X)`` unless the text already speaks of its default. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import sys
from collections.abc import Callable
from typing import NoReturn

_NOTHING_TO_STATE = (None, False, argparse.SUPPRESS)
# help that already states its default: "(default: the latest)", "(default 1: three points)",
# "; default 1000)", "%(default)s"; not "points of the default log grid"
_STATES_DEFAULT = re.compile(r"\(default\b|\bdefault:|\bdefault \S+\)|%\(default\)")


def _shown(default: object) -> str:
    if isinstance(default, (list, tuple)):
        return " ".join(map(str, default))
    return str(default)


def state_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Append ``(default: X)`` to the help of every option of ``parser`` and its subparsers
    that has a default worth stating (not None, False or empty) and whose help does not already
    state it; returns ``parser``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in set(action.choices.values()):
                state_defaults(sub)
            continue
        default = action.default
        if not action.option_strings or action.help == argparse.SUPPRESS:
            continue
        if any(default is d for d in _NOTHING_TO_STATE) or default == [] or default == ():
            continue
        text = action.help or ""
        if _STATES_DEFAULT.search(text):
            continue
        shown = _shown(default).replace("%", "%%")  # argparse expands help with %-formatting
        action.help = f"{text} (default: {shown})" if text else f"default: {shown}"
    return parser


def exit_with(main: Callable[[], int]) -> NoReturn:
    """``sys.exit(main())``, quietly where the reader of stdout went away (``status | head``):
    Python would print a BrokenPipeError traceback, once in the command and once more at exit
    when it flushes stdout. Exit 141, as a shell reports a command killed by SIGPIPE."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe (a child's, a socket): a real error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the flush at exit writes nowhere
        code = BROKEN_PIPE
    sys.exit(code)


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (poll reports an error on it)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _fd, events in poll.poll(0))
    except (OSError, ValueError):
        return False


BROKEN_PIPE = 128 + 13  # SIGPIPE

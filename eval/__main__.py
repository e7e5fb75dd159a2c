"""``python -m eval <command>``: analyses of a sweep directory, one subcommand per module.

Each subcommand lives in its own module, listed in :data:`SUBCOMMANDS`. A module provides

* ``HELP: str`` (optional) - the one-line help,
* ``add_arguments(parser: argparse.ArgumentParser) -> None`` - its options,
* ``run(args: argparse.Namespace) -> int`` - the exit code (0 ok, 2 bad input).

A listed module that is not there yet (or fails to import) still shows up in ``--help``
and answers with a clear message and exit code 2, so adding a command is: write the
module; the registry entry already exists or is one line.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence

from jobscripts.cli import state_defaults
from jobscripts.quiet import quiet_libraries
from rundir.contract import ExitCode

SUBCOMMANDS: dict[str, str] = {
    "transfer": "eval.transfer_cmd",
    "coord-check": "eval.coord_check",
    "diversity": "eval.diversity_cmd",
    "dynamics": "eval.dynamics_cmd",
    "loss-curves": "eval.loss_curves",
    "lm-eval": "eval.lm_eval_cmd",
}


def _unavailable(command: str, why: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> ExitCode:
        print(f"error: `python -m eval {command}` is not available: {why}", file=sys.stderr)
        return ExitCode.USAGE

    return run


def _load(module_name: str) -> tuple[object | None, str]:
    """The subcommand module, or None and the reason it cannot be used."""
    path = module_name.replace(".", "/") + ".py"
    try:
        if importlib.util.find_spec(module_name) is None:
            return None, f"{path} does not exist yet"
        module = importlib.import_module(module_name)
    except Exception as exc:  # a broken sibling module must not take the other commands down
        return None, f"importing {module_name} failed: {type(exc).__name__}: {exc}"
    missing = [name for name in ("add_arguments", "run") if not callable(getattr(module, name, None))]
    if missing:
        return None, f"{path} does not define {' and '.join(missing)}() (see eval/__main__.py)"
    return module, ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval", description="Analyses of a sweep directory (docs/eval.md).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command, module_name in SUBCOMMANDS.items():
        module, why = _load(module_name)
        if module is None:
            p = sub.add_parser(command, help=f"(not available: {why})", add_help=True)
            p.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
            p.set_defaults(_run=_unavailable(command, why))
            continue
        p = sub.add_parser(command, help=getattr(module, "HELP", None), description=getattr(module, "HELP", None))
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return state_defaults(parser)


def main(argv: Sequence[str] | None = None) -> ExitCode:
    quiet_libraries()
    args = build_parser().parse_args(argv)
    return ExitCode(args._run(args))


if __name__ == "__main__":
    from jobscripts.cli import exit_with

    exit_with(main)

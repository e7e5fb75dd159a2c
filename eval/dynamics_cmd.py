"""``python -m eval dynamics SWEEP_DIR|RUN_DIR ...``: per-layer update and activation sizes
(``diagnostics.jsonl``) against depth and training step, with fitted exponents and their
CIs next to the expected ones (:mod:`eval.dynamics`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from eval.dynamics import DynamicsError, analyse, find_runs, markdown, select
from eval.dynamics_plots import plot
from eval.outputs import atomic_write_bytes, write_json
from eval.transfer_cmd import add_selection_arguments
from rundir.contract import ExitCode

HELP = "update/weight and activation RMS per layer against depth and step, exponents with CIs (diagnostics.jsonl)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="sweep directories, a sweep's runs/ folder, or run directories")
    parser.add_argument("--out", required=True, help="directory for dynamics.json, dynamics.md, dynamics.{png,pdf} "
                        "(with more than 4 families also dynamics_steps_<i>.{png,pdf})")  # fmt: skip
    parser.add_argument("--lr", type=float, default=None, help="use the runs at this LR (default: each depth's best)")
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.1, 0.5, 1.0],
                        help="fractions of training at which to fit exponents")  # fmt: skip
    parser.add_argument("--bootstrap", type=int, default=1000)
    add_selection_arguments(parser)  # eval transfer's: the same runs and families
    parser.add_argument("--no-figures", action="store_true")


def write_dynamics(paths: list[Path], out: Path, lr: Optional[float] = None, fractions: tuple[float, ...] = (0.1, 0.5, 1.0),
                   n_boot: int = 1000, figures: bool = True, *, presets: Optional[list[str]] = None,
                   where: Optional[list[tuple[str, str]]] = None, ignore_columns: tuple[str, ...] = (),
                   depths: Optional[list[int]] = None, shared_base: Optional[str] = None) -> dict[str, Any]:  # fmt: skip
    """The Python API (the demo calls it): analyse and write every output; DynamicsError on bad input.
    Runs are grouped into ``eval transfer``'s families; ``presets``, ``where``, ``ignore_columns``,
    ``depths`` and ``shared_base`` are its ``--presets``, ``--where``, ``--ignore-columns``,
    ``--depths`` and ``--shared-base``."""
    for f in fractions:
        if not 0.0 < f <= 1.0:
            raise DynamicsError(f"--fractions: {f:g} is outside (0, 1]")
    notes: list[str] = []
    found = find_runs(paths, where, tuple(ignore_columns), depths=depths, shared_base=shared_base, presets=presets,
                      notes=notes)  # fmt: skip
    chosen = select(found, lr, presets, notes)
    result = analyse(chosen, list(fractions), n_boot)
    which = (f"the LR nearest {lr:g}" if lr is not None else "the LR with the lowest seed-mean final validation "
             "loss (eval transfer's best grid point at the end)")  # fmt: skip
    n_found = len({r.run_dir for r in found if not presets or r.preset in presets})
    notes.append(f"{len({r.run_dir for r in chosen})} of {n_found} runs with diagnostics analysed: per family and "
                 f"depth, every seed at {which}")  # fmt: skip
    result["notes"] = notes
    result["files"] = ["dynamics.json", "dynamics.md"]
    if figures:
        result["files"] += [p.name for p in plot(result, out / "dynamics")]
    table = markdown(result)
    pictures = [f for f in result["files"] if f.endswith(".png")]  # each figure, linked (PDFs beside them)
    links = "".join(f"\n![{Path(f).stem}]({f})\n" for f in pictures)
    text = "# Training dynamics across depth\n\n" + table + ("\n## Figures\n" + links if pictures else "")
    atomic_write_bytes(out / "dynamics.md", text.encode())
    write_json(out / "dynamics.json", result)
    result["markdown"] = table
    return result


def run(args: argparse.Namespace) -> ExitCode:
    try:
        result = write_dynamics([Path(p) for p in args.paths], Path(args.out), args.lr, tuple(args.fractions),
                                args.bootstrap, not args.no_figures, presets=args.presets, where=args.where,
                                ignore_columns=tuple(args.ignore_columns), depths=args.depths,
                                shared_base=args.shared_base)  # fmt: skip
    except DynamicsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    print(result["markdown"], end="")
    print(f"wrote {', '.join(str(Path(args.out) / f) for f in result['files'])}")
    return ExitCode.OK

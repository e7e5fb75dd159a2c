"""``python -m eval loss-curves SWEEP_DIR|RUN_DIR ... --out DIR``: each run's training loss (and
validation losses) against step, from ``metrics.jsonl``. A cooldown branch's curve is whole: its
source's rows up to the branch step (:func:`rundir.files.read_metrics_with_source`, the one owner of
that join), drawn dashed and named in the CSV's ``inherited_from``, then its own rows."""

from __future__ import annotations

import argparse
import csv
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from eval.outputs import atomic_write_bytes, lr_text
from rundir.contract import ExitCode
from rundir.files import (
    INHERITED_FROM,
    METRICS_FILE,
    RunDirError,
    locate_runs,
    read_metrics,
    read_metrics_with_source,
    read_summary,
)

HELP = (
    "training and validation loss against step per run; a cooldown branch with its source's rows up to the branch step"
)
COLUMNS = ("run_id", "num_layers", "lr", "kind", "step", "loss", "val_loss", INHERITED_FROM)


class LossCurvesError(ValueError):
    """Input a user can fix (a path that holds no runs)."""


@dataclass(frozen=True)
class RunCurve:
    run_id: str
    num_layers: Optional[int]
    lr: Optional[float]
    rows: list[dict[str, Any]]  # read_metrics_with_source: inherited rows marked, then the run's own
    problem: str = ""  # why the inherited part is missing ("" when whole)


def find_run_dirs(paths: list[Path], said: Optional[list[str]] = None) -> list[Path]:
    """The run directories with a metrics file under each path, as every eval command reads a path
    (:func:`rundir.files.locate_runs`): a sweep directory, its ``runs/`` folder, a run directory.
    ``said`` gets what each path was found to be, and the runs without a metrics file."""
    found = []
    located = [locate_runs(path) for path in paths]
    for at in located:
        if at.kind == "none":
            raise LossCurvesError(at.describe())
        with_metrics = [d for d in at.runs if (d / METRICS_FILE).is_file()]
        if said is not None and at.kind != "run":
            left = len(at.runs) - len(with_metrics)
            said.append(f"read {at.describe()}" + (f", {left} without {METRICS_FILE} yet" if left else ""))
        found += with_metrics
    if not found:
        raise LossCurvesError(f"{'; '.join(at.describe() for at in located)}: no run has written {METRICS_FILE} yet")
    return found


def load_curve(run_dir: Path) -> RunCurve:
    summary = read_summary(run_dir)
    try:
        rows, problem = read_metrics_with_source(run_dir), ""
    except RunDirError as exc:
        rows, problem = read_metrics(run_dir), str(exc)
    return RunCurve(
        run_dir.name, summary.num_layers if summary else None, summary.lr if summary else None, rows, problem
    )


def csv_text(curves: list[RunCurve]) -> str:
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(COLUMNS)
    for c in curves:
        for r in c.rows:
            source = r.get(INHERITED_FROM)
            out.writerow([c.run_id, c.num_layers, c.lr, r.get("kind"), r.get("step"), _cell(r.get("loss")),
                          _cell(r.get("val_loss")), Path(source).name if source else ""])  # fmt: skip
    return buf.getvalue()


def _cell(value: Any) -> str:
    return "" if value is None else repr(float(value))


def plot(curves: list[RunCurve], out: Path, dpi: int = 150) -> list[Path]:
    """One panel per depth: training loss against step, a line per run coloured by LR, the part a
    branch inherited dashed; validation losses as dots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from eval.plots import save_figure

    depths = sorted({c.num_layers for c in curves}, key=lambda d: (d is None, d or 0))
    lrs = sorted({c.lr for c in curves if c.lr})
    colors = dict(zip(lrs, plt.cm.viridis(np.linspace(0.0, 0.9, max(len(lrs), 1)))))
    fig, axes = plt.subplots(1, len(depths), figsize=(4.5 * len(depths), 3.6), squeeze=False, layout="constrained")
    for ax, depth in zip(axes[0], depths):
        labelled = set()
        for c in (c for c in curves if c.num_layers == depth):
            color = colors.get(c.lr, "grey")
            train = [r for r in c.rows if r.get("kind") == "train" and r.get("loss") is not None]
            inherited = [(r["step"], r["loss"]) for r in train if INHERITED_FROM in r]
            own = inherited[-1:] + [(r["step"], r["loss"]) for r in train if INHERITED_FROM not in r]  # joined
            if inherited:
                ax.plot(*zip(*inherited), "--", color=color, lw=1.0, gid=f"inherited:{c.run_id}")
            if len(own) > len(inherited[-1:]):
                label = None if c.lr in labelled else f"lr {lr_text(c.lr)}" if c.lr else c.run_id
                labelled.add(c.lr)
                ax.plot(*zip(*own), "-", color=color, lw=1.4, label=label, gid=f"own:{c.run_id}")
            evals = [
                (r["step"], r["val_loss"]) for r in c.rows if r.get("kind") == "eval" and r.get("val_loss") is not None
            ]
            if evals:
                ax.plot(*zip(*evals), "o", color=color, ms=3.5)
        ax.set_title(f"L={depth}" if depth is not None else "depth unknown (no summary.json)")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (dots: validation)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, title="dashed: inherited from the source", title_fontsize=7)
    paths = save_figure(fig, out, "loss_curves", dpi)
    plt.close(fig)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths", nargs="+", type=Path, help="sweep directories, a sweep's runs/ folder, or run directories"
    )
    parser.add_argument(
        "--out", required=True, type=Path, help="directory for loss_curves.csv and loss_curves.{png,pdf}"
    )
    parser.add_argument("--dpi", type=int, default=150)
    parser.add_argument("--no-figures", action="store_true")


def run(args: argparse.Namespace) -> ExitCode:
    try:
        said: list[str] = []
        curves = [load_curve(d) for d in find_run_dirs(args.paths, said)]
    except LossCurvesError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    for line in said:
        print(line)
    for c in curves:
        if c.problem:
            print(f"warning: {c.problem}; its curve starts after the branch step", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(args.out / "loss_curves.csv", csv_text(curves).encode())
    files = [args.out / "loss_curves.csv"] + ([] if args.no_figures else plot(curves, args.out, args.dpi))
    branches = sum(any(INHERITED_FROM in r for r in c.rows) for c in curves)
    print(f"{len(curves)} runs ({branches} with their source's rows up to the branch step)")
    print(f"wrote {', '.join(map(str, files))}")
    return ExitCode.OK

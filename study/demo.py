"""``python -m launch demo``: one study end to end, each step resumable.

1. data (:mod:`study.data`): the corpus through ``data_prep``;
2. sweep (:mod:`study.sweep`): the planner's points (:mod:`study.planner`) run as one growing
   sweep, locally or as SLURM arrays; a rerun trains nothing twice;
3. analysis (:mod:`study.analysis`): ``results.csv``, ``eval transfer`` and ``eval dynamics``;
4. summary (:mod:`study.summary`): ``demo_summary.json`` / ``demo_summary.md``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import yaml

from data_prep.stages import DataPrepError
from data_prep.tokenizer import TokenizerError
from jobscripts.atomic import atomic_write_text
from launch.errors import LaunchError
from rundir.contract import ExitCode
from study.analysis import analyse
from study.corpus import CorpusError
from study.data import base_config, prepare_data
from study.log import log as _log
from study.preview import check_local_gpu, check_run_configs
from study.spec import Study
from study.summary import headline, render_markdown, study_status
from study.sweep import AdaptiveSweep


def write_sweep_spec(out: Path, s: Study, data_dir: Path, workers: int, executor: str, slurm: Optional[dict]) -> Path:
    """The study's base run config and sweep spec, next to each other in ``out``."""
    base_path = out / "demo_base.yaml"
    atomic_write_text(base_path, yaml.safe_dump(base_config(s, data_dir.resolve()), sort_keys=False))
    spec_path = out / "demo_sweep.yaml"
    spec = {
        "name": s.name,
        "study": s.name,  # its runs are the planner's: `launch sweep` refuses this spec
        "base_config": base_path.name,
        "executor": {
            "kind": executor,
            "max_parallel": workers,
            "max_retries": 1,
            "gpus_per_run": 1 if s.device == "cuda" else 0,
            "runs_per_gpu": s.runs_per_gpu,
            "start": "fork",
        },
        "slurm": slurm or {},
    }
    atomic_write_text(spec_path, yaml.safe_dump(spec, sort_keys=False))
    return spec_path


def run_demo(
    out: Path,
    s: Study,
    workers: int,
    *,
    executor: str = "local",
    slurm: Optional[dict] = None,
    wait: bool = False,
    poll_s: float = 60.0,
) -> ExitCode:
    from launch.status import collect_states, print_report, write_results

    t0 = time.time()
    check_run_configs(s, (out / "data").resolve())  # a variant key the trainer refuses stops it before data prep
    check_local_gpu(s, executor)  # so does a GPU study on a machine without a GPU
    out.mkdir(parents=True, exist_ok=True)
    try:
        data_dir = prepare_data(out, s, workers)
    except CorpusError as exc:
        _log(f"error: {exc}")
        return ExitCode.USAGE
    except DataPrepError as exc:  # e.g. data_prep's readers missing where the tokenized data was not carried
        _log(f"error: building {out / 'data'} from corpus {s.corpus!r}: {exc}")
        return ExitCode.USAGE
    except TokenizerError as exc:  # e.g. a vocabulary too small for the corpus's characters
        _log(
            f"error: building {out / 'data'} from corpus {s.corpus!r}: {exc} "
            f"(tokenizer.vocab_size is the study file's vocab_size: {s.vocab_size})"
        )
        return ExitCode.USAGE
    spec_path = write_sweep_spec(out, s, data_dir, workers, executor, slurm)
    sweep_dir = (out / "sweep").resolve()
    sweep = AdaptiveSweep(sweep_dir, spec_path, s, workers)
    if executor == "slurm":
        if not sweep.run_slurm(wait=wait, poll_s=poll_s):
            return ExitCode.RESUMABLE  # the analysis runs once every point is final
    else:
        sweep.run()

    states = collect_states(sweep_dir, sweep.plan)
    print_report(sweep_dir, sweep.plan, states, sys.stderr)
    write_results(sweep_dir, sweep.plan, states)
    report_dir = out / "report"
    status = study_status(sweep, s)
    for line in status.unreached:  # arms whose walk stopped short of the deepest depth
        _log(line.replace("**", ""))
    trained = sorted({p.depth for p in status.results})
    if len(trained) < 2:
        _log(f"nothing to analyse: no depth past the base depth L={s.depths[0]} was trained")
        return ExitCode.USAGE
    try:
        transfer = analyse(sweep_dir, report_dir, s, goal_context=status.lines, depths=trained)
    except LaunchError as exc:
        _log(str(exc))
        return ExitCode.USAGE
    minutes = (time.time() - t0) / 60
    h = headline(transfer, sweep, s, status)
    h["wall_minutes"] = minutes
    atomic_write_text(out / "demo_summary.json", json.dumps(h, indent=1, default=str) + "\n")
    md = render_markdown(h, s, minutes)
    atomic_write_text(out / "demo_summary.md", md)
    print(md)
    print(f"report: {report_dir / 'report.html'}  figures: {report_dir}")
    if not s.claims:
        print(no_claims_note(s))
    return ExitCode.OK


def no_claims_note(s: Study) -> str:
    """The last line of a study whose file says ``claims: false`` (``--quick``, or a user's own)."""
    return f"(study {s.name!r} has claims: false: a smoke test of the pipeline, its numbers support no conclusion)"

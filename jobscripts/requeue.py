"""A batch job's command, run so that a preemption requeues the job instead of ending it FAILED.

``python -m jobscripts.requeue --max-requeues N --on-exit 75 -- COMMAND ...`` runs COMMAND,
passes on the signals it gets (SLURM sends SIGTERM ``signal_grace_s`` before the time limit, to
this process: ``--signal=B:TERM@S``), and exits with COMMAND's code, except: when COMMAND exits
with the ``--on-exit`` code (the run contract's ``ExitCode.RESUMABLE``: preempted, its
checkpoint or finished units saved; the caller passes it, this module stays free of imports
from the toolkit) while SLURM still runs the job, the job
requeues itself with ``scontrol requeue`` and this exits 0. That run of the job then shows
as REQUEUED rather than FAILED, and the job (same id, same array index, so later jobs'
``--dependency=afterok`` still wait for it) runs again after SLURM's requeue hold (reason
BeginTime, about two minutes) and resumes. SLURM has no per-job "requeue on exit code"
(``RequeueExit`` in slurm.conf is cluster-wide, for admins), hence this.

``--exit-file PATH`` (repeatable): COMMAND is a launcher whose exit code is not its workers'
(torchrun exits 1 whatever they exit with; srun with the highest code of its tasks, so a rank
that exits 2 reads as 75 or 137 when ``--kill-on-bad-exit`` stopped the others); when it exits
non-zero, the first PATH, in the order given, that was written after it started with a JSON
object whose ``exit_code`` is an integer (the trainer's ``exit.json``, then its
``summary.json``: the run contract's ``EXIT_FILES``) gives the exit code.

No requeue, and the exit code kept, when the job is being cancelled (``scancel``: ``squeue``
no longer shows it RUNNING), after ``N`` requeues (``SLURM_RESTART_COUNT``), outside SLURM,
or when ``scontrol requeue`` refuses (e.g. the job was submitted with ``--no-requeue``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Optional

from jobscripts.squeue import slurm_job

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def requeue_command(
    command: Sequence[Any], max_requeues: int, on_exit: int, exit_files: Sequence[Any] = ()
) -> list[Any]:
    """``command`` run under this module (tokens are kept as given: the caller quotes them)."""
    options: list[Any] = [f"--max-requeues={max_requeues}", f"--on-exit={int(on_exit)}"]
    for path in exit_files:
        options += ["--exit-file", path]
    return [sys.executable, "-m", "jobscripts.requeue", *options, "--", *command]


def written_exit(path: str, since: float) -> Optional[dict[str, Any]]:
    """The JSON object in ``path`` if it was written at or after ``since`` and its ``exit_code``
    is an integer (the file read once: its code and the rest come from the same write)."""
    try:
        if os.stat(path).st_mtime < since:
            return None
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    code = data.get("exit_code") if isinstance(data, dict) else None
    return data if isinstance(code, int) and not isinstance(code, bool) else None


def first_written_exit(paths: Sequence[str], since: float) -> Optional[tuple[str, dict[str, Any]]]:
    """The first of ``paths`` that :func:`written_exit` accepts, and its object."""
    for path in paths:
        data = written_exit(path, since)
        if data is not None:
            return path, data
    return None


def first_written_exit_code(paths: Sequence[str], since: float) -> Optional[tuple[int, str]]:
    """The first of ``paths`` with an ``exit_code`` written at or after ``since``, and that code."""
    written = first_written_exit(paths, since)
    return (written[1]["exit_code"], written[0]) if written is not None else None


def _log(message: str) -> None:
    print(f"[requeue] {message}", file=sys.stderr, flush=True)


def _requeue(max_requeues: int, code: int) -> bool:
    """Requeue this job if SLURM still runs it and the limit allows; says why not otherwise."""
    job = slurm_job()
    if not job:
        return False
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    if restarts >= max_requeues:
        _log(f"exit {code} (preempted): not requeued, job {job} was requeued {restarts} times (max_requeues)")
        return False
    try:
        state = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=60)
        if state.stdout.strip() != "RUNNING":
            _log(f"exit {code} (preempted): not requeued, job {job} is {state.stdout.strip() or 'gone'} (cancelled)")
            return False
        _log(
            f"exit {code} (preempted, progress saved): requeueing job {job} (requeue {restarts + 1} of at most {max_requeues})"
        )
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _log(f"exit {code} (preempted): not requeued: {exc}")
        return False
    if done.returncode != 0:
        _log(f"scontrol requeue {job} failed: {done.stderr.strip() or done.stdout.strip()}; resubmit to resume")
        return False
    return True


def run(command: Sequence[str], max_requeues: int, on_exit: int, exit_files: Sequence[str] = ()) -> int:
    started = time.time()
    child = subprocess.Popen(list(command))

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        code = child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    code = 128 - code if code < 0 else code
    written = first_written_exit_code(exit_files, started) if code else None
    if written is not None and written[0] != code:
        _log(f"{command[0]} exited {code}; {written[1]} says {written[0]}: exiting {written[0]}")
        code = written[0]
    if code == on_exit and max_requeues > 0 and _requeue(max_requeues, code):
        return os.EX_OK  # requeued: the job runs again; this run of it did not fail
    return code


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jobscripts.requeue", description=__doc__.splitlines()[0])
    parser.add_argument("--max-requeues", type=int, required=True, help="requeue at most this often (0: never)")
    parser.add_argument("--on-exit", type=int, required=True, help="the command's exit code that means 'preempted'")
    parser.add_argument(
        "--exit-file",
        dest="exit_files",
        action="append",
        default=[],
        help="a JSON file whose exit_code, if written after the start, is the code (repeatable: the first written wins)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    return run(command, args.max_requeues, args.on_exit, args.exit_files)


if __name__ == "__main__":
    sys.exit(main())

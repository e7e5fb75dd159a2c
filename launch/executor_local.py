"""Run a sweep's pending runs on this machine, K at a time, until each is final or out of retries.

Single-threaded on purpose: children are started from the main thread so that their
parent-death signal fires only when this process dies (see :mod:`launch.processes`).
A SIGTERM/SIGINT/SIGHUP is forwarded to every running trainer (they checkpoint and exit
75); nothing new starts, and the executor returns once they are all gone.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen
from typing import IO, BinaryIO, Optional, Union

from tqdm import tqdm

from launch import attempts
from launch.errors import LaunchError
from launch.launchers import Topology, torchrun_command
from launch.outcomes import MAX_PREEMPT_REQUEUES, outcome_of
from launch.processes import forwarding_signals, start_child
from launch.resources import Slot, make_slots
from launch.run_state import run_state
from launch.sweep_dir import run_dir
from launch.sweep_plan import PlannedRun, SweepPlan
from launch.warm_start import ForkedTrainer, fork_trainer, forkable
from rundir.lock import run_locked

POLL_SECONDS = 0.1
OUTPUT_LOG = Path("launch") / "output.log"


@dataclass
class Execution:
    """What one executor invocation did (the runs' states are read from their directories)."""

    started: int = 0  # attempts started
    interrupted: bool = False  # a signal stopped it; unfinished runs resume on rerun


@dataclass
class _Active:
    run: PlannedRun
    slot: Slot
    proc: Union[Popen, ForkedTrainer]
    attempt_id: str
    log: IO[str]
    log_path: Path
    echoed: int  # bytes of log_path already copied to the echo stream


def select_runs(plan: SweepPlan, only: Optional[list[str]]) -> list[PlannedRun]:
    if not only:
        return list(plan.runs)
    known = {run.run_id for run in plan.runs}
    unknown = [rid for rid in only if rid not in known]
    if unknown:
        raise LaunchError(f"sweep {plan.name!r} has no run(s) {unknown}")
    return [run for run in plan.runs if run.run_id in set(only)]


def _argv(plan: SweepPlan, sweep_dir: Path, run: PlannedRun, slot: Slot) -> list[str]:
    argv = plan.train_invocation(sweep_dir, run).argv()
    if len(slot.gpus) > 1:
        argv = [str(t) for t in torchrun_command(Topology(1, len(slot.gpus)), argv)]
    return argv


class LocalExecutor:
    """One invocation's run queue, its slots and the trainers running in them.

    ``run()`` starts queued runs while slots are free, polls the running ones, and finishes
    each as it exits: its attempt is recorded, and it is requeued (a retry or a preemption),
    done, or given up. Runs that ``on_done`` adds are queued as they come.
    """

    def __init__(
        self,
        sweep_dir: Path,
        plan: SweepPlan,
        *,
        max_parallel: int,
        max_retries: int,
        progress: bool,
        on_done: Optional[Callable[[PlannedRun], Sequence[PlannedRun]]],
        runs: Sequence[PlannedRun],
        echo: Optional[BinaryIO] = None,
    ) -> None:
        self.sweep_dir = sweep_dir
        self.echo = echo  # also copy each trainer's output.log here as it grows
        self.plan = plan
        self.max_retries = max_retries
        self.on_done = on_done
        self.result = Execution()
        self.todo: deque[PlannedRun] = deque()
        self.free: list[Slot] = list(reversed(make_slots(max_parallel, plan.executor.gpus_per_run)))
        self.active: list[_Active] = []
        self.requeues: dict[str, int] = {}  # run id -> preemptions requeued in this invocation
        self.fork = plan.executor.start == "fork"
        tqdm.monitor_interval = 0  # no monitor thread: children are forked with a preexec_fn
        self.todo.extend(runs)
        self.bar = tqdm(
            total=len(runs), unit="run", desc=plan.name, file=sys.stderr, disable=not progress, dynamic_ncols=True
        )

    def run(self) -> Execution:
        with forwarding_signals(lambda: [a.proc for a in self.active]) as received:
            while self.active or (self.todo and not received):
                while self.todo and self.free and not received:
                    self._start(self.todo.popleft(), self.free.pop())
                    if received:  # the signal came while this child was being started
                        self.active[-1].proc.terminate()
                time.sleep(POLL_SECONDS)
                for item in self.active:
                    self._copy_output(item)
                for item in [a for a in self.active if a.proc.poll() is not None]:
                    self.active.remove(item)
                    self.free.append(item.slot)
                    self._finish(item, stopping=bool(received))
        self.bar.close()
        self.result.interrupted = bool(received)
        return self.result

    def _start(self, run: PlannedRun, slot: Slot) -> None:
        rd = run_dir(self.sweep_dir, run.run_id)
        argv = _argv(self.plan, self.sweep_dir, run, slot)
        log_path = rd / OUTPUT_LOG
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "a")  # noqa: SIM115 - closed in _finish
        echoed = log.tell()
        log.write(f"=== {dt.datetime.now().isoformat(timespec='seconds')} slot {slot.index}: {shlex.join(argv)}\n")
        log.flush()
        env = {**os.environ, **slot.env}
        if self.fork and forkable(argv, slot.gpus):
            proc: Union[Popen, ForkedTrainer] = fork_trainer(argv, env=env, log=log_path)
        else:
            proc = start_child(argv, env=env, stdout=log)
        self.active.append(_Active(run, slot, proc, attempts.begin(rd, proc.pid), log, log_path, echoed))
        self.result.started += 1

    def _copy_output(self, item: _Active) -> None:
        if self.echo is None:
            return
        with open(item.log_path, "rb") as fh:
            fh.seek(item.echoed)
            data = fh.read()
        if data:
            item.echoed += len(data)
            self.echo.write(data)
            self.echo.flush()

    def _finish(self, item: _Active, stopping: bool) -> None:
        self._copy_output(item)
        rd = run_dir(self.sweep_dir, item.run.run_id)
        code = item.proc.returncode
        outcome = outcome_of(code, stopping=stopping)
        log = attempts.finish(rd, item.attempt_id, code, outcome.name, held_lock=outcome.had_lock)
        item.log.close()
        rid = item.run.run_id
        note = ""
        again = outcome.retry and not stopping
        if again and outcome.counts_as_failure:
            again = log.failures <= self.max_retries
            note = f", failed attempt {log.failures} of {self.max_retries + 1}" + ("" if again else ": gave up")
        elif again:
            self.requeues[rid] = self.requeues.get(rid, 0) + 1
            again = self.requeues[rid] <= MAX_PREEMPT_REQUEUES
        retrying = ", retrying" if again else ""
        self.bar.write(f"[launch] {rid}: {outcome.name} (exit {code}){note}{retrying}", file=sys.stderr)
        if again:
            self.todo.append(item.run)
            return
        self.bar.update(1)
        if self.on_done is not None and not stopping:
            for run in self.on_done(item.run):
                if wants_start(self.sweep_dir, run, self.max_retries):
                    self.todo.append(run)
                    self.bar.total += 1
            self.bar.refresh()


def execute(
    sweep_dir: Path,
    plan: SweepPlan,
    *,
    only: Optional[list[str]] = None,
    max_parallel: Optional[int] = None,
    max_retries: Optional[int] = None,
    progress: bool = True,
    on_done: Optional[Callable[[PlannedRun], Sequence[PlannedRun]]] = None,
    echo: Optional[BinaryIO] = None,
) -> Execution:
    """Run every selected run that needs work; retry failures up to ``max_retries``.

    ``on_done(run)`` is called when a run is finished for this invocation (not requeued);
    the runs it returns (already in ``plan``) are queued too. Adaptive sweeps use it to add
    points as results arrive, keeping every slot busy without stage barriers.
    ``echo``: also copy each trainer's ``output.log`` there as it grows (a SLURM array task's
    log then holds its trainer's output).
    """
    max_retries = plan.executor.max_retries if max_retries is None else max_retries
    todo = [run for run in select_runs(plan, only) if wants_start(sweep_dir, run, max_retries)]
    if not todo:
        return Execution()
    check_trainer(plan)
    return LocalExecutor(
        sweep_dir,
        plan,
        max_parallel=max_parallel or plan.executor.max_parallel,
        max_retries=max_retries,
        progress=progress,
        on_done=on_done,
        runs=todo,
        echo=echo,
    ).run()


def wants_start(sweep_dir: Path, run: PlannedRun, max_retries: int) -> bool:
    """The run needs work and no live trainer on this host holds it."""
    rd = run_dir(sweep_dir, run.run_id)
    return run_state(rd, max_retries).needs_work and not run_locked(rd)


def check_trainer(plan: SweepPlan) -> None:
    """Refuse to start when the trainer command or script is missing (every run would fail
    with python's exit 2 and be recorded as an invalid config)."""
    if not shutil.which(plan.train_cmd[0]):
        raise LaunchError(f"trainer command not found: {plan.train_cmd[0]!r} (sweep.yaml train_cmd: {plan.train_cmd})")
    script = next((a for a in plan.train_cmd[1:2] if a.endswith(".py")), None)
    if script is not None and not Path(script).is_file():
        raise LaunchError(f"trainer script not found: {script!r} (sweep.yaml train_cmd: {plan.train_cmd})")

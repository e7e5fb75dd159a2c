"""Run a sweep's pending runs on this machine, K slots at a time, until each is final or out of retries.

A slot (a GPU, or a share of the CPU cores) holds up to ``executor.runs_per_gpu`` runs. Packed
GPU runs start only when their GPU has the memory for one more (``launch.gpu_share``: the run's
estimate from ``training.footprint`` unless ``executor.gpu_memory_mib`` says), a GPU run whose
estimate alone exceeds its GPU is refused before it starts (exit 2), a run
that runs out of GPU memory beside others is started again later (its slot then takes fewer
at a time) without counting as a failure, and CUDA MPS is started for them where the node
allows it. Single-threaded on purpose: children are started from the main thread so that their
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

from jobscripts.scripts import SlurmOptions
from launch import attempts
from launch.commands import TRAIN_CMD_ENV
from launch.errors import LaunchError
from launch.gpu_share import (
    PACKING_MARGIN,
    MemoryProbe,
    Mps,
    RunMemory,
    find_gpu,
    nvidia_smi_gpus,
    run_memory,
    start_mps,
)
from launch.launchers import SHUTDOWN_TIMEOUT_ENV, Topology, grace_note, torchrun_command
from launch.outcomes import (
    DISK_FULL_ERRNOS,
    INTERRUPTED,
    MAX_PREEMPT_REQUEUES,
    NO_MEMORY,
    Outcome,
    disk_full,
    out_of_memory,
    outcome_of,
)
from launch.processes import forwarding_signals, start_child
from launch.resources import Slot, make_slots
from launch.run_configs import RunConfigs
from launch.run_state import run_state
from launch.sweep_dir import SWEEP_FILE, run_dir
from launch.sweep_plan import PlannedRun, SweepPlan
from launch.warm_start import ForkedTrainer, ForkRefused, fork_trainer, forkable
from rundir.contract import ATTEMPT_EXIT_ENV, METRICS_FILE, SUMMARY_FILE, ExitCode, Status
from rundir.files import ExitRecord, RunSummary, attempt_exit, checkpoint_steps, read_summary
from rundir.lock import run_locked

POLL_SECONDS = 0.1
OUTPUT_LOG = Path("launch") / "output.log"
MEMORY_RETRY_SECONDS = 2.0  # between free-memory queries while every slot with room lacks memory
MEMORY_SETTLE_SECONDS = 120.0  # a run counts as holding its memory after its first metrics row, or this long
AUTO_MEMORY_SHARE = 0.9  # gpu_memory_mib 0 when packing and no estimate: this fraction of the GPU / runs_per_gpu


@dataclass
class Execution:
    """What one executor invocation did (the runs' states are read from their directories)."""

    started: int = 0  # attempts started
    interrupted: bool = False  # a signal (or a full disk) stopped it; unfinished runs resume on rerun
    disk_full: str = ""  # what said the disk or quota was full, when that stopped it


@dataclass
class _Active:
    run: PlannedRun
    slot: Slot
    proc: Union[Popen, ForkedTrainer]
    attempt_id: str
    log: IO[str]
    log_path: Path
    echoed: int  # bytes of log_path already copied to the echo stream
    started: float = 0.0  # time.time() at the start
    peers: int = 0  # the most other runs that shared its slot while it ran
    metrics_bytes: int = 0  # size of its metrics.jsonl at the start: it grows with the first logged step
    log_start: int = 0  # where this attempt's part of log_path begins
    exit_file: Optional[Path] = None  # this attempt's own exit record (ATTEMPT_EXIT_ENV): a locked-out rank's 4


OUTPUT_TAIL_BYTES = 4096  # of a failed attempt's output, searched for a full disk's error


def _last_line_with_marker(text: str) -> str:
    """The last line of ``text`` that names a full disk (the OSError), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in reversed(lines) if disk_full(ln)), lines[-1] if lines else "")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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

    ``run()`` starts queued runs while a slot has room (the least loaded first; a GPU slot also
    needs the free memory of one more run), polls the running ones, and finishes each as it
    exits: its attempt is recorded, and it is requeued (a retry, a preemption, or out of
    memory beside packed runs), done, or given up. Runs that ``on_done`` adds are queued as
    they come.
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
        ex = plan.executor
        self.slots = make_slots(max_parallel, ex.gpus_per_run, runs_per_gpu=ex.runs_per_gpu)
        self.capacity = {slot.index: slot.capacity for slot in self.slots}  # lowered when a run runs out of memory
        self.slot_env = {slot.index: dict(slot.env) for slot in self.slots}
        # a stop signal's grace (SLURM sends it signal_grace_s before the time limit)
        self.grace_s = int(plan.slurm.get("signal_grace_s", SlurmOptions.signal_grace_s))
        self.grace_checked = False
        on_gpus = any(slot.gpus for slot in self.slots)
        self.memory: Optional[MemoryProbe] = (
            MemoryProbe() if on_gpus and (ex.gpu_memory_mib or ex.runs_per_gpu > 1) else None
        )
        self.next_memory_check = 0.0
        self.fits = MemoryProbe() if on_gpus and self.memory is None else None  # totals for the fit check
        self.totals: dict[int, Optional[int]] = {}  # slot -> GPU memory (MiB), read once for the fit check
        self.estimates: dict[str, Optional[RunMemory]] = {}  # run id -> its estimate (None: none could be made)
        self.estimated: dict[str, Optional[RunMemory]] = {}  # config identity -> estimate
        self.configs: dict[str, RunConfigs] = {}
        self.waiting = ""  # the last "waiting for memory" note printed
        self.mps: Optional[Mps] = None
        self.active: list[_Active] = []
        self.requeues: dict[str, int] = {}  # run id -> preemptions requeued in this invocation
        self.fork = ex.start == "fork"
        self.gpu_fork = True  # until the fork server refuses a GPU run (launch.warm_start)
        tqdm.monitor_interval = 0  # no monitor thread: children are forked with a preexec_fn
        self.todo.extend(runs)
        self.bar = tqdm(
            total=len(runs), unit="run", desc=plan.name, file=sys.stderr, disable=not progress, dynamic_ncols=True
        )
        if on_gpus and ex.runs_per_gpu > 1 and ex.mps == "auto":
            self._start_mps()

    def run(self) -> Execution:
        try:
            with forwarding_signals(lambda: [a.proc for a in self.active]) as received:
                while self.active or (self.todo and not (received or self.result.disk_full)):
                    while self.todo and not (received or self.result.disk_full):
                        slot = self._pick_slot(self.todo[0])
                        if slot is None:
                            break
                        run = self.todo.popleft()
                        if not self._on_disk(self._start, run, slot):
                            self.todo.appendleft(run)
                        if received:  # the signal came while this child was being started
                            self.active[-1].proc.terminate()
                    time.sleep(POLL_SECONDS)
                    for item in self.active:
                        self._copy_output(item)
                    for item in [a for a in self.active if a.proc.poll() is not None]:
                        self.active.remove(item)
                        if not self._on_disk(self._finish, item, stopping=bool(received or self.result.disk_full)):
                            item.log.close()  # its attempt stays open: the next one closes it as interrupted
        finally:
            if self.mps is not None:
                self.mps.stop()
        self.bar.close()
        self.result.interrupted = bool(received or self.result.disk_full)
        return self.result

    def _on_disk(self, step: Callable[..., None], *args: object, **kwargs: object) -> bool:
        """Run ``step`` (a start or a finish, which write run files); False when the disk or quota
        was full, which stops the sweep (:meth:`_stop_for_disk`)."""
        try:
            step(*args, **kwargs)
        except OSError as exc:
            if exc.errno not in DISK_FULL_ERRNOS:
                raise
            self._stop_for_disk(str(exc))
            return False
        return True

    def _stop_for_disk(self, what: str) -> None:
        """The disk or quota is full: every run started now would fail too and use up its retries,
        so nothing new starts and the running trainers are stopped (SIGTERM: each saves what it
        can and exits); their runs stay pending and resume on a rerun once there is space."""
        if self.result.disk_full:
            return
        self.result.disk_full = what
        self._note(
            f"disk full ({what}): no new runs are started and the {len(self.active)} running are stopped; "
            'completed runs are kept. Free space (docs/launch.md, "Disk use") and rerun the same command: '
            "unfinished runs resume from their last checkpoint, and these attempts do not count against max_retries"
        )
        for item in self.active:
            item.proc.terminate()

    def _note(self, text: str) -> None:
        self.bar.write(f"[launch] {text}", file=sys.stderr)

    # ---------------------------------------------------------------- placement
    def _load(self, slot: Slot) -> int:
        return sum(1 for a in self.active if a.slot.index == slot.index)

    def _pick_slot(self, run: PlannedRun) -> Optional[Slot]:
        """The least loaded slot with room for one more run (and, on a GPU, ``run``'s memory), or None."""
        open_slots = sorted(
            (s for s in self.slots if self._load(s) < self.capacity[s.index]), key=lambda s: (self._load(s), s.index)
        )
        if open_slots and open_slots[0].gpus and self.fits is not None:
            self._check_fits(run, open_slots[0])
        if not open_slots or self.memory is None or not open_slots[0].gpus:
            return open_slots[0] if open_slots else None
        if time.monotonic() < self.next_memory_check:
            return None
        for slot in open_slots:
            if self._has_memory(slot, run):
                return slot
        self.next_memory_check = time.monotonic() + MEMORY_RETRY_SECONDS
        return None

    def _estimate(self, run: PlannedRun) -> Optional[RunMemory]:
        """``run``'s memory per GPU from its config (``launch.gpu_share.run_memory``), computed once
        per distinct model, layout and batch; None (said once) where its config cannot give one."""
        if run.run_id in self.estimates:
            return self.estimates[run.run_id]
        call = self.plan.train_invocation(self.sweep_dir, run)
        estimate = None
        try:
            configs = self.configs.setdefault(call.config, RunConfigs(call.config))
            cfg = configs.load(call.overrides)
            key = repr((cfg.model, cfg.parallel, cfg.training.micro_batch_size, cfg.training.global_batch_size,
                        cfg.training.precision, cfg.optimizer.name, cfg.optimizer.sgd_momentum > 0))  # fmt: skip
            if key not in self.estimated:
                self.estimated[key] = run_memory(cfg, self.plan.executor.gpus_per_run)
            estimate = self.estimated[key]
        except (LaunchError, ValueError, OSError) as exc:
            self._note(f"{run.run_id}: no memory estimate ({str(exc).splitlines()[0][:200]}); "
                       "its GPU memory is not checked against it")  # fmt: skip
        self.estimates[run.run_id] = estimate
        return estimate

    def _check_fits(self, run: PlannedRun, slot: Slot) -> None:
        """Refuse (LaunchError, exit 2) a run whose estimate alone is more than its GPU has."""
        assert self.fits is not None
        if slot.index not in self.totals:
            read = self.fits.slot_memory(slot.gpus)
            self.totals[slot.index] = read[1] if read is not None else None
        total = self.totals[slot.index]
        estimate = self._estimate(run) if total is not None else None
        if estimate is not None and total is not None:
            estimate.refuse_above(total, f"{run.run_id}: ", ",".join(slot.gpus))

    def _has_memory(self, slot: Slot, run: PlannedRun) -> bool:
        """Free memory on the slot's GPU(s) covers ``run``, after the runs still starting there
        (their memory not yet allocated) are counted as holding what they need."""
        assert self.memory is not None
        read = self.memory.slot_memory(slot.gpus)
        if read is None:
            if self.memory.method == "none":
                self._note(self.memory.note)
                self.memory = None
            return True
        free, total = read
        if self.plan.executor.gpu_memory_mib > total:
            raise LaunchError(
                f"executor.gpu_memory_mib={self.plan.executor.gpu_memory_mib} is more than GPU "
                f"{','.join(slot.gpus)} has ({total} MiB)"
            )
        estimate = self._estimate(run)
        if estimate is not None:
            estimate.refuse_above(total, f"{run.run_id}: ", ",".join(slot.gpus))
        need, why = self._need(run, estimate, total)
        starting = [a for a in self.active if a.slot.index == slot.index and not self._settled(a)]
        if free - sum(self._need(a.run, self.estimates.get(a.run.run_id), total)[0] for a in starting) >= need:
            self.waiting = ""
            return True
        note = (
            f"waiting for GPU memory: slot {slot.index} (GPU {','.join(slot.gpus)}) has {free} MiB free"
            + (f" with {len(starting)} run(s) still starting there" if starting else "")
            + ("" if self._load(slot) else " and none of this sweep's runs (another process holds it)")
            + f"; a run needs {need} MiB ({why})"
        )
        if note != self.waiting:
            self._note(note)
            self.waiting = note
        return False

    def _need(self, run: PlannedRun, estimate: Optional[RunMemory], total: int) -> tuple[int, str]:
        """Free MiB ``run`` waits for, and where the number comes from."""
        ex = self.plan.executor
        if ex.gpu_memory_mib:
            return ex.gpu_memory_mib, "executor.gpu_memory_mib"
        if estimate is not None:
            return estimate.need_mib, f"{estimate.note()}, x {PACKING_MARGIN} when packing"
        return int(
            AUTO_MEMORY_SHARE * total / ex.runs_per_gpu
        ), f"{AUTO_MEMORY_SHARE:.0%} of the GPU / executor.runs_per_gpu"

    def _settled(self, item: _Active) -> bool:
        """The run has allocated its memory: it logged a step since it started (its metrics.jsonl
        grew: the trainer rewrites it at start-up, truncated to the checkpoint, so a newer file
        alone proves nothing), or it has run long."""
        if time.time() - item.started >= MEMORY_SETTLE_SECONDS:
            return True
        return _size(run_dir(self.sweep_dir, item.run.run_id) / METRICS_FILE) > item.metrics_bytes

    def _start_mps(self) -> None:
        """CUDA MPS for the packed GPU runs where the node allows it; the runs then name their GPUs by UUID
        (the MPS server renumbers the devices it sees, so indices would point elsewhere)."""
        listed = nvidia_smi_gpus()
        found = {g: find_gpu(g, listed) for s in self.slots for g in s.gpus} if listed else {}
        if not found or not all(found.values()):
            self.mps = Mps(False, "CUDA MPS not used: nvidia-smi does not list the slots' GPUs; packed runs time-slice")
        else:
            uuids = {s.index: ",".join(found[g].uuid for g in s.gpus) for s in self.slots}  # type: ignore[union-attr]
            probe_env = {**os.environ, **self.slot_env[0], "CUDA_VISIBLE_DEVICES": uuids[0]}
            self.mps = start_mps(self.sweep_dir, probe_env)
            if self.mps.active:
                for slot in self.slots:
                    self.slot_env[slot.index].update(self.mps.env, CUDA_VISIBLE_DEVICES=uuids[slot.index])
        self._note(self.mps.message)

    # ---------------------------------------------------------------- runs
    def _start(self, run: PlannedRun, slot: Slot) -> None:
        rd = run_dir(self.sweep_dir, run.run_id)
        argv = _argv(self.plan, self.sweep_dir, run, slot)
        metrics_bytes = _size(rd / METRICS_FILE)
        log_path = rd / OUTPUT_LOG
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "a")  # noqa: SIM115 - closed in _finish
        echoed = log.tell()
        log.write(f"=== {dt.datetime.now().isoformat(timespec='seconds')} slot {slot.index}: {shlex.join(argv)}\n")
        log.flush()
        exit_file = attempts.exit_file(rd)
        env = {**os.environ, **self.slot_env[slot.index], ATTEMPT_EXIT_ENV: str(exit_file)}
        if len(slot.gpus) > 1 and self.grace_s and SHUTDOWN_TIMEOUT_ENV not in env:
            env[SHUTDOWN_TIMEOUT_ENV] = str(self.grace_s)  # under torchrun: the ranks get the whole grace to save
            if not self.grace_checked:
                self.grace_checked = True
                if note := grace_note(self.grace_s):
                    self._note(note)
        proc: Optional[Union[Popen, ForkedTrainer]] = None
        if self.fork and forkable(argv, slot.gpus) and (self.gpu_fork or not slot.gpus):
            try:
                proc = fork_trainer(argv, env=env, log=log_path, gpu=bool(slot.gpus))
            except ForkRefused as exc:
                self.gpu_fork = False
                self._note(f"GPU runs start as new processes: {exc}")
        if proc is None:
            proc = start_child(argv, env=env, stdout=log)
        peers = [a for a in self.active if a.slot.index == slot.index]
        for other in peers:
            other.peers = max(other.peers, len(peers))
        started = time.time()
        try:
            attempt = attempts.begin(rd, proc.pid)
        except OSError:  # a trainer nothing records must not run on: stop it before the error goes up
            proc.terminate()
            proc.wait()
            log.close()
            raise
        self.active.append(
            _Active(
                run, slot, proc, attempt, log, log_path, echoed, started, len(peers), metrics_bytes, echoed, exit_file
            )
        )
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

    def _fresh_summary(self, item: _Active) -> Optional[RunSummary]:
        """The summary this attempt wrote, if it wrote one (not one left by an earlier attempt)."""
        rd = run_dir(self.sweep_dir, item.run.run_id)
        try:
            fresh = (rd / SUMMARY_FILE).stat().st_mtime >= item.started
        except OSError:
            fresh = False
        return read_summary(rd) if fresh else None

    def _ending(self, item: _Active) -> ExitRecord:
        """The trainer's exit code, and the reason it wrote. torchrun (a run on several GPUs)
        exits 1 whatever its ranks exited with, so there the code the trainer wrote during this
        attempt is its own (this attempt's own file of a rank locked out of the run directory,
        else ``exit.json`` of a rank that refused, else rank 0's summary): a preemption (75) must
        not count as a failure, nor a bad config (2) be retried, nor a run another live process
        owns (4) use up a retry and be given up while its owner may still be preempted. A trainer
        killed by a signal (``-N``) after it wrote this attempt's summary was killed in its
        teardown (interpreter exit takes seconds with torch): the run ended as that summary
        says (docs/contracts.md: summary.json is the run's record), so its code is the one."""
        code = item.proc.returncode
        written = attempt_exit(run_dir(self.sweep_dir, item.run.run_id), item.started, item.exit_file) if code else None
        if item.exit_file is not None:
            item.exit_file.unlink(missing_ok=True)
        if written is not None and (len(item.slot.gpus) > 1 or code < 0 or written.exit_code == code):
            return written
        return ExitRecord(code)

    def _outcome(self, item: _Active, code: int, stopping: bool) -> Outcome:
        """What the attempt's exit code says, except that a crash for lack of GPU memory while
        other runs shared the GPU is the packing's doing, not the run's (its slot then takes
        as many runs as it held beside the crashed one, at least one)."""
        outcome = outcome_of(code, stopping=stopping)
        if outcome.status == Status.FAILED and self._ran_out_of_disk(item):
            return INTERRUPTED
        if outcome.status != Status.FAILED or code != ExitCode.FAILED or not item.slot.gpus or not item.peers:
            return outcome
        summary = self._fresh_summary(item)
        if summary is None or not out_of_memory(summary.reason):
            return outcome
        index = item.slot.index
        self.capacity[index] = max(1, min(self.capacity[index], item.peers))
        self._note(
            f"{item.run.run_id} ran out of GPU memory beside {item.peers} other run(s) on slot {index} "
            f"(GPU {','.join(item.slot.gpus)}): at most {self.capacity[index]} at a time there from now on"
        )
        return NO_MEMORY

    def _ran_out_of_disk(self, item: _Active) -> bool:
        """The failed attempt's summary reason, or the end of its output, says the disk or quota
        was full (then the sweep stops: :meth:`_stop_for_disk`)."""
        summary = self._fresh_summary(item)
        reason = summary.reason if summary is not None else None
        if not disk_full(reason):
            try:
                with open(item.log_path, "rb") as fh:
                    fh.seek(max(item.log_start, fh.seek(0, os.SEEK_END) - OUTPUT_TAIL_BYTES))
                    reason = fh.read().decode("utf-8", "replace")
            except OSError:
                return False
            if not disk_full(reason):
                return False
        self._stop_for_disk(f"{item.run.run_id}: {_last_line_with_marker(reason)}")
        return True

    def _finish(self, item: _Active, stopping: bool) -> None:
        self._copy_output(item)
        rd = run_dir(self.sweep_dir, item.run.run_id)
        ending = self._ending(item)
        code = ending.exit_code
        outcome = self._outcome(item, code, stopping)
        log = attempts.finish(rd, item.attempt_id, code, outcome.name, held_lock=outcome.had_lock, reason=ending.reason)
        item.log.close()
        rid = item.run.run_id
        note = ""
        again = outcome.retry and not stopping
        if again and outcome.counts_as_failure:
            again = log.failures <= self.max_retries
            note = f", failed attempt {log.failures} of {self.max_retries + 1}" + ("" if again else ": gave up")
        elif again and outcome is not NO_MEMORY:  # out of memory: bounded by the slot's shrinking capacity
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
    check_sources(sweep_dir, plan, todo)
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


def check_sources(sweep_dir: Path, plan: SweepPlan, runs: Sequence[PlannedRun]) -> None:
    """Refuse to start when a run that starts from another run's checkpoint (none of its own yet)
    would not find it (every such run would exit 2 at its start and count as a failed attempt)."""
    fresh = [run for run in runs if not checkpoint_steps(run_dir(sweep_dir, run.run_id))]
    if missing := plan.missing_sources(sweep_dir, fresh):
        raise LaunchError(
            f"{sweep_dir / SWEEP_FILE}: checkpoint.init_from of {len(missing)} run(s) not found:\n  "
            + "\n  ".join(missing[:5])
            + (f"\n  ... and {len(missing) - 5} more" if len(missing) > 5 else "")
            + "\nthe sweep directory moved without its source sweep (keep them side by side as when it was "
            "expanded), or it was expanded with absolute source paths (before this version) at another place: "
            f"re-expand it with `python -m launch sweep SPEC --sweep-dir {sweep_dir}` where the spec's runs_of "
            "finds the source sweep (its runs keep their IDs: nothing finished runs again)"
        )


def check_trainer(plan: SweepPlan) -> None:
    """Refuse to start when the trainer command or script is missing (every run would fail
    with python's exit 2 and be recorded as an invalid config)."""
    argv = plan.trainer()
    if plan.trainer_is_given():  # the user's, kept as given: say where it comes from and how to change it
        where = (
            f"sweep.yaml train_cmd: {argv}, given when the sweep was expanded (the spec's train_cmd, "
            "--train-cmd or $DEPTHMUP_TRAIN_CMD); set `train_cmd: null` in sweep.yaml for this checkout's "
            "train_gpt.py, or expand it again: `launch sweep SPEC --sweep-dir DIR [--train-cmd CMD]`"
        )
    else:
        where = f"this checkout's trainer, or ${TRAIN_CMD_ENV}: {argv}"
    if not shutil.which(argv[0]):
        raise LaunchError(f"trainer command not found: {argv[0]!r} ({where})")
    script = next((a for a in argv[1:2] if a.endswith(".py")), None)
    if script is not None and not Path(script).is_file():
        raise LaunchError(f"trainer script not found: {script!r} ({where})")

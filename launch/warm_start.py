"""Start trainers by forking a process that has already imported them (``executor.start: fork``).

Importing torch and megatron-core takes about 6 s per process on this project's 2-core
machines, as long as training a depth-2 model of the CPU demo: a sweep of a hundred short
runs spends a fifth of its wall time importing. With ``start: fork`` the local executor
starts one *fork server* (``python -m launch.warm_start``, exec'd clean), which imports the
trainer once and forks one child per run; the child calls ``train_gpt.main(args)`` exactly as
``python train_gpt.py args`` would. Only runs of the in-tree trainer on at most one GPU are
forked (any other trainer command, and torchrun's multi-GPU runs, are exec'd as before).

GPU runs: CUDA does not survive a fork, so the server must never initialise it. It imports
with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` (torch's own switch that makes
``torch.cuda.is_available()`` ask NVML instead of initialising the driver, for exactly this
purpose), checks afterwards that torch has not initialised CUDA, and before the first GPU run
forks a probe child that initialises CUDA and allocates on the GPU. Each child sets its run's
environment (``CUDA_VISIBLE_DEVICES``, MPS) before anything touches CUDA, so it initialises
CUDA itself, on its own GPU. If any check fails, the server refuses GPU runs
(:class:`ForkRefused`, with the reason) and the executor starts them as new processes.
``DEPTHMUP_GPU_FORK=off`` (in the executor's environment) never forks GPU runs; ``on`` skips the
probe (the check that the server has not initialised CUDA stays).

Why a separate server rather than forking the executor: a process that has run a torch
operation owns an OpenMP thread pool, and a child forked from it hangs at its first parallel
region (libgomp is not fork-safe). The executor may be any process (a test session, a
notebook) that has; the server never runs a torch operation and has no other threads. It is
not ``multiprocessing``'s forkserver because that one is shared by the whole process
(data_prep's workers preload other modules into it) and its children hold it alive.

Lifetimes: the server gets SIGKILL when the executor dies (``PR_SET_PDEATHSIG``) and each
trainer gets SIGTERM when the server dies, so a SIGKILLed executor still leaves every trainer
to checkpoint and exit 75. The server ignores SIGTERM and SIGINT: sent to the whole process
group (``timeout``, Ctrl-C, a batch system's time limit) they are for the trainers, whose exit
75 the server must live to report. The server reaps its children and reports
their exit codes; :class:`ForkedTrainer` offers the part of ``subprocess.Popen`` that the
executor uses (``pid``, ``poll``, ``wait``, ``returncode``, ``send_signal``, ``terminate``).

Protocol (one JSON object per line): the executor writes ``{"argv", "env", "log", "cwd",
"gpu"}`` (or ``{"status": true}``); the server answers ``{"started": pid}`` or ``{"refused":
why}`` to each request in order (``{"status": {...}}`` to a status request), and ``{"exited":
pid, "code": c}`` when a child ends (``c`` as ``Popen.returncode``: ``-N`` for signal N).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Optional

from launch.commands import DEFAULT_TRAINER_SCRIPT
from launch.errors import LaunchError
from launch.processes import FORWARDED_SIGNALS, die_with_parent, with_repo_on_path
from rundir.contract import ExitCode

START_METHODS = ("exec", "fork")
REAP_SECONDS = 0.05  # how often the server looks for ended children between requests
GPU_FORK_ENV = "DEPTHMUP_GPU_FORK"  # auto (probe) | on (no probe) | off (never fork GPU runs)
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"


class ForkRefused(LaunchError):
    """The fork server will not start this run (a GPU run where forking is not safe)."""


def forkable(argv: Sequence[str], gpus: Sequence[str]) -> bool:
    """True for ``[this python, <repo>/train_gpt.py, ...]`` on a slot of at most one GPU."""
    return (
        len(gpus) <= 1
        and len(argv) >= 2
        and Path(argv[0]).resolve() == Path(sys.executable).resolve()
        and Path(argv[1]).resolve() == DEFAULT_TRAINER_SCRIPT
    )


# What a CPU trainer imports before its first step; the trainer imports most of it lazily
# (inside functions), so naming train_gpt alone would leave megatron-core to every child.
PRELOAD_MODULES = (
    "train_gpt",
    "training.runner",
    "training.session",
    "training.backends",
    "training.checkpoint",
    "training.data",
    "training.distributed",
    "training.flops",
    "training.metrics",
    "training.model",
    "training.optim",
    "patches",
    "patches.table",
    "data_prep.tokenizer",
    "megatron.core",
    "megatron.core.distributed",
    "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.optimizer",
    "megatron.core.pipeline_parallel.schedules",
)


def preload() -> None:
    """Import what every trainer process imports. Idempotent: imports are cached."""
    import warnings

    with warnings.catch_warnings():  # the children's own filters (train_gpt.main) hide these too
        warnings.filterwarnings("ignore", message=".*(Apex|Transformer Engine).*not installed.*")
        for name in PRELOAD_MODULES:
            importlib.import_module(name)


# ----------------------------------------------------------------------------- executor side


class ForkServer:
    """The executor's handle on one running server (started by :meth:`start`)."""

    def __init__(self) -> None:
        self.proc: Optional[subprocess.Popen] = None
        self._buffer = b""
        self.exit_codes: dict[int, int] = {}

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        repo = DEFAULT_TRAINER_SCRIPT.parent
        env = with_repo_on_path(repo, os.environ)
        env[NVML_CHECK_ENV] = "1"  # the server's imports must not initialise CUDA (children set their own env)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "launch.warm_start"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=repo,
            # SIGKILL, not SIGTERM: a SIGTERM is for the trainers (the server outlives it, below)
            preexec_fn=die_with_parent(os.getpid(), signal.SIGKILL),
        )
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._buffer = b""

    def fork(
        self, argv: Sequence[str], *, env: Mapping[str, str], log: Path, cwd: Optional[Path] = None, gpu: bool = False
    ) -> int:
        """Ask the server for a child running ``argv``; returns its pid once it exists.
        Raises :class:`ForkRefused` when the server will not fork a GPU run (``gpu``)."""
        request = {"argv": list(argv), "env": dict(env), "log": str(log), "cwd": str(cwd or Path.cwd()), "gpu": gpu}
        message = self._ask(request, ("started", "refused"))
        if "refused" in message:
            raise ForkRefused(message["refused"])
        return int(message["started"])

    def status(self) -> dict:
        """The server's own state: whether it initialised CUDA, and what it says of GPU forks."""
        return self._ask({"status": True}, ("status",))["status"]

    def _ask(self, request: dict, answers: tuple[str, ...]) -> dict:
        if not self.running():
            self.start()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise LaunchError(f"the trainer fork server (pid {self.proc.pid}) is gone: {exc}") from exc
        while True:
            for message in self._read(block=True):
                if any(a in message for a in answers):
                    return message

    def poll(self) -> None:
        """Record the exit codes the server has reported so far (never blocks)."""
        for _ in self._read(block=False):
            pass

    def _read(self, block: bool) -> list[dict]:
        messages = []
        fd = self.proc.stdout.fileno()
        while True:
            if block and not messages:
                ready, _, _ = select.select([fd], [], [], 1.0)
                if not ready:
                    if self.proc.poll() is not None:
                        raise LaunchError(f"the trainer fork server exited with {self.proc.returncode}")
                    continue
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = None
            if chunk == b"" and not messages and block:
                raise LaunchError(f"the trainer fork server closed its output (exit {self.proc.wait()})")
            if not chunk:
                break
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                if "exited" in message:
                    self.exit_codes[int(message["exited"])] = int(message["code"])
                messages.append(message)
        return messages

    def close(self) -> None:
        """End the server: it exits on end of input (its running children get SIGTERM)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ForkedTrainer:
    """A trainer forked by the server; polled through the server's exit reports like a Popen."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.server.poll()
            self.returncode = self.server.exit_codes.pop(self.pid, None)
            if self.returncode is None and not self.server.running():
                self.server.poll()  # the server's last reports
                self.returncode = self.server.exit_codes.pop(self.pid, -int(signal.SIGKILL))
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"forked trainer {self.pid} still running after {timeout} s")
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


_SERVER = ForkServer()
atexit.register(_SERVER.close)


def fork_trainer(
    argv: Sequence[str], *, env: Mapping[str, str], log: Path, cwd: Optional[Path] = None, gpu: bool = False
) -> ForkedTrainer:
    """Run ``train_gpt.main(argv[2:])`` in a child of this process's fork server (started on
    first use), with ``env``, in ``cwd``, stdout and stderr appended to ``log``. ``gpu``: the
    run uses a GPU; raises :class:`ForkRefused` where the server cannot fork one safely."""
    pid = _SERVER.fork(argv, env=env, log=log, cwd=cwd, gpu=gpu)
    return ForkedTrainer(_SERVER, pid)


# ----------------------------------------------------------------------------- server side


def _child(request: dict, server_pid: int, protocol_fds: Sequence[int]) -> None:
    """Runs in the forked child; never returns."""
    code = 1
    try:
        die_with_parent(server_pid)()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in FORWARDED_SIGNALS:
            if sig != signal.SIGINT:
                signal.signal(sig, signal.SIG_DFL)
        for fd in protocol_fds:
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        sys.stdout = sys.__stdout__ = open(1, "w", buffering=1, closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = request["argv"]
        sys.argv = list(argv[1:])
        import train_gpt

        code = train_gpt.main(list(argv[2:]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - report like an uncaught exception in a fresh process
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def cuda_initialized() -> bool:
    """Whether torch has initialised CUDA in this process (then no child may use CUDA)."""
    import torch

    return bool(torch.cuda.is_initialized())


def _probe_child() -> None:
    """Runs in a forked child: initialise CUDA and allocate on the GPU; exit 0 when that works."""
    code = 1
    try:
        import torch

        torch.cuda.init()
        torch.zeros(1, device="cuda").add_(1).item()
        code = 0
    except BaseException as exc:  # noqa: BLE001 - the reason goes back to the server, on fd 2
        os.write(2, f"{type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(code)


def gpu_fork_check(probe_env: Mapping[str, str]) -> Optional[str]:
    """None when a GPU run may be forked from this process, else why not (server side).
    ``probe_env``: the run's environment, whose ``DEPTHMUP_GPU_FORK`` is the setting."""
    setting = probe_env.get(GPU_FORK_ENV, "auto")
    if setting == "off":
        return f"{GPU_FORK_ENV}=off"
    if setting not in ("on", "auto"):
        return f"{GPU_FORK_ENV}={setting!r} is not one of auto, on, off"
    if cuda_initialized():
        return "the fork server's imports initialised CUDA"
    if setting == "on":
        return None
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 2)
        os.environ.clear()
        os.environ.update(probe_env)
        _probe_child()
    os.close(write)
    with os.fdopen(read, errors="replace") as fh:
        said = fh.read().strip()
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        return f"a forked child could not use CUDA ({said.splitlines()[-1] if said else f'exit {code}'})"
    return None


def serve() -> ExitCode:
    """The server: preload, then fork a child per request line until end of input."""
    requests = os.dup(0)
    replies = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a stray print in an imported module must not corrupt the protocol
    os.close(devnull)
    # A terminal's Ctrl-C, or a SIGTERM to the whole process group (`timeout`, a batch system's
    # time limit), reaches the trainers directly: they checkpoint and exit 75, and the server must
    # live on to report that (dead, its children would read as killed). It ends at end of input,
    # or by SIGKILL when the executor dies; its children get SIGTERM then (their parent-death signal).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    os.environ.setdefault(NVML_CHECK_ENV, "1")  # before torch is imported: is_available() must not init CUDA
    preload()
    children: set[int] = set()
    buffer = b""
    gpu_checks: dict[str, Optional[str]] = {}  # DEPTHMUP_GPU_FORK setting -> refusal (None: GPU forks are safe)

    def reply(message: dict) -> None:
        os.write(replies, (json.dumps(message) + "\n").encode())

    def reap() -> None:
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return
            children.discard(pid)
            reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    while True:
        ready, _, _ = select.select([requests], [], [], REAP_SECONDS)
        if ready:
            chunk = os.read(requests, 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                request = json.loads(line)
                if request.get("status"):
                    state = {"cuda_initialized": cuda_initialized(), NVML_CHECK_ENV: os.environ.get(NVML_CHECK_ENV)}
                    reply({"status": {**state, "gpu_checks": gpu_checks}})
                    continue
                if request.get("gpu"):
                    setting = request["env"].get(GPU_FORK_ENV, "auto")
                    if setting not in gpu_checks:
                        gpu_checks[setting] = gpu_fork_check(request["env"])
                    refusal = gpu_checks[setting] or (
                        "the fork server initialised CUDA" if cuda_initialized() else None
                    )
                    if refusal is not None:
                        reply({"refused": refusal})
                        continue
                sys.stdout.flush()
                sys.stderr.flush()
                server_pid = os.getpid()
                pid = os.fork()
                if pid == 0:
                    _child(request, server_pid, (requests, replies))
                children.add(pid)
                reply({"started": pid})
        reap()
    return ExitCode.OK  # end of input: exiting sends the running children SIGTERM (their parent-death signal)


if __name__ == "__main__":
    sys.exit(serve())

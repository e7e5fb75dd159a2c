"""Several runs on one GPU: free memory before a start, and CUDA MPS when it can be had.

Both are read from outside the launcher's own process: ``nvidia-smi`` (or, without it,
``torch.cuda.mem_get_info`` in a short-lived subprocess), so the launcher never holds a CUDA
context (it would cost the GPU memory of one run and break the fork server's children).

MPS (the Multi-Process Service) lets the kernels of several processes run on one GPU at
once instead of taking turns. Whether a node allows it varies (compute mode, containers,
permissions), so it is detected, never required: :func:`start_mps` starts a control daemon
(``nvidia-cuda-mps-control -d``) whose pipe and log directories live in the sweep directory,
checks that a CUDA client gets an MPS server through it, and otherwise stops it again and
says why; packed runs then share the GPU by time-slicing, as they would without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

MPS_CONTROL = "nvidia-cuda-mps-control"
QUERY_TIMEOUT_S = 20.0
# A unix socket path holds at most 107 bytes; MPS puts its sockets in the pipe directory.
MAX_PIPE_DIR_CHARS = 80


@dataclass(frozen=True)
class GpuMemory:
    """One GPU as ``nvidia-smi`` lists it (memory in MiB)."""

    index: str
    uuid: str
    free_mib: int
    total_mib: int


def _run(argv: Sequence[str], *, env: Optional[Mapping[str, str]] = None, stdin: Optional[str] = None,
         timeout: float = QUERY_TIMEOUT_S) -> tuple[int, str]:  # fmt: skip
    """(exit code, stdout + stderr); 127 when the program is missing, 124 on timeout."""
    try:
        proc = subprocess.run(
            list(argv), input=stdin, capture_output=True, text=True, env=dict(env) if env else None, timeout=timeout
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]}: no answer in {timeout:.0f} s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def nvidia_smi_gpus() -> Optional[list[GpuMemory]]:
    """Every GPU ``nvidia-smi`` sees, or None without a working ``nvidia-smi``."""
    if not shutil.which("nvidia-smi"):
        return None
    code, out = _run(["nvidia-smi", "--query-gpu=index,uuid,memory.free,memory.total", "--format=csv,noheader,nounits"])
    if code != 0:
        return None
    gpus = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            gpus.append(GpuMemory(parts[0], parts[1], int(float(parts[2])), int(float(parts[3]))))
        except ValueError:
            continue
    return gpus or None


def find_gpu(gpu_id: str, gpus: Sequence[GpuMemory]) -> Optional[GpuMemory]:
    """The listed GPU a ``CUDA_VISIBLE_DEVICES`` entry names: by index, or by UUID (or its prefix)."""
    for gpu in gpus:
        if gpu_id == gpu.index or (gpu_id.startswith("GPU-") and gpu.uuid.startswith(gpu_id)):
            return gpu
    return None


_TORCH_QUERY = "import torch; f, t = torch.cuda.mem_get_info(0); print(f >> 20, t >> 20)"


def torch_memory(gpu_id: str) -> Optional[tuple[int, int]]:
    """(free, total) MiB of one GPU from ``torch.cuda.mem_get_info`` in a subprocess (its CUDA
    context ends with it), or None where that fails (no CUDA)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu_id}
    code, out = _run([sys.executable, "-c", _TORCH_QUERY], env=env, timeout=120)
    try:
        free, total = (int(x) for x in out.splitlines()[-1].split())
    except (ValueError, IndexError):
        return None
    return (free, total) if code == 0 else None


@dataclass
class MemoryProbe:
    """Free memory of a slot's GPUs; ``nvidia-smi`` first, else torch in a subprocess, else
    nothing (``method`` "none": starts are not memory-checked, and ``note`` says why)."""

    method: Optional[str] = None  # nvidia-smi | torch | none, fixed by the first query
    note: str = ""

    def slot_memory(self, gpu_ids: Sequence[str]) -> Optional[tuple[int, int]]:
        """(free, total) MiB of the fullest GPU of the slot, or None when it cannot be read."""
        if self.method in (None, "nvidia-smi"):
            listed = nvidia_smi_gpus()
            if listed is not None:
                found = [find_gpu(g, listed) for g in gpu_ids]
                if all(found):
                    self.method = "nvidia-smi"
                    worst = min(found, key=lambda g: g.free_mib)  # type: ignore[union-attr]
                    return worst.free_mib, worst.total_mib  # type: ignore[union-attr]
            if self.method == "nvidia-smi":
                return None  # a transient failure: the next query tries again
        if self.method in (None, "torch"):
            read = [torch_memory(g) for g in gpu_ids]
            if all(r is not None for r in read):
                self.method = "torch"
                return min(read)  # type: ignore[type-var, return-value]
            if self.method == "torch":
                return None
        self.method = "none"
        self.note = (
            f"GPU memory is not checked before starts: neither nvidia-smi nor torch.cuda.mem_get_info "
            f"(in a subprocess) could read GPU(s) {','.join(gpu_ids)}"
        )
        return None


# ----------------------------------------------------------------------------- MPS


@dataclass
class Mps:
    """The MPS state of one executor invocation: ``env`` goes into every packed run's environment."""

    active: bool
    message: str
    env: dict[str, str] = field(default_factory=dict)
    control: Optional[str] = None  # the control program, while this invocation owns a daemon

    def stop(self) -> None:
        """Quit the daemon this invocation started (its servers end once their clients have)."""
        if self.control is not None:
            _run([self.control], env={**os.environ, **self.env}, stdin="quit\n")
            self.control = None


def mps_dirs(sweep_dir: Path) -> tuple[Path, Path]:
    """The daemon's pipe and log directories: under the sweep directory, or, when that path is
    too long for the daemon's unix sockets, under the temporary directory (named by its hash)."""
    base = sweep_dir.resolve() / "mps"
    pipe, logs = base / "pipe", base / "log"
    if len(str(pipe)) > MAX_PIPE_DIR_CHARS:
        digest = hashlib.sha256(str(base).encode()).hexdigest()[:12]
        pipe = Path(tempfile.gettempdir()) / f"depthmup-mps-{digest}"
    return pipe, logs


def probe_client(env: Mapping[str, str]) -> Optional[str]:
    """Create a CUDA context and allocate 1 MiB in a subprocess (the driver API through
    ctypes: no torch import); None on success, else what failed."""
    code, out = _run([sys.executable, "-c", _CUDA_PROBE], env=env, timeout=120)
    return None if code == 0 else (out.splitlines()[-1] if out else f"exit {code}")


_CUDA_PROBE = """
import ctypes, sys
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as exc:
    sys.exit(f"no CUDA driver: {exc}")
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
for name, call in (("cuInit", lambda: cuda.cuInit(0)), ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(dev), 0)),
                   ("cuCtxCreate", lambda: cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)),
                   ("cuMemAlloc", lambda: cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 20))):
    err = call()
    if err:
        sys.exit(f"{name} returned CUDA error {err}")
cuda.cuMemFree_v2(ptr)
cuda.cuCtxDestroy_v2(ctx)
"""


def _log_tail(logs: Path) -> str:
    path = logs / "control.log"
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return f"; {path.name}: {' | '.join(lines[-3:])}" if lines else ""


def start_mps(sweep_dir: Path, client_env: Mapping[str, str]) -> Mps:
    """Start (or reuse) an MPS control daemon for this sweep and check that a client gets a
    server through it; ``client_env``: a packed run's environment (its GPU pinned), for the check.

    Never raises: a node without MPS gives ``Mps(active=False, message=why)``.
    """
    control = shutil.which(MPS_CONTROL)
    if control is None:
        return Mps(False, f"CUDA MPS not used: {MPS_CONTROL} is not on PATH; packed runs time-slice the GPU")
    pipe, logs = mps_dirs(sweep_dir)
    try:
        pipe.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return Mps(False, f"CUDA MPS not used: cannot make its directories ({exc}); packed runs time-slice the GPU")
    mps_env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(logs)}
    env = {**os.environ, **mps_env}
    reused = _run([control], env=env, stdin="get_server_list\n", timeout=10)[0] == 0
    if not reused:
        code, out = _run([control, "-d"], env=env)
        if code != 0:
            why = out or f"exit {code}"
            return Mps(False, f"CUDA MPS not used: `{MPS_CONTROL} -d` failed ({why}){_log_tail(logs)}; "
                              "packed runs time-slice the GPU")  # fmt: skip
    mps = Mps(True, "", dict(mps_env), control)
    problem = probe_client({**client_env, **mps_env})
    if problem is None:
        code, servers = _run([control], env=env, stdin="get_server_list\n", timeout=10)
        if code != 0 or not servers.strip():
            problem = "the daemon started no MPS server for a CUDA client"
    if problem is not None:
        mps.stop()
        return Mps(False, f"CUDA MPS not used: daemon in {pipe} but {problem}{_log_tail(logs)}; "
                          "packed runs time-slice the GPU")  # fmt: skip
    mps.message = f"CUDA MPS on: {'reusing the' if reused else 'started a'} control daemon (pipe {pipe}, logs {logs})"
    return mps


# ----------------------------------------------------------------------------- a run's memory

PACKING_MARGIN = 1.1  # on the estimate when packing: the caching allocator's fragmentation, workspaces


@dataclass(frozen=True)
class RunMemory:
    """What one run of a config needs on each of its GPUs (``training.footprint``'s estimate)."""

    peak_mib: int  # model states + activations of the largest pipeline stage
    states_mib: int
    activations_mib: int
    context_mib: int  # the CUDA context's allowance (training.footprint.CUDA_CONTEXT_MIB)
    micro_batch: int
    recompute: str

    @property
    def estimate_mib(self) -> int:
        """One run's memory on each GPU: the estimate and its CUDA context."""
        return self.peak_mib + self.context_mib

    def exceeds(self, total_mib: int) -> bool:
        """Whether one run alone needs more than a GPU of ``total_mib`` has."""
        return self.estimate_mib > total_mib

    @property
    def need_mib(self) -> int:
        """Free memory a packed run waits for: the estimate with a margin, and its CUDA context."""
        return int(PACKING_MARGIN * self.peak_mib) + 1 + self.context_mib

    def note(self) -> str:
        return (
            f"estimated {self.estimate_mib} MiB per GPU: model states {self.states_mib} + activations "
            f"{self.activations_mib} + CUDA context {self.context_mib} MiB (training.footprint; python -m training.show)"
        )

    def refuse_above(self, total_mib: int, where: str, gpu: str) -> None:
        """:class:`LaunchError` naming the keys when the estimate alone exceeds the GPU."""
        from launch.errors import LaunchError

        if self.exceeds(total_mib):
            raise LaunchError(
                f"{where}training.micro_batch_size={self.micro_batch} (model.recompute={self.recompute}): "
                f"{self.note()} is more than GPU {gpu} has ({total_mib} MiB); lower training.micro_batch_size "
                "or set model.recompute"
            )


def run_memory(cfg: object, gpus: int) -> RunMemory:
    """The estimate for one run of ``cfg`` (a ``RunConfig``) on ``gpus`` GPUs."""
    from training.footprint import CUDA_CONTEXT_MIB, MIB, config_peak

    stage = config_peak(cfg, gpus)  # type: ignore[arg-type]
    model = cfg.model  # type: ignore[attr-defined]
    return RunMemory(
        -(-stage.peak // MIB), -(-stage.model_states // MIB), -(-stage.activations_peak // MIB), CUDA_CONTEXT_MIB,
        cfg.training.micro_batch_size, model.recompute,  # type: ignore[attr-defined]
    )  # fmt: skip

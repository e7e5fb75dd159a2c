"""Launcher command lines (torchrun, DeepSpeed, srun) around the one train argv.

Every launcher runs the trainer argv from :class:`launch.commands.TrainInvocation` unchanged:
torchrun with ``--no-python`` and DeepSpeed with ``--no_python --no_local_rank`` execute it
as given (interpreter included), so rank information reaches ``train_gpt.py`` through the
environment only (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from jobscripts.shell import Raw, Token, Word
from launch.errors import LaunchError

DEFAULT_MASTER_PORT = 29500

# torchrun as this interpreter's module (the `torchrun` script only wraps it): a batch job's
# PATH lacks the environment's bin/ unless the job activates it, so no launcher may rely on PATH.
TORCHRUN: tuple[str, ...] = (sys.executable, "-m", "torch.distributed.run")

# torchrun forwards a SIGTERM to its ranks and kills them this many seconds later (30 by
# default): a job's ranks need its whole grace to finish the step and save a checkpoint.
# torch >= 2.12 reads the variable; older releases ignore it (:func:`torchrun_honours_grace`).
SHUTDOWN_TIMEOUT_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
TORCHRUN_DEFAULT_SHUTDOWN_S = 30

# srun mode: the torch.distributed variable each SLURM task variable becomes (one task per GPU).
SLURM_TO_TORCH_ENV: dict[str, str] = {
    "RANK": "SLURM_PROCID",
    "WORLD_SIZE": "SLURM_NTASKS",
    "LOCAL_RANK": "SLURM_LOCALID",
}

DEEPSPEED_BACKENDS = ("pdsh", "openmpi", "mvapich", "mpich", "impi", "slurm")


@dataclass(frozen=True)
class Topology:
    """Where the processes of one job go."""

    nodes: int = 1
    procs_per_node: int = 1
    master_addr: Optional[Token] = None  # host of the first node (rendezvous / MASTER_ADDR)
    master_port: int = DEFAULT_MASTER_PORT
    rdzv_id: Token = "depthmup"

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise LaunchError(f"--nodes: must be >= 1, got {self.nodes}")
        if self.procs_per_node < 1:
            raise LaunchError(f"processes per node: must be >= 1, got {self.procs_per_node}")
        if not 0 < self.master_port < 65536:
            raise LaunchError(f"--master-port: must be in 1..65535, got {self.master_port}")


def torchrun_command(topo: Topology, train_argv: Sequence[str]) -> list[Token]:
    """:data:`TORCHRUN` with a c10d rendezvous (``--standalone`` on one node without a master address)."""
    cmd: list[Token] = [*TORCHRUN]
    if topo.nodes == 1 and topo.master_addr is None:
        cmd += ["--standalone", "--nnodes=1", f"--nproc-per-node={topo.procs_per_node}"]
    else:
        if topo.master_addr is None:
            raise LaunchError(
                f"torchrun on {topo.nodes} nodes needs --master-addr: the host of the first node, "
                "where the c10d rendezvous runs (run the same command on every node)"
            )
        cmd += [
            f"--nnodes={topo.nodes}",
            f"--nproc-per-node={topo.procs_per_node}",
            "--rdzv-backend=c10d",
            Word(("--rdzv-endpoint=", topo.master_addr, f":{topo.master_port}")),
            Word(("--rdzv-id=", topo.rdzv_id)),
        ]
    return [*cmd, "--no-python", *train_argv]


def pdsh_escape(arg: str) -> str:
    """``arg`` prepared for DeepSpeed's pdsh runner, so that the remote shell yields ``arg`` again.

    The runner joins the command into one remote shell line: an argument holding a space is
    wrapped in double quotes (its double quotes escaped), any other is passed bare. So inside
    the double quotes we escape what the shell still expands there (backslash, dollar,
    backtick), and a bare argument gets shell-quoted.
    """
    if " " in arg:
        return re.sub(r"([\\$`])", r"\\\1", arg)
    return shlex.quote(arg)


def deepspeed_command(
    topo: Topology,
    train_argv: Sequence[str],
    hostfile: Optional[str] = None,
    backend: str = "pdsh",
    hostfile_hosts: int = 0,
) -> list[Token]:
    """The DeepSpeed launcher; ``--no_local_rank`` so the trainer sees the same argv as everywhere.

    Multi-node with pdsh: the train argv is pre-escaped (:func:`pdsh_escape`), which needs the
    run to really go through pdsh, i.e. ``hostfile_hosts >= topo.nodes``.
    """
    if backend not in DEEPSPEED_BACKENDS:
        raise LaunchError(f"--deepspeed-launcher: must be one of {list(DEEPSPEED_BACKENDS)}, got {backend!r}")
    cmd: list[Token] = ["deepspeed"]
    if hostfile:
        if hostfile_hosts < topo.nodes:
            raise LaunchError(f"--hostfile {hostfile}: lists {hostfile_hosts} host(s), --nodes asks for {topo.nodes}")
        cmd += ["--hostfile", hostfile, f"--num_nodes={topo.nodes}"]
    elif topo.nodes > 1:
        raise LaunchError(f"deepspeed on {topo.nodes} nodes needs --hostfile (lines 'host slots=N')")
    cmd.append(f"--num_gpus={topo.procs_per_node}")
    if topo.master_addr is not None:
        cmd.append(Word(("--master_addr=", topo.master_addr)))
    cmd.append(f"--master_port={topo.master_port}")
    if backend != "pdsh":
        cmd.append(f"--launcher={backend}")
    if topo.nodes > 1 and backend == "pdsh":
        train_argv = [shlex.quote(train_argv[0]), *(pdsh_escape(a) for a in train_argv[1:])]
    return [*cmd, "--no_local_rank", "--no_python", *train_argv]


def srun_per_gpu_command(topo: Topology, train_argv: Sequence[str]) -> list[Token]:
    """``srun`` with one task per GPU, each mapping its SLURM variables to torch.distributed's."""
    exports = " ".join(f'{torch_var}="${slurm_var}"' for torch_var, slurm_var in SLURM_TO_TORCH_ENV.items())
    mapping = f'export {exports} LOCAL_WORLD_SIZE={topo.procs_per_node}; exec "$@"'
    return ["srun", "--kill-on-bad-exit=1", "bash", "-c", mapping, "bash", *train_argv]


def srun_torchrun_command(topo: Topology, train_argv: Sequence[str]) -> list[Token]:
    """``srun`` with one task per node, each a torchrun joining the c10d rendezvous on the first node."""
    per_node = Topology(topo.nodes, topo.procs_per_node, Raw('"$head_node"'), topo.master_port, Raw('"$SLURM_JOB_ID"'))
    return ["srun", "--kill-on-bad-exit=1", "--ntasks-per-node=1", *torchrun_command(per_node, train_argv)]


def torchrun_honours_grace() -> bool:
    """Whether this environment's torchrun reads :data:`SHUTDOWN_TIMEOUT_ENV`."""
    import dataclasses

    from torch.distributed.launcher.api import LaunchConfig

    return "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}


def grace_note(grace_s: int) -> Optional[str]:
    """A warning when torchrun would kill the ranks before ``grace_s`` has passed, else None."""
    if grace_s <= TORCHRUN_DEFAULT_SHUTDOWN_S or torchrun_honours_grace():
        return None
    import torch

    return (
        f"torch {torch.__version__}'s torchrun kills the ranks {TORCHRUN_DEFAULT_SHUTDOWN_S} s after it forwards "
        f"a SIGTERM, not the {grace_s} s of signal_grace_s: a checkpoint that takes longer is lost "
        f"(torch >= 2.12 reads {SHUTDOWN_TIMEOUT_ENV})"
    )

"""Bash scripts for launchers and batch jobs: one renderer, so every script has the same shape.

A script is: shebang, ``#SBATCH`` directives (SLURM only), a comment header, ``set -euo
pipefail``, ``cd`` to the submit directory, exports, the user's setup lines, our own prelude
lines, and ``exec`` of one command (so signals reach the launcher, not an idle bash).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

from jobscripts.shell import Token, comment, join, quote

SBATCH_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.,:@/+=%-]+")
JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.^+-]")


class ScriptError(ValueError):
    """A ``#SBATCH`` setting that cannot be written safely; the message names the setting."""


@dataclass
class SlurmOptions:
    """``#SBATCH`` settings shared by ``launch job --launcher slurm``, the sweep ``slurm:`` section and data_prep."""

    partition: Optional[str] = None
    account: Optional[str] = None
    time: Optional[str] = None  # e.g. "04:00:00"
    job_name: Optional[str] = None
    cpus_per_task: Optional[int] = None
    mem: Optional[str] = None  # e.g. "64G"
    sbatch_lines: list[str] = field(default_factory=list)  # extra options, e.g. "--qos=high"
    setup: list[str] = field(default_factory=list)  # shell lines before the command (module load, venv)
    signal_grace_s: int = 120  # SIGTERM this long before the time limit: checkpoint, exit 75; 0: off
    max_requeues: int = (
        20  # a job whose command exits 75 while SLURM runs it requeues itself (jobscripts.requeue); 0: never
    )
    # a sweep's arrays: at most this many tasks each (default: the cluster's MaxArraySize); set it
    # below a per-user submit limit (MaxSubmitJobs counts every array task) to submit in parts
    max_array_tasks: Optional[int] = None

    def __post_init__(self) -> None:
        if self.max_array_tasks is not None and (isinstance(self.max_array_tasks, bool) or self.max_array_tasks < 1):
            raise ValueError(f"slurm.max_array_tasks: must be a positive integer, got {self.max_array_tasks!r}")


def cpu_request_note(opts: SlurmOptions, gpus: int) -> Optional[str]:
    """A warning for a GPU job that asks for no CPUs: SLURM then gives each task its default
    (often 1 CPU, and memory per CPU), which every rank and its data loading would share."""
    asked = opts.cpus_per_task is not None or any(
        line.startswith(("--cpus-per-gpu", "--exclusive", "--cpus-per-task", "-c")) for line in opts.sbatch_lines
    )
    if not gpus or asked:
        return None
    return (
        f"the job asks for {gpus} GPU(s) and SLURM's default CPUs per task (often 1, shared by every rank "
        "and its data loading): give cpus_per_task (--cpus-per-task) and mem (--mem; 0 is the whole node's)"
    )


def job_name(text: str) -> str:
    """A SLURM job name: ``text`` with anything but ``[A-Za-z0-9_.^+-]`` replaced by ``_``."""
    return JOB_NAME_UNSAFE.sub("_", text)[:128] or "depthmup"


def sbatch_directives(
    opts: SlurmOptions,
    *,
    name: str,
    resources: Mapping[str, object],
    signal_batch_shell: bool = False,
    requeue: bool = False,
) -> list[str]:
    """``#SBATCH`` lines: the job name, ``resources`` (option -> value, None skipped), then ``opts``.

    ``signal_batch_shell``: deliver the pre-timeout SIGTERM to the batch shell (``B:``), for
    scripts that ``exec`` the work in the batch step instead of an ``srun`` step.
    ``requeue``: ``--requeue``, so the job may requeue itself (``jobscripts.requeue``) even where
    the cluster's ``JobRequeue`` default says no, and ``--open-mode=append``, so each run of a
    requeued job adds to its log instead of truncating it.
    """
    lines = [f"--job-name={job_name(opts.job_name or name)}"]
    lines += [f"--{key}={value}" for key, value in resources.items() if value is not None]
    for key in ("partition", "account", "time", "mem"):
        value = getattr(opts, key)
        if value is not None:
            if not SBATCH_SAFE_VALUE.fullmatch(str(value)):
                raise ScriptError(f"slurm {key}: {value!r} holds characters not allowed in an #SBATCH line")
            lines.append(f"--{key}={value}")
    if opts.cpus_per_task is not None:
        if opts.cpus_per_task < 1:
            raise ScriptError(f"slurm cpus_per_task: must be >= 1, got {opts.cpus_per_task}")
        lines.append(f"--cpus-per-task={opts.cpus_per_task}")
    if opts.signal_grace_s:
        lines.append(f"--signal={'B:' if signal_batch_shell else ''}TERM@{int(opts.signal_grace_s)}")
    if opts.max_requeues < 0:
        raise ScriptError(f"slurm max_requeues: must be >= 0, got {opts.max_requeues}")
    if requeue:
        lines += ["--requeue", "--open-mode=append"]
    for extra in opts.sbatch_lines:
        if not extra.startswith("-") or "\n" in extra or "\r" in extra:
            raise ScriptError(f"slurm sbatch line {extra!r}: must be one sbatch option such as '--qos=high'")
        lines.append(extra)
    return [f"#SBATCH {line}" for line in lines]


def render_script(
    *,
    title: str,
    command: Sequence[Token],
    cwd: str,
    directives: Sequence[str] = (),
    notes: Sequence[str] = (),
    env: Mapping[str, Token] | None = None,
    setup: Sequence[str] = (),
    prelude: Sequence[str] = (),
) -> str:
    """The script text. ``setup`` is the user's shell (kept verbatim, it is code by intent);
    ``prelude`` is launch's own; every value in ``command``/``env``/``cwd`` is quoted."""
    lines = ["#!/usr/bin/env bash", *directives, comment(title), *(comment(n) for n in notes)]
    lines += ["set -euo pipefail", f"cd {quote(cwd)}"]
    lines += [f"export {key}={quote(value)}" for key, value in (env or {}).items()]
    lines += [*setup, *prelude, f"exec {join(command)}", ""]
    return "\n".join(lines)

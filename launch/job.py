"""``python -m launch job``: one training run under local / torchrun / SLURM / DeepSpeed.

The script that runs (or is submitted) is written to ``RUN_DIR/launch/`` and is exactly what
``--dry-run`` prints, so what ran can always be read back.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from jobscripts import sbatch
from jobscripts.atomic import atomic_write_text
from jobscripts.requeue import requeue_command
from jobscripts.scripts import SlurmOptions, cpu_request_note, render_script, sbatch_directives
from jobscripts.shell import Raw, Token, Word
from launch import attempts, launchers
from launch.commands import REPO_ROOT, TrainInvocation, trainer_command
from launch.errors import LaunchError
from launch.processes import forwarding_signals, start_child
from launch.run_configs import load_run_config
from runconfig.loader import overridden
from runconfig.validate import validate_layout
from rundir.contract import ATTEMPT_EXIT_ENV, EXIT_FILES, ExitCode
from rundir.files import attempt_exit
from rundir.lock import run_locked

LAUNCHERS = ("local", "torchrun", "slurm", "deepspeed")
SLURM_MODES = ("torchrun", "srun")  # one torchrun per node | one srun task per GPU
SCRIPT_NAMES = {"local": "local.sh", "torchrun": "torchrun.sh", "deepspeed": "deepspeed.sh", "slurm": "slurm.sbatch"}
HEAD_NODE_LINE = 'head_node="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)"'  # sed reads all: no SIGPIPE under pipefail


@dataclass
class JobRequest:
    config: str
    overrides: list[str] = field(default_factory=list)
    launcher: str = "local"
    nodes: int = 1
    gpus_per_node: int = 0
    nproc_per_node: Optional[int] = None  # default: gpus_per_node, or 1 without GPUs
    master_addr: Optional[str] = None
    master_port: int = launchers.DEFAULT_MASTER_PORT
    rdzv_id: Optional[str] = None
    slurm_mode: str = "torchrun"
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    hostfile: Optional[str] = None
    deepspeed_launcher: str = "pdsh"
    force: bool = False
    train_cmd: Optional[str] = None
    cwd: str = field(default_factory=os.getcwd)


@dataclass
class PreparedJob:
    launcher: str
    run_dir: Path
    script_path: Path
    script: str
    slurm_output: Optional[str] = None
    warnings: list[str] = field(default_factory=list)
    # local/torchrun/deepspeed: this attempt's own exit file (ATTEMPT_EXIT_ENV), and the script's
    # name while it runs (renamed to script_path once the attempt was not locked out of the run)
    attempt_exit: Optional[Path] = None
    attempt_script: Optional[Path] = None


LAYOUT_KEYS = (
    "parallel.tensor_model_parallel_size",
    "parallel.pipeline_model_parallel_size",
    "training.global_batch_size",
    "training.micro_batch_size",
)


def _layout_source(config: Path, overrides: Sequence[str]) -> str:
    """Where a layout that does not fit the processes came from: the file, and the layout keys
    the command line set on top of it (the file may hold other values for them)."""
    mine = overridden(LAYOUT_KEYS, overrides)
    return f"{config} with {' '.join(mine)} (command line)" if mine else str(config)


def data_paths(cfg: Any) -> list[tuple[str, str]]:
    """``(key, path)`` of each file or folder the run config names for its data (a prefix: its
    folder, the prefix being a stem of ``.bin``/``.idx`` names)."""
    d = cfg.data
    named = [("data.manifest", d.manifest), ("data.tokenizer", d.tokenizer)]
    named += [(key, str(Path(p).parent)) for key in ("data.train_prefixes", "data.valid_prefixes")
              for p in getattr(d, key.split(".")[1])]  # fmt: skip
    return [(key, path) for key, path in named if path]


def check_job_data(cfg: Any, *, elsewhere: bool) -> Optional[str]:
    """The trainer's own data check (``training.data.check_run_data``), run here: a failure is a
    :class:`LaunchError` (exit 2) with the trainer's message, which names the key and the file.

    ``elsewhere``: the ranks run on other machines (SLURM, multi-node DeepSpeed), whose
    filesystems this host may not see whole. A path the config names that does not exist here
    is then a warning (returned), not an error: it may be on storage only the compute nodes
    mount. Where every such path exists here the data is checked as on one host: a broken file
    seen here is the file the nodes would read. Relative paths are the trainer's: from this
    process's working directory, where the job's script runs it (``JobRequest.cwd``)."""
    if cfg.data.mock:  # nothing to read (and no torch to import)
        return None
    if elsewhere:
        unseen = [f"{key}: {path}" for key, path in data_paths(cfg) if not Path(path).exists()]
        if unseen:
            return (f"{'; '.join(unseen)}: not found from this host, so the data was not checked; "
                    "the job's nodes must see it (a typo fails there, exit 2)")  # fmt: skip
    from training.data import check_run_data

    try:
        check_run_data(cfg)
    except (ValueError, FileNotFoundError) as exc:
        raise LaunchError(str(exc)) from None
    return None


def prepare_job(req: JobRequest) -> PreparedJob:
    """Validate the config and render the launcher script (nothing written yet)."""
    if req.launcher not in LAUNCHERS:
        raise LaunchError(f"--launcher: must be one of {list(LAUNCHERS)}, got {req.launcher!r}")
    if req.slurm_mode not in SLURM_MODES:
        raise LaunchError(f"--slurm-mode: must be one of {list(SLURM_MODES)}, got {req.slurm_mode!r}")
    cwd = Path(req.cwd).resolve()
    config = (cwd / req.config).resolve()
    cfg = load_run_config(config, req.overrides)
    run_dir = cwd / cfg.run.dir
    own = attempts.exit_file(run_dir) if req.launcher != "slurm" else None
    train = TrainInvocation(tuple(trainer_command(req.train_cmd)), str(config), tuple(req.overrides), req.force)
    procs = req.nproc_per_node or req.gpus_per_node or 1
    name = req.slurm.job_name or run_dir.name
    topo = launchers.Topology(req.nodes, procs, req.master_addr, req.master_port, req.rdzv_id or name)
    if req.launcher == "local" and (req.nodes != 1 or procs != 1):
        raise LaunchError("--launcher local runs one process; use torchrun, slurm or deepspeed for more")
    try:  # here, not when the job has its nodes
        validate_layout(cfg, req.nodes * procs)
    except ValueError as exc:
        raise LaunchError(
            f"{_layout_source(config, req.overrides)}: on {req.nodes} node(s) x {procs} process(es): {exc}"
        ) from None
    if req.launcher == "slurm" and cfg.parallel.device == "cuda" and not req.gpus_per_node:
        raise LaunchError(f"--gpus-per-node: {config} runs on cuda (parallel.device) but the job asks for no GPU")
    # the data, as the trainer checks it, before any rank starts or a job waits in a queue for it
    ranks_elsewhere = req.launcher == "slurm" or (req.launcher == "deepspeed" and req.nodes > 1)
    data_warning = check_job_data(cfg, elsewhere=ranks_elsewhere)
    hostfile = str((cwd / req.hostfile).resolve()) if req.hostfile else None
    hostfile_hosts = _count_hosts(Path(hostfile)) if hostfile and req.launcher == "deepspeed" else 0

    env: dict[str, Token] = {"PYTHONUNBUFFERED": "1"}
    if cfg.parallel.tensor_model_parallel_size > 1 and req.launcher != "local":
        # TP's communication overlaps the matrix products (Megatron-LM's setting)
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    warnings = [data_warning] if data_warning else []
    if req.launcher == "slurm" and (note := cpu_request_note(req.slurm, req.gpus_per_node)):
        warnings.append(note)
    # torchrun exits 1 for any rank's exit (the trainer's code is in its exit files) and kills the
    # ranks 30 s after a SIGTERM unless told the grace
    torchrun = req.launcher == "torchrun" or (req.launcher == "slurm" and req.slurm_mode == "torchrun")
    if torchrun and req.slurm.signal_grace_s:
        env[launchers.SHUTDOWN_TIMEOUT_ENV] = str(req.slurm.signal_grace_s)
        if note := launchers.grace_note(req.slurm.signal_grace_s):
            warnings.append(note + ("; --slurm-mode srun has no such limit" if req.launcher == "slurm" else ""))
    directives: list[str] = []
    prelude: list[str] = []
    notes = [f"generated by `python -m launch job --launcher {req.launcher}` at {_now()}"]
    slurm_output = None
    command: list[Token]
    if req.launcher == "local":
        command = train.argv()
    elif req.launcher == "torchrun":
        command = launchers.torchrun_command(topo, train.argv())
    elif req.launcher == "deepspeed":  # DeepSpeed passes on only some variables to other nodes' ranks
        forwarded = ["env", f"{ATTEMPT_EXIT_ENV}={own}", *train.argv()]
        command = launchers.deepspeed_command(topo, forwarded, hostfile, req.deepspeed_launcher, hostfile_hosts)
    else:
        per_node = 1 if req.slurm_mode == "torchrun" else procs
        resources = {
            "nodes": req.nodes,
            "ntasks-per-node": per_node,
            "gpus-per-node": req.gpus_per_node or None,
        }
        directives = sbatch_directives(req.slurm, name=name, resources=resources, requeue=bool(req.slurm.max_requeues))
        env["PYTHONPATH"] = Word((str(REPO_ROOT), Raw("${PYTHONPATH:+:$PYTHONPATH}")))  # python -m jobscripts.requeue
        slurm_output = str(run_dir / "launch").replace("%", "%%") + "/slurm-%j.out"  # %% = a literal %
        notes.append(f"submitted as: sbatch --parsable --output={slurm_output} <this script>")
        prelude = [HEAD_NODE_LINE]
        if req.slurm_mode == "torchrun":
            command = launchers.srun_torchrun_command(topo, train.argv())
        else:
            prelude += ['export MASTER_ADDR="$head_node"', f"export MASTER_PORT={req.master_port}"]
            command = launchers.srun_per_gpu_command(topo, train.argv())
        # srun exits 75 when the trainers do: the job requeues itself (max_requeues 0: never). The
        # job's code is the trainer's own, the one it wrote during the job: torchrun's is 1
        # whatever its ranks exit with, srun's the highest of its tasks' (a rank's 2 reads as 75
        # when --kill-on-bad-exit made the others save and exit 75, or 137 when it killed them).
        # First this run of the job's own file: a rank 0 locked out of the run directory (another
        # live job owns it) says its 4 there, never in the owner's exit.json or summary.json
        env[ATTEMPT_EXIT_ENV] = attempts.batch_exit_file(run_dir)
        exit_files: list[Token] = [Raw(f'"${ATTEMPT_EXIT_ENV}"'), *(str(run_dir / name) for name in EXIT_FILES)]
        command = requeue_command(command, req.slurm.max_requeues, ExitCode.RESUMABLE, exit_files)
    script = render_script(
        title=f"run dir: {run_dir}",
        notes=notes,
        directives=directives,
        cwd=str(cwd),
        env=env,
        setup=req.slurm.setup,
        prelude=prelude,
        command=command,
    )
    script_path = run_dir / "launch" / SCRIPT_NAMES[req.launcher]
    attempt_script = None
    if own is not None:  # launch/torchrun-<attempt>.sh, as launch/exit-<attempt>.json
        attempt_script = script_path.with_name(f"{script_path.stem}-{own.stem.split('-', 1)[1]}{script_path.suffix}")
    return PreparedJob(req.launcher, run_dir, script_path, script, slurm_output, warnings, own, attempt_script)


def run_job(req: JobRequest, *, dry_run: bool = False) -> ExitCode:
    """Render, keep and run (or submit) the job; return the exit code to exit with."""
    job = prepare_job(req)
    for warning in job.warnings:
        print(f"[launch] warning: {warning}", file=sys.stderr)
    if dry_run:
        sys.stdout.write(job.script)
        written = job.script_path.with_stem(f"{job.script_path.stem}-<UTC time>") if job.launcher == "slurm" else None
        print(f"[launch] dry run: would write {written or job.script_path} and "
              f"{'submit' if written else 'run'} it", file=sys.stderr)  # fmt: skip
        return ExitCode.OK
    if job.launcher == "slurm":
        return _submit(job)
    assert job.attempt_exit is not None and job.attempt_script is not None
    if run_locked(job.run_dir):  # seen from here: nothing to start, nothing to write
        print(f"[launch] {job.run_dir} is in use by another process on this host (its run lock is held): "
              "nothing started", file=sys.stderr)  # fmt: skip
        return ExitCode.BUSY
    # The script runs under a name of this attempt's own and becomes launch/<launcher>.sh only
    # when the attempt was not locked out: the run directory may be another live process's
    # (on another host), whose script that file is.
    script = job.attempt_script
    atomic_write_text(script, job.script)
    script.chmod(0o755)
    print(f"[launch] wrote {script}", file=sys.stderr)
    started = time.time()
    own = job.attempt_exit  # a rank locked out of the run directory says its 4 here
    proc = start_child(["bash", str(script)], env={**os.environ, ATTEMPT_EXIT_ENV: str(own)})
    with forwarding_signals(lambda: [proc]):
        code = proc.wait()
    if code != 0:  # torchrun exits 1 whatever its ranks exit with; a trainer killed in its teardown
        written = attempt_exit(job.run_dir, started, own)  # wrote its code before: the trainer's, this attempt's
        code = code if written is None else written.exit_code
    own.unlink(missing_ok=True)
    if code == ExitCode.BUSY:
        script.unlink(missing_ok=True)
    else:
        os.replace(script, job.script_path)
        print(f"[launch] kept as {job.script_path}", file=sys.stderr)
    return code if code >= 0 else 128 - code


SLURM_RECORD = "slurm_job.json"  # the latest submission's record, as slurm.sbatch is its script


def _submit(job: PreparedJob) -> ExitCode:
    """Submit ``job`` under a script of this submission's own, ``launch/slurm-<UTC time>.sbatch``,
    and record it in ``slurm_job-<UTC time>.json``: an earlier submission, maybe still queued,
    keeps its script and record, and an sbatch whose answer was lost finds its job by that script
    alone (:func:`jobscripts.sbatch.submit`), never an older job of the run's. ``slurm.sbatch``
    and ``slurm_job.json`` are copies of the latest submission's."""
    folder = job.script_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    tag, n = stamp, 1
    while True:  # the name claimed with O_EXCL: two submissions in the same microsecond get two
        own = folder / f"{job.script_path.stem}-{tag}{job.script_path.suffix}"
        try:
            os.close(os.open(own, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o755))
            break
        except FileExistsError:
            n += 1
            tag = f"{stamp}-{n}"
    atomic_write_text(own, job.script)
    own.chmod(0o755)
    print(f"[launch] wrote {own}", file=sys.stderr)
    try:
        job_id = sbatch.submit(own, job.slurm_output or "slurm-%j.out")
    except sbatch.SubmitError as exc:
        if not exc.unknown:  # nothing of it is queued: the script would only mislead
            own.unlink(missing_ok=True)
        print(f"[launch] {exc}", file=sys.stderr)
        return ExitCode.FAILED
    record = json.dumps({"job_id": job_id, "script": str(own), "submitted_at": _now()}, indent=1) + "\n"
    atomic_write_text(folder / f"{Path(SLURM_RECORD).stem}-{tag}.json", record)
    atomic_write_text(job.script_path, job.script)
    job.script_path.chmod(0o755)
    atomic_write_text(folder / SLURM_RECORD, record)
    print(f"submitted batch job {job_id}")
    return ExitCode.OK


def _count_hosts(hostfile: Path) -> int:
    """Hosts in a DeepSpeed hostfile (``host slots=N`` lines; ``#`` comments)."""
    try:
        lines = hostfile.read_text().splitlines()
    except OSError as exc:
        raise LaunchError(f"--hostfile: cannot read {hostfile}: {exc}") from None
    return sum(1 for line in lines if line.split("#", 1)[0].strip())


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

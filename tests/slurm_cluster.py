"""A real one-host SLURM cluster for the ``slurm`` tests: slurmctld + slurmd on this machine.

Debian's ``slurm-wlm`` and ``munge`` packages (``apt-get install -y slurm-wlm munge``; ``.ci/run``
installs them) give the daemons; this module writes its own ``slurm.conf`` under
:data:`STATE_DIR` (own ports, own state, so it never touches a real cluster's
``/etc/slurm``), starts munged, slurmctld and slurmd where they are not running yet, and waits
until ``sinfo`` shows the node idle: about a second. Calling it again reuses a running cluster
(idempotent). Client commands find the cluster through ``SLURM_CONF``, which the fixtures put
in the environment; batch jobs inherit it from ``sbatch``.

Settings chosen for a container: ``proctrack/linuxproc`` and ``task/none`` (no cgroups or CPU
binding needed), ``select/cons_tres`` with ``CR_Core`` (CPUs are allocated, memory is not),
one node with this machine's CPU count, ``jobcomp/filetxt`` so that the state every job ended in
can be read back (no accounting daemon here), and a short credential lifetime so that a
requeued job waits 11 s instead of SLURM's default 121 s before it runs again.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

STATE_DIR = Path(os.environ.get("DEPTHMUP_SLURM_DIR", "/tmp/depthmup-slurm"))
CTLD_PORT, SLURMD_PORT = 16817, 16818  # not SLURM's defaults, so a real slurmd on this host is left alone
COMMANDS = ("slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo", "munged", "munge", "unmunge")
INSTALL_HINT = "apt-get install -y slurm-wlm munge (.ci/run does)"
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN = Path("/run/munge")
KILL_WAIT_S = 10  # SIGTERM -> SIGKILL on scancel and at the time limit
# A requeued job may start again only once its old credential expired (SLURM holds it, reason
# BeginTime, cred_expire + 1 s): 120 s by default, 10 s here so the requeue tests take seconds.
CRED_EXPIRE_S = 10


class Unavailable(RuntimeError):
    """The cluster cannot be started here; the message says why (the tests skip with it)."""


@dataclass(frozen=True)
class Cluster:
    conf: Path
    node: str
    cpus: int

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(argv, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def queued(self, job_ids: list[str] | None = None) -> dict[str, str]:
        """``job id (array tasks as 12_3) -> state`` of every job ``squeue`` lists (of ``job_ids``)."""
        argv = ["squeue", "-h", "-o", "%i %T"]
        if job_ids:
            argv += ["-j", ",".join(job_ids)]
        out = self.run(*argv, check=False).stdout
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def names(self) -> dict[str, str]:
        """``job id -> name`` as ``squeue``'s default format shows it (8 characters)."""
        out = self.run("squeue", "-h", "-o", "%i %.8j", check=False).stdout
        return {f[0]: f[1] for f in (line.split() for line in out.splitlines()) if len(f) == 2}

    def wait_gone(self, job_ids: list[str], timeout: float = 300, poll: float = 0.5) -> None:
        """Until ``squeue`` lists none of ``job_ids`` (each finished, failed or cancelled)."""
        deadline = time.time() + timeout
        while self.queued(job_ids):
            if time.time() > deadline:
                raise TimeoutError(f"jobs still queued after {timeout} s: {self.queued(job_ids)}")
            time.sleep(poll)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` fields of one job (kept MinJobAge seconds after it ends)."""
        out = self.run("scontrol", "-o", "show", "job", job_id, check=False).stdout
        return dict(f.split("=", 1) for f in out.split() if "=" in f)

    def completions(self) -> list[dict[str, str]]:
        """Every job end recorded by ``jobcomp/filetxt``: one dict per line (JobId, JobState, ...).

        A requeued job gets a line for each run, so this is the history ``sacct`` would show."""
        path = STATE_DIR / "jobcomp.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in lines]

    def cancel_all(self, timeout: float = 60) -> None:
        """Cancel every job of this private test cluster (a test's leftovers), and wait until the
        queue is empty. With nothing queued no ``scancel`` is sent: a user-wide cancel issued as
        the next test submits was seen to kill that test's new array at its start (CI,
        2026-11-26: both tasks SIGTERMed 50 ms after they started, no kill request of theirs in
        slurmctld.log)."""
        if not self.queued():
            return
        self.run("scancel", f"--user={os.getuid()}", check=False)
        deadline = time.time() + timeout
        while self.queued():  # every job of this cluster is the tests' (a pending array shows as 12_[0-3])
            if time.time() > deadline:
                raise TimeoutError(f"jobs still queued {timeout} s after scancel: {self.queued()}")
            time.sleep(0.5)


def _conf_text(node: str, cpus: int) -> str:
    d = STATE_DIR
    return "\n".join(
        [
            "# written by tests/slurm_cluster.py: a one-node test cluster",
            "ClusterName=depthmup-test",
            f"SlurmctldHost={node}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={CTLD_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "AuthType=auth/munge",
            f"AuthInfo=cred_expire={CRED_EXPIRE_S}",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            f"SlurmdLogFile={d}/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2,bf_interval=1",  # pending jobs start within seconds
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "ReturnToService=2",
            "MpiDefault=none",
            f"KillWait={KILL_WAIT_S}",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={d}/jobcomp.log",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            f"NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _pid_alive(pid_file: Path) -> bool:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(pid_file.stem.encode())


def _munge_works() -> bool:
    enc = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
    return enc.returncode == 0 and subprocess.run(["unmunge"], input=enc.stdout, capture_output=True).returncode == 0


def _start_munge() -> None:
    if _munge_works():
        return
    if not MUNGE_KEY.exists():
        MUNGE_KEY.parent.mkdir(parents=True, exist_ok=True)
        MUNGE_KEY.write_bytes(os.urandom(128))
        MUNGE_KEY.chmod(0o400)
        shutil.chown(MUNGE_KEY, "munge", "munge")
    for folder in (MUNGE_RUN, Path("/var/log/munge"), Path("/var/lib/munge")):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.chown(folder, "munge", "munge")
    done = subprocess.run(["runuser", "-u", "munge", "--", "munged"], capture_output=True, text=True, timeout=30)
    deadline = time.time() + 10
    while not _munge_works():
        if time.time() > deadline:
            raise Unavailable(f"munged does not answer (exit {done.returncode}: {done.stderr.strip()})")
        time.sleep(0.1)


def _tail(path: Path, lines: int = 8) -> str:
    try:
        return "\n".join(path.read_text().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def start() -> tuple[Cluster, list[str]]:
    """The running test cluster, started where needed, and the daemons this call started;
    raises :class:`Unavailable` with the reason."""
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        raise Unavailable(f"SLURM/munge not installed (missing {', '.join(missing)}): {INSTALL_HINT}")
    if os.geteuid() != 0:
        raise Unavailable("starting slurmd and munged needs root")
    node = socket.gethostname().split(".")[0]
    cpus = len(os.sched_getaffinity(0))
    for sub in ("state", "spool"):
        (STATE_DIR / sub).mkdir(parents=True, exist_ok=True)
    conf = STATE_DIR / "slurm.conf"
    text = _conf_text(node, cpus)
    changed = not conf.exists() or conf.read_text() != text
    if changed:
        conf.write_text(text)
    cluster = Cluster(conf, node, cpus)
    _start_munge()
    env = {**os.environ, **cluster.env}
    started = []
    for daemon in ("slurmctld", "slurmd"):
        pid_file = STATE_DIR / f"{daemon}.pid"
        if _pid_alive(pid_file) and changed:
            subprocess.run(["kill", pid_file.read_text().strip()], check=False)
            time.sleep(1)
        if not _pid_alive(pid_file):
            argv = [daemon, "-f", str(conf)] + (["-c"] if daemon == "slurmctld" else [])  # -c: no old jobs
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
            if done.returncode != 0:
                raise Unavailable(
                    f"{daemon} did not start: {done.stderr.strip() or _tail(STATE_DIR / f'{daemon}.log')}"
                )
            started.append(daemon)
    deadline = time.time() + 30
    state: Optional[str] = None
    while time.time() < deadline:
        state = cluster.run("sinfo", "-h", "-n", node, "-o", "%T", check=False).stdout.strip()
        if state in ("idle", "mixed", "allocated"):
            return cluster, started
        if state.startswith(("down", "drain")):
            cluster.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        time.sleep(0.2)
    raise Unavailable(
        f"node {node} not idle after 30 s (sinfo: {state!r}); slurmctld.log:\n{_tail(STATE_DIR / 'slurmctld.log')}"
        f"\nslurmd.log:\n{_tail(STATE_DIR / 'slurmd.log')}"
    )


def stop(daemons: list[str]) -> None:
    for daemon in daemons:
        pid_file = STATE_DIR / f"{daemon}.pid"
        if _pid_alive(pid_file):
            os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)


@pytest.fixture(scope="session")
def slurm_cluster() -> Cluster:
    """The cluster for the session; the daemons it had to start are stopped at the end."""
    try:
        cluster, started = start()
    except Unavailable as exc:
        pytest.skip(f"no SLURM test cluster: {exc}")
    yield cluster
    cluster.cancel_all()
    stop(started)


@pytest.fixture
def slurm(slurm_cluster: Cluster, monkeypatch) -> Cluster:
    """The cluster, with ``SLURM_CONF`` set for this test (and its jobs); leftover jobs are
    cancelled when the test ends."""
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    yield slurm_cluster
    slurm_cluster.cancel_all()

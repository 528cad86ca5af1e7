"""A real one-node Slurm cluster on localhost for the test session (Debian's slurmctld, slurmd
and munge). tests/conftest.py imports it for every test module; the fixture yields the
environment (`SLURM_CONF`) that points Slurm's commands at it.

Everything lives in a temporary directory, on free ports, with its own munge key and socket,
so it neither needs nor disturbs a system Slurm or munge, and two sessions can run side by side.
The sandbox this was written in has no cgroups and no systemd: processes are tracked through
/proc (proctrack/linuxproc) and nothing is bound (task/none).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
START_TIMEOUT_S = 60.0


def _which(name: str) -> str | None:
    # Daemons live in /usr/sbin, which a non-root PATH may lack.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)  # CI installs Slurm: a skip there would hide the tests
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _real_memory_mb() -> int:
    """A little below MemTotal: a node that reports less than its RealMemory is drained."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    return 1024


def slurm_conf(root: Path, node: str) -> str:
    """slurm.conf for one node called `node` whose files all live under `root`."""
    return "\n".join([
        "ClusterName=advisortest",
        f"SlurmctldHost={node}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge.socket'}",  # our munged, not the system's
        "MpiDefault=none",
        "ProctrackType=proctrack/linuxproc",  # no cgroups here
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",  # memory not consumable: no job takes the whole node's
        "SchedulerType=sched/backfill",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "KillWait=5",  # seconds from SIGTERM to SIGKILL at a time limit (default 30)
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        f"NodeName={node} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} "
        f"RealMemory={_real_memory_mb()} State=UNKNOWN",
        f"PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP",
    ]) + "\n"


def _wait_idle(env: dict[str, str], daemons: list[subprocess.Popen], root: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        dead = [p.args[0] for p in daemons if p.poll() is not None]
        if dead:
            break
        done = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%T"], env=env,
                              capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.split() == ["idle"]:
            return
        time.sleep(0.5)
    logs = "".join(f"\n--- {p.name}\n" + "".join(p.read_text().splitlines(True)[-15:])
                   for p in sorted(root.glob("*.log")))
    raise RuntimeError(f"the test Slurm cluster did not become idle within "
                       f"{START_TIMEOUT_S:g} s{f' ({dead} died)' if dead else ''}:{logs}")


def _cancel_all(env: dict[str, str], timeout_s: float = 30.0) -> None:
    """Cancel every job and give slurmd the time to kill their processes."""
    subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = subprocess.run(["squeue", "--noheader"], env=env, capture_output=True, text=True)
        if done.returncode or not done.stdout.strip():
            return
        time.sleep(0.5)


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    """Start munged, slurmctld and slurmd on localhost; yield {"SLURM_CONF": ...}; stop them."""
    missing = [n for n in (*DAEMONS, *CLIENTS) if _which(n) is None]
    if missing:
        unavailable(f"Slurm not installed ({', '.join(missing)} missing); Debian: apt-get "
                     f"install slurmctld slurmd slurm-client munge")
    if os.geteuid() != 0:
        unavailable("the test Slurm cluster runs its daemons as root; run the tests as root")
    # Not under pytest's tmp dir: munge wants every directory above its socket searchable.
    root = Path(tempfile.mkdtemp(prefix="advisor-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, socket.gethostname().split(".")[0]))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons: list[subprocess.Popen] = []
    try:
        with (root / "munged.log").open("wb") as log:
            daemons.append(subprocess.Popen(
                [_which("munged"), "--foreground", "--force", f"--socket={root / 'munge.socket'}",
                 f"--key-file={key}", f"--pid-file={root / 'munged.pid'}",
                 f"--seed-file={root / 'munged.seed'}"], stdout=log, stderr=log))
        for _ in range(100):  # the daemons authenticate through the socket from the start
            if (root / "munge.socket").exists():
                break
            time.sleep(0.1)
        for daemon in ("slurmctld", "slurmd"):  # -D: stay in the foreground, ours to stop
            daemons.append(subprocess.Popen([_which(daemon), "-D", "-f", str(conf)], env=env,
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait_idle(env, daemons, root)
        yield {"SLURM_CONF": str(conf)}
    finally:
        if daemons:
            _cancel_all(env)
        for proc in reversed(daemons):  # slurmd, slurmctld, then munged
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(root, ignore_errors=True)

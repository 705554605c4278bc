"""A throwaway one-node Slurm cluster for the benches that compare mlyard with Slurm.

    with throwaway_slurm() as slurm:
        if slurm is None:
            ...  # Slurm is not installed here: leave its column out
        else:
            subprocess.run(["srun", "-n2", "hostname"], env=slurm.environment, check=True)

`throwaway_slurm()` yields None when Slurm's or munge's programs are missing (Debian:
`apt-get install slurm-wlm munge`). Otherwise it writes a slurm.conf into a temporary
directory, starts a munged of its own (its own key and socket there, so it neither needs nor
disturbs a system munged), slurmctld and one slurmd, and yields once `sinfo` shows the node
idle; on leaving it stops all three and removes the directory. Commands reach this cluster
through `SlurmCluster.environment` (SLURM_CONF points at its slurm.conf). Scheduling runs
without its usual delays (`SchedulerParameters=batch_sched_delay=0,sched_min_interval=0`), as
a tuned cluster would; the node's CPUs and memory are what the config says, whatever the
machine has (`SlurmdParameters=config_overrides`). It runs as the current account, which
must be root for slurmd to start jobs.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo")
NODE = "node1"
PARTITION = "bench"
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class SlurmCluster:
    directory: Path
    """Where slurm.conf, the logs, the state and the munge socket are."""
    environment: dict[str, str]
    """This process's environment with SLURM_CONF pointing at this cluster."""
    cpus: int

    def log_tail(self, lines: int = 20) -> str:
        """The end of every daemon's log, for an error message."""
        tails = []
        for log in sorted(self.directory.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(tails)


def installed() -> bool:
    return all(shutil.which(program) for program in PROGRAMS)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def slurm_conf(directory: Path, *, cpus: int, memory_mb: int, user: str) -> str:
    """The configuration of a one-node cluster whose every file is under `directory`."""
    host = socket.gethostname().split(".")[0]
    return "\n".join([
        "ClusterName=mlyardbench",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={directory / 'munge.socket'}",
        f"StateSaveLocation={directory / 'state'}",
        f"SlurmdSpoolDir={directory / 'spool-%n'}",
        f"SlurmctldPidFile={directory / 'slurmctld.pid'}",
        f"SlurmdPidFile={directory / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={directory / 'slurmctld.log'}",
        f"SlurmdLogFile={directory / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "MaxJobCount=1000000",
        f"NodeName={NODE} NodeHostname=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _start_munged(directory: Path) -> subprocess.Popen:
    key = directory / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    socket_path = directory / "munge.socket"
    munged = subprocess.Popen(
        ["munged", "--foreground", "--force", f"--socket={socket_path}", f"--key-file={key}",
         f"--pid-file={directory / 'munged.pid'}", f"--log-file={directory / 'munged.log'}",
         f"--seed-file={directory / 'munged.seed'}"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    _wait_for(lambda: socket_path.exists() or munged.poll() is not None, "munged's socket")
    if munged.poll() is not None:
        raise RuntimeError(f"munged exited with {munged.returncode}: see {directory / 'munged.log'}")
    return munged


def _wait_for(condition, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.05)


def _node_state(environment: dict[str, str]) -> str:
    answer = subprocess.run(["sinfo", "-h", "-N", "-n", NODE, "-o", "%T"], env=environment,
                            capture_output=True, text=True, check=False)
    return answer.stdout.strip()


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def throwaway_slurm(*, cpus: int = 2, memory_mb: int = 4000) -> Iterator[SlurmCluster | None]:
    """A running one-node cluster of `cpus` CPUs until the block ends; None without Slurm.
    A cluster that does not come up raises RuntimeError with the end of its logs."""
    if not installed():
        yield None
        return
    import getpass

    with tempfile.TemporaryDirectory(prefix="mlyard-slurm-") as scratch:
        directory = Path(scratch)
        conf = directory / "slurm.conf"
        conf.write_text(slurm_conf(directory, cpus=cpus, memory_mb=memory_mb, user=getpass.getuser()))
        environment = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
        environment["SLURM_CONF"] = str(conf)
        cluster = SlurmCluster(directory=directory, environment=environment, cpus=cpus)
        daemons: list[subprocess.Popen] = []
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT,
                 "env": environment}
        try:
            daemons.append(_start_munged(directory))
            daemons.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], **quiet))
            daemons.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf), "-N", NODE], **quiet))

            def ready() -> bool:
                if any(daemon.poll() is not None for daemon in daemons):
                    raise RuntimeError("a Slurm daemon exited")
                return _node_state(environment) == "idle"

            try:
                _wait_for(ready, f"idle node {NODE}")
            except (RuntimeError, TimeoutError) as error:
                raise RuntimeError(f"the throwaway Slurm did not come up: {error}\n{cluster.log_tail()}") from None
            yield cluster
        finally:
            # slurmd first: it ends the steps still running there.
            for daemon in reversed(daemons):
                _stop(daemon)

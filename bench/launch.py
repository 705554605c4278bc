"""Launch overhead: the same 2-process DDP training run directly with torchrun and as an
mlyard job on an embedded server, in the same invocation.

Prints the median wall time of each (start to exit), their ratio, and the median time from
submission until every replica's command is running. Targets: ratio ≤ 1.10, submit → all
running ≤ 1 s. Exits 1 when a target is missed.

    .venv/bin/python bench/launch.py [--runs 5] [--epochs 10]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPOSITORY = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SCRIPT = "examples/digits_ddp.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_torchrun(epochs: int, checkpoints: Path) -> float:
    environment = {**os.environ, "MLYARD_CHECKPOINT_DIR": str(checkpoints)}
    started = time.perf_counter()
    subprocess.run(
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", SCRIPT, "--epochs", str(epochs)],
        cwd=REPOSITORY, env=environment, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def run_mlyard(client, spec, epochs: int) -> tuple[float, float]:
    """(wall seconds from submission to the job's end, seconds from submission to all running)."""
    started = time.perf_counter()
    job = client.submit(spec)
    while True:
        detail = client.job(job.id)
        if detail.status.is_terminal:
            break
        time.sleep(0.05)
    wall = time.perf_counter() - started
    if detail.status.value != "SUCCEEDED":
        raise SystemExit(f"the benchmark job {job.id} ended {detail.status.value}: {detail.message}")
    replicas = detail.attempts[-1].replicas
    all_running = max(replica.started_at for replica in replicas) - detail.submitted_at
    return wall, all_running


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    arguments = parser.parse_args()
    console = Console()

    from mlyard.client import Client
    from mlyard.spec import JobSpec
    from mlyard.storage import pack_directory

    with tempfile.TemporaryDirectory(prefix="mlyard-bench-") as scratch:
        home, port = Path(scratch) / "home", free_port()
        environment = {**os.environ, "MLYARD_HOME": str(home), "MLYARD_PORT": str(port)}
        environment.pop("MLYARD_URL", None)
        environment.pop("MLYARD_TOKEN", None)
        subprocess.run([str(BIN / "mlyard"), "server", "start"], env=environment, check=True)
        try:
            client = Client(f"http://127.0.0.1:{port}", (home / "admin.token").read_text().strip())
            packed = pack_directory(REPOSITORY, Path(scratch) / "code.tar.gz")
            client.upload_snapshot(packed.path, packed.digest)
            spec = JobSpec(
                name="bench-digits", framework="pytorch", snapshot=packed.digest,
                command=["python", SCRIPT, "--epochs", str(arguments.epochs)],
                roles=[{"name": "worker", "replicas": 2, "resources": {"cpu": 1, "memory": "2Gi"}}],
            )
            direct, managed, to_running = [], [], []
            for run in range(arguments.runs):
                # Interleaved, so drift on a noisy machine hits both sides alike.
                direct.append(run_torchrun(arguments.epochs, Path(scratch) / "checkpoints"))
                wall, running = run_mlyard(client, spec, arguments.epochs)
                managed.append(wall)
                to_running.append(running)
                console.print(f"run {run + 1}/{arguments.runs}: torchrun {direct[-1]:.2f}s, "
                              f"mlyard {wall:.2f}s, submit→all running {running:.3f}s")
        finally:
            subprocess.run([str(BIN / "mlyard"), "server", "stop"], env=environment, check=False)

    direct_median, managed_median = statistics.median(direct), statistics.median(managed)
    ratio = managed_median / direct_median
    running_median = statistics.median(to_running)
    table = Table(title=f"2-replica DDP, {arguments.epochs} epochs, median of {arguments.runs}")
    for column in ("measure", "torchrun (baseline)", "mlyard", "ratio", "target", "met"):
        table.add_column(column)
    table.add_row("start → exit", f"{direct_median:.2f}s", f"{managed_median:.2f}s", f"{ratio:.3f}", "≤ 1.10",
                  "yes" if ratio <= 1.10 else "NO")
    table.add_row("submit → all replicas running", "-", f"{running_median:.3f}s", "-", "≤ 1 s",
                  "yes" if running_median <= 1.0 else "NO")
    console.print(table)
    return 0 if ratio <= 1.10 and running_median <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())

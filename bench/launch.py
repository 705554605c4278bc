"""Launch overhead: the same 2-process DDP training (examples/digits_ddp.py) run with torchrun,
with Slurm's `srun -n2` where Slurm is installed, and as a 2-replica mlyard job on an embedded
server, interleaved in the same invocation.

- torchrun: `torchrun --standalone --nproc-per-node 2 SCRIPT`.
- srun: a throwaway one-node Slurm of 2 CPUs (`slurm.py`), and what a Slurm user writes for a
  plain DDP script: `srun -n2 sh -c 'RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS
  LOCAL_RANK=$SLURM_LOCALID exec python SCRIPT'` with MASTER_ADDR and MASTER_PORT exported
  (the mapping Lightning's SLURMEnvironment makes); one Python process per rank, no torchrun.
- mlyard: the job of examples/digits-ddp.yaml (2 replicas of 1 CPU) on the repository's snapshot.

Every run of every side starts from an empty checkpoint directory (a torchrun or srun run in
its own temporary MLYARD_CHECKPOINT_DIR; an mlyard job has one of its own), so no run resumes
an earlier one's training. The sides take turns in a rotating order, so drift on a noisy
machine hits all alike.

Wall time is from start to exit: for torchrun and srun their process; for mlyard from the
submission to the job's end as the server records it (`finished_at`). The bench asks the
server once a second: polling faster would spend the server's CPU, on the cores the training
runs on, to measure it (every 50 ms cost the server 3 to 4 CPU-seconds per job). A ratio is
the median of the runs' own ratios (mlyard's wall time over the baseline's of the same run),
which cancels most of the drift of a busy machine. For mlyard it also prints where its wall time went (median seconds):
the server starting the job (submission → replicas launched), the launchers starting the
commands (→ the last replica's command running: interpreter, snapshot extraction,
isolation), the commands themselves (→ the last replica's exit) and the server seeing the end
(→ the job's end recorded).

Targets: mlyard ≤ 1.10× torchrun's and ≤ 1.05× srun's wall time; submission → all replicas
running ≤ 1 s. Exits 1 when a target is missed.

    .venv/bin/python bench/launch.py [--runs 5] [--epochs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench_server import BIN, REPOSITORY, BenchServer, free_port  # the bench folder is on sys.path
from slurm import SlurmCluster, throwaway_slurm

SCRIPT = "examples/digits_ddp.py"
POLL_SECONDS = 1.0
TARGETS = {"torchrun": 1.10, "srun": 1.05}
RUNNING_TARGET = 1.0
PHASES = ("server starts the job", "launchers start the commands", "commands run", "server sees the end")


def baseline_environment(checkpoints: Path) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
    environment["MLYARD_CHECKPOINT_DIR"] = str(checkpoints)
    return environment


def run_torchrun(epochs: int, checkpoints: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", SCRIPT, "--epochs", str(epochs)],
        cwd=REPOSITORY, env=baseline_environment(checkpoints), check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def run_srun(slurm: SlurmCluster, epochs: int, checkpoints: Path) -> float:
    environment = {**baseline_environment(checkpoints), "SLURM_CONF": slurm.environment["SLURM_CONF"],
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    ranks = (f"RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
             f"exec {BIN / 'python'} {SCRIPT} --epochs {epochs}")
    started = time.perf_counter()
    subprocess.run(["srun", "-n2", "sh", "-c", ranks], cwd=REPOSITORY, env=environment, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def run_mlyard(client, spec) -> tuple[float, float, tuple[float, ...]]:
    """(wall seconds from submission to the job's recorded end, seconds from submission to all
    replicas running, the seconds of each of PHASES)."""
    submitted = time.time()
    job = client.submit(spec)
    while not (detail := client.job(job.id)).status.is_terminal:
        time.sleep(POLL_SECONDS)
    if detail.status.value != "SUCCEEDED":
        raise SystemExit(f"the benchmark job {job.id} ended {detail.status.value}: {detail.message}")
    attempt = detail.attempts[-1]
    all_running = max(replica.started_at for replica in attempt.replicas)
    last_exit = max(replica.finished_at for replica in attempt.replicas)
    moments = (submitted, attempt.launched_at, all_running, last_exit, detail.finished_at)
    phases = tuple(later - earlier for earlier, later in zip(moments, moments[1:]))
    return detail.finished_at - submitted, all_running - submitted, phases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=10)
    arguments = parser.parse_args()
    console = Console()

    from mlyard.spec import JobSpec

    walls: dict[str, list[float]] = {"torchrun": [], "srun": [], "mlyard": []}
    to_running: list[float] = []
    phases: list[tuple[float, ...]] = []
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-") as scratch, throwaway_slurm() as slurm:
        if slurm is None:
            console.print("Slurm is not installed (apt-get install slurm-wlm munge): no srun column")
            del walls["srun"]
        server = BenchServer(Path(scratch))
        try:
            spec = JobSpec(
                name="bench-digits", framework="pytorch", snapshot=server.snapshot,
                command=["python", SCRIPT, "--epochs", str(arguments.epochs)],
                roles=[{"name": "worker", "replicas": 2, "resources": {"cpu": 1, "memory": "2Gi"}}],
            )

            def mlyard() -> float:
                wall, running, spent = run_mlyard(server.client, spec)
                to_running.append(running)
                phases.append(spent)
                return wall

            sides: dict[str, Callable[[Path], float]] = {
                "torchrun": lambda checkpoints: run_torchrun(arguments.epochs, checkpoints),
                "mlyard": lambda _checkpoints: mlyard(),
            }
            if slurm is not None:
                sides["srun"] = lambda checkpoints: run_srun(slurm, arguments.epochs, checkpoints)
            names = list(sides)
            for run in range(arguments.runs):
                order = names[run % len(names):] + names[:run % len(names)]
                for name in order:
                    walls[name].append(sides[name](Path(tempfile.mkdtemp(prefix=f"{name}-", dir=scratch))))
                console.print(f"run {run + 1}/{arguments.runs}: "
                              + ", ".join(f"{name} {walls[name][-1]:.2f}s" for name in walls)
                              + f", submit→all running {to_running[-1]:.3f}s")
        finally:
            server.close()
    return report(console, arguments, walls, to_running, phases)


def report(console: Console, arguments, walls: dict[str, list[float]], to_running: list[float],
           phases: list[tuple[float, ...]]) -> int:
    medians = {name: statistics.median(values) for name, values in walls.items()}
    table = Table(title=f"2-process DDP, {arguments.epochs} epochs, median of {arguments.runs} runs")
    for column in ("measure", *medians, "ratio", "target", "met"):
        table.add_column(column)
    met = True
    for baseline in (name for name in medians if name != "mlyard"):
        ratio = statistics.median(ours / theirs for ours, theirs in zip(walls["mlyard"], walls[baseline]))
        met &= ratio <= TARGETS[baseline]
        cells = [f"{medians[name]:.2f}s" if name in (baseline, "mlyard") else "" for name in medians]
        table.add_row(f"start → exit, mlyard / {baseline}", *cells, f"{ratio:.3f}", f"≤ {TARGETS[baseline]:.2f}",
                      "yes" if ratio <= TARGETS[baseline] else "NO")
    running = statistics.median(to_running)
    met &= running <= RUNNING_TARGET
    table.add_row("submit → all replicas running", *["" for name in medians if name != "mlyard"], f"{running:.3f}s",
                  "-", f"≤ {RUNNING_TARGET:g} s", "yes" if running <= RUNNING_TARGET else "NO")
    console.print(table)
    breakdown = Table(title="where mlyard's wall time went (median seconds)")
    breakdown.add_column("phase")
    breakdown.add_column("seconds")
    for index, phase in enumerate(PHASES):
        breakdown.add_row(phase, f"{statistics.median(spent[index] for spent in phases):.3f}")
    console.print(breakdown)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

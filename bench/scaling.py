"""Scaling: samples/s of the examples at 1, 2, … replicas on an embedded server, up to what its
machine holds, with the scaling efficiency against 1 replica measured in the same run:
throughput at n ÷ (n × throughput at 1).

- data parallel: examples/digits_ddp.py (DistributedDataParallel, 32 samples per rank and step:
  weak scaling, the global batch grows with n). Its samples/s is what rank 0 reports for each
  epoch (the samples of all ranks ÷ the epoch's seconds), the median over epochs 2….
  Replicas get 1 core each; on a node with GPUs (and a torch that sees CUDA) 1 GPU each and an
  equal share of the cores, and n goes up to the GPU count.
- pipeline parallel: examples/pipeline_parallel.py, whose model has exactly 2 stages: 1 replica
  is its `--single-process` run of the same model, 2 replicas its two stages (gloo, CPU only).
  It reports no metrics, so each line the job prints is stamped with the time it was printed;
  samples/s is the samples of an epoch ÷ the median gap between its epoch lines. The row is
  left out, saying so, where that file is not in the repository.

Runs are interleaved (every size once, then again) so drift on a noisy machine hits all
sizes alike; each figure is the median of --repeats runs.

    .venv/bin/python bench/scaling.py [--repeats 3] [--epochs 10] [--replicas 1 2 4]
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench_server import REPOSITORY, BenchServer  # the bench folder is on sys.path
DDP = "examples/digits_ddp.py"
PIPELINE = "examples/pipeline_parallel.py"
PIPELINE_BATCH = 64  # pipeline_parallel.py's --batch-size, passed explicitly
DIGITS, TEST_SHARE = 1797, 0.2  # sklearn's digits and the examples' train/test split
# Prefixes every line a command prints with the time it was printed.
STAMP = r"""
import subprocess, sys, time
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
for line in child.stdout:
    sys.stdout.write(f"{time.time():.6f} {line}")
    sys.stdout.flush()
sys.exit(child.wait())
"""
EPOCH_LINE = re.compile(r"^(\d+\.\d+) epoch (\d+)/\d+", re.MULTILINE)


def sizes_up_to(most: int) -> list[int]:
    """1, 2, 4, … and `most` itself."""
    sizes, size = [], 1
    while size < most:
        sizes.append(size)
        size *= 2
    return sizes + [most]


class Bench:
    def __init__(self, scratch: Path, epochs: int):
        self.epochs = epochs
        self.server = BenchServer(scratch)
        self.home, self.environment, self.client = self.server.home, self.server.environment, self.server.client
        self.snapshot = self.server.snapshot
        [node] = self.client.nodes()  # an embedded server has one node: this machine
        self.cpus, self.memory = len(node.cpu_ids), node.memory_bytes
        import torch

        self.gpus = len(node.gpus) if node.gpus and torch.cuda.is_available() else 0

    def resources(self, replicas: int, *, gpu: bool) -> dict:
        memory = min(2 * 1024**3, self.memory // replicas)
        if gpu:
            return {"gpu": 1, "cpu": max(1, self.cpus // self.gpus), "memory": memory}
        return {"cpu": 1, "memory": memory}

    def finish(self, spec: dict) -> tuple[int, float]:
        """Runs the job to its end: (its id, wall seconds from submission)."""
        started = time.perf_counter()
        job = self.client.submit({"snapshot": self.snapshot, "framework": "pytorch", "max_runtime": "30m", **spec})
        while not (detail := self.client.job(job.id)).status.is_terminal:
            time.sleep(0.1)
        wall = time.perf_counter() - started
        if detail.status.value != "SUCCEEDED":
            log = "\n".join(line for lines in detail.log_tail.values() for line in lines)
            raise SystemExit(f"job {job.id} ({spec['name']}) ended {detail.status.value}: {detail.message}\n{log}")
        return job.id, wall

    def data_parallel(self, replicas: int) -> tuple[float, float]:
        """(samples/s, wall seconds) of the DDP example on `replicas` replicas."""
        gpu = self.gpus > 0
        job_id, wall = self.finish({
            "name": f"scaling-ddp-{replicas}",
            "command": ["python", DDP, "--epochs", str(self.epochs), "--checkpoint-every", "0"],
            "roles": [{"name": "worker", "replicas": replicas, "resources": self.resources(replicas, gpu=gpu)}],
        })
        points = self.client.metrics(job_id, names=["samples_per_second"]).points
        rates = [point.value for point in points if point.step > 1] or [point.value for point in points]
        return statistics.median(rates), wall

    def pipeline(self, replicas: int) -> tuple[float, float]:
        """(samples/s, wall seconds) of the pipeline example: 1 replica = its single-process run."""
        arguments = ["--epochs", str(self.epochs), "--batch-size", str(PIPELINE_BATCH)]
        if replicas == 1:
            arguments.append("--single-process")
        job_id, wall = self.finish({
            "name": f"scaling-pipeline-{replicas}",
            "command": ["python", "-c", STAMP, "python", PIPELINE, *arguments],
            "roles": [{"name": "worker", "replicas": replicas, "resources": self.resources(replicas, gpu=False)}],
            "placement": {"same_node": True},
        })
        # The last stage (the single process, or rank 1) prints the epochs.
        log = self.client.logs(job_id, replica=f"worker-{replicas - 1}").text
        stamps = [float(at) for at, _ in EPOCH_LINE.findall(log)]
        if len(stamps) < 2:
            raise SystemExit(f"job {job_id}: fewer than 2 epoch lines in its log:\n{log[-2000:]}")
        train = DIGITS - math.ceil(DIGITS * TEST_SHARE)
        samples = train // PIPELINE_BATCH * PIPELINE_BATCH  # full batches only
        return samples / statistics.median(b - a for a, b in zip(stamps, stamps[1:])), wall

    def close(self) -> None:
        self.server.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--replicas", type=int, nargs="+", metavar="N",
                        help="data-parallel sizes (default 1, 2, 4, … up to the machine's cores, or GPUs)")
    arguments = parser.parse_args()
    console = Console(width=150)
    pipeline_there = (REPOSITORY / PIPELINE).is_file()
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-") as scratch:
        bench = Bench(Path(scratch), arguments.epochs)
        try:
            most = bench.gpus or bench.cpus
            sizes = sorted(set(arguments.replicas or sizes_up_to(most)))
            if sizes[0] != 1:
                sizes.insert(0, 1)  # the baseline
            if sizes[-1] > most:
                raise SystemExit(f"this machine holds {most} replicas, not {sizes[-1]}")
            device = f"{bench.gpus} GPUs" if bench.gpus else f"{bench.cpus} cores"
            console.print(f"data parallel on {sizes} replicas ({device}); pipeline "
                          + ("on 1 and 2" if pipeline_there and bench.cpus >= 2 else "left out"), style="dim")
            plan = [("data parallel", size) for size in sizes]
            if pipeline_there and bench.cpus >= 2:
                plan += [("pipeline parallel", 1), ("pipeline parallel", 2)]
            for repeat in range(arguments.repeats):
                for kind, size in plan:
                    measure = bench.data_parallel if kind == "data parallel" else bench.pipeline
                    results.setdefault((kind, size), []).append(measure(size))
                    rate, wall = results[(kind, size)][-1]
                    console.print(f"run {repeat + 1}/{arguments.repeats}: {kind} × {size}: {rate:.0f} samples/s, "
                                  f"{wall:.1f}s", style="dim")
        finally:
            bench.close()

    table = Table(title=f"scaling, {arguments.epochs} epochs, median of {arguments.repeats} "
                        f"({'CUDA' if bench.gpus else 'CPU'})")
    for column in ("example", "replicas", "samples/s", "baseline: n × samples/s at 1", "efficiency", "speed-up",
                   "job wall s"):
        table.add_column(column)
    for kind in ("data parallel", "pipeline parallel"):
        sizes = sorted(size for named, size in results if named == kind)
        if not sizes:
            continue
        one = statistics.median(rate for rate, _ in results[(kind, 1)])
        for size in sizes:
            rate = statistics.median(rate for rate, _ in results[(kind, size)])
            wall = statistics.median(wall for _, wall in results[(kind, size)])
            label = kind if kind == "data parallel" or size > 1 else "pipeline (1 = --single-process)"
            table.add_row(label, str(size), f"{rate:.0f}", f"{size * one:.0f}", f"{rate / (size * one):.2f}",
                          f"{rate / one:.2f}", f"{wall:.1f}")
    console.print(table)
    if not pipeline_there:
        console.print(f"pipeline parallel: left out, {PIPELINE} is not in this repository")
    return 0


if __name__ == "__main__":
    sys.exit(main())

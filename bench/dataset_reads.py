"""Reading a dataset version inside a job against reading the same files straight from disk.

A job that names `datasets:` sees the version as a tree of hard links into the store, behind a
read-only bind mount of its mount namespace (a replica on the server's account) and a symbolic
link in its working directory. None of that should cost anything when the files are read. The
same reader (every file read whole, in path order) runs:
- straight on the pushed folder, as a plain process (the baseline);
- inside a job of the real server, on `data/bench`, its dataset input.
Each reads the data `--passes` times in a row: the first pass after dropping the page cache
where this account may (`/proc/sys/vm/drop_caches`: cold), the others warm. Figures are the
reader's own timing (inside the job: not the job's start). MiB/s and files/s of the data read.
`--home` puts the server's MLYARD_HOME (and so the store) on another filesystem, such as a
CephFS or NFS mount, to measure there.

Target: the job reads within 10% of the baseline's time (ratio ≤ 1.10), the medians of the
warm passes.
Exits 1 when it is missed.

    .venv/bin/python bench/dataset_reads.py [--files 2000] [--kib 128] [--passes 6] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench_server import BIN, BenchServer  # the bench folder is on sys.path

TARGET = 1.10
READER = r'''
import json, os, sys, time
root, passes, drop = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
paths = sorted(os.path.join(folder, name) for folder, _, names in os.walk(root, followlinks=True) for name in names)
results = []
for index in range(passes):
    if index == 0 and drop:
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as caches:
                caches.write("3\n")
        except OSError:
            pass
    started, total = time.perf_counter(), 0
    for path in paths:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                total += len(chunk)
    results.append({"seconds": time.perf_counter() - started, "bytes": total, "files": len(paths)})
print("READ " + json.dumps(results), flush=True)
'''


def can_drop_caches() -> bool:
    return os.access("/proc/sys/vm/drop_caches", os.W_OK)


def make_data(folder: Path, files: int, kib: int) -> None:
    for index in range(files):
        target = folder / f"part-{index % 50:02d}"
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{index:06d}.bin").write_bytes(os.urandom(kib * 1024))


def parse(output: str) -> list[dict]:
    line = next(line for line in output.splitlines() if line.startswith("READ "))
    return json.loads(line[5:])


def read_directly(folder: Path, passes: int, drop: bool) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", READER, str(folder), str(passes), "1" if drop else "0"],
                          capture_output=True, text=True, check=True)
    return parse(done.stdout)


def read_in_job(server: BenchServer, name: str, passes: int, drop: bool) -> list[dict]:
    job = server.client.submit({
        "name": "bench-read", "snapshot": server.snapshot,
        "command": ["python", "-c", READER, "data/bench", str(passes), "1" if drop else "0"],
        "datasets": [{"name": name, "path": "data/bench"}],
        "roles": [{"name": "worker", "resources": {"cpu": 1, "memory": "1Gi"}}]})
    ended = server.client.wait(job.id, timeout=1800)
    log = server.client.logs(job.id).text
    if ended.status.value != "SUCCEEDED":
        raise SystemExit(f"the reading job ended {ended.status.value}:\n{log}")
    return parse(log)


def row(table: Table, label: str, results: list[dict], baseline: list[dict] | None) -> None:
    for index, result in enumerate(results):
        mib = result["bytes"] / (1 << 20)
        seconds = result["seconds"]
        ratio = "" if baseline is None else f"{seconds / baseline[index]['seconds']:.2f}"
        table.add_row(label, "cold" if index == 0 and DROP else "warm", f"{seconds:.3f}", f"{mib / seconds:,.0f}",
                      f"{result['files'] / seconds:,.0f}", ratio)


DROP = can_drop_caches()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--kib", type=int, default=128)
    parser.add_argument("--passes", type=int, default=6)
    parser.add_argument("--home", type=Path, help="where the server's home goes (default: a scratch folder)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlyard-bench-reads-", dir=options.home) as scratch_name:
        scratch = Path(scratch_name)
        data = scratch / "data"
        make_data(data, options.files, options.kib)
        server = BenchServer(scratch)
        try:
            subprocess.run([str(BIN / "mlyard"), "datasets", "push", "bench", str(data)], env=server.environment,
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            direct = read_directly(data, options.passes, DROP)
            started = time.perf_counter()
            in_job = read_in_job(server, "bench", options.passes, DROP)
            job_seconds = time.perf_counter() - started
        finally:
            server.close()
    table = Table(title=f"Reading {options.files:,} files of {options.kib} KiB "
                        f"({options.files * options.kib / 1024:,.0f} MiB)")
    for column in ("reader", "cache", "seconds", "MiB/s", "files/s", "ratio to direct"):
        table.add_column(column, justify="left" if column in ("reader", "cache") else "right")
    row(table, "direct", direct, None)
    row(table, "in a job", in_job, direct)
    console = Console()
    console.print(table)
    console.print(f"the job from submission to its end: {job_seconds:.1f} s; page cache dropped on the first "
                  f"pass: {'yes' if DROP else 'no (not permitted here)'}")
    warm = [index for index in range(options.passes) if index > 0 or not DROP]
    ratio = (statistics.median(in_job[index]["seconds"] for index in warm)
             / statistics.median(direct[index]["seconds"] for index in warm))
    console.print(f"warm passes, median: job/direct {ratio:.2f} (target ≤ {TARGET:.2f})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())

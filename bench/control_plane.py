"""The control plane at scale: a real server (`mlyard server start`) with 0, 10,000 and 100,000
queued jobs, on SQLite and on PostgreSQL, measured through its REST API and its CLI.

The queue is filled through the batch API (`POST /api/v1/jobs:batch`, 1,000 jobs a request).
One running job holds both of the server's cores, so the queued jobs (one core each) cannot
start: the cluster is full, as on a busy lab cluster. At each size the run measures:
- single submissions per second from 1 and from 8 clients (threads, one HTTP client each);
- batch submissions per second (jobs/s while filling the queue to this size);
- p50 and p99 of one submission, of `GET /api/v1/jobs` (the first page) and of
  `GET /api/v1/jobs/{id}`;
- the CPU of the server and its controller's process over `--idle` idle seconds, and their
  RSS (and RSS per queued job beyond the size before);
- the wall time of `mlyard --help` and of `mlyard jobs`.
Where Slurm is installed (bench/slurm.py starts a throwaway one), the same run measures
`sbatch --hold --wrap true` sequentially and from 8 clients, and prints mlyard's single
submission rates over Slurm's. The two take turns, in `ROUNDS` rounds at every size, and the
ratio is the median of the rounds' ratios: this machine's speed drifts by a third within
minutes, and a peer measured once, before everything else, made the ratio a matter of luck.
PostgreSQL is the throwaway cluster of the tests (fsync off).

Targets: single submissions ≥ Slurm's rate and batches ≥ 500 jobs/s at every size; submission
and list p99 ≤ 50 ms, idle CPU ≤ 5% of a core, and ≤ 1 KiB of RSS per queued job at the largest
size; `mlyard --help` ≤ 150 ms and `mlyard jobs` ≤ 300 ms. Exits 1 when a target is missed.

    .venv/bin/python bench/control_plane.py [--sizes 0 10000 100000] [--databases sqlite postgresql]
        [--idle 30] [--submissions 300]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.table import Table

from bench_server import BIN, REPOSITORY, BenchServer
from slurm import throwaway_slurm

CLIENTS = 8
ROUNDS = 3
BATCH = 1000
WAITING = {"command": ["true"], "roles": [{"replicas": 1, "resources": {"cpu": 1, "memory": "64Mi"}}]}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Server:
    """A bench server with a job holding every core, and an HTTP client per thread."""

    def __init__(self, scratch: Path, database_url: str | None):
        settings = {"MLYARD_NODE_CPUS": "2", "MLYARD_SCHEDULER_POLICY": "fifo"}
        if database_url:
            settings["MLYARD_DATABASE_URL"] = database_url
        self.bench = BenchServer(scratch, **settings)
        self.environment = self.bench.environment
        self.port = int(self.environment["MLYARD_PORT"])
        self.token = (self.bench.home / "admin.token").read_text().strip()
        self.process = psutil.Process(int((self.bench.home / "server.pid").read_text().split()[0]))
        try:
            self._hold_the_node()
        except BaseException:
            self.close()
            raise
        self.queued = 0

    def _hold_the_node(self) -> None:
        blocker = self.http().post("/jobs", json={"name": "holds-the-node", "command": ["sleep", "1000000"],
                                                  "roles": [{"replicas": 1, "resources": {"cpu": 2}}]})
        if blocker.is_error:
            raise RuntimeError(f"the job holding the node was refused: {blocker.text}")
        self.blocker = blocker.json()["id"]
        deadline = time.monotonic() + 60
        while self.http().get(f"/jobs/{self.blocker}").json()["status"] != "RUNNING":
            if time.monotonic() > deadline:
                raise RuntimeError("the job holding the node never ran")
            time.sleep(0.2)

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}/api/v1", timeout=120,
                            headers={"Authorization": f"Bearer {self.token}"})

    def fill(self, size: int) -> float | None:
        """Queues jobs through the batch API up to `size`; jobs/s, or None when none were added."""
        if self.queued >= size:
            return None
        added, began = 0, time.perf_counter()
        with self.http() as client:
            while self.queued < size:
                count = min(BATCH, size - self.queued)
                items = [{"spec": {**WAITING, "name": f"fill-{self.queued + n}"}, "idempotency_key": uuid.uuid4().hex}
                         for n in range(count)]
                client.post("/jobs:batch", json={"jobs": items}).raise_for_status()
                self.queued += count
                added += count
        return added / (time.perf_counter() - began)

    def submit(self, clients: int, total: int) -> tuple[float, list[float]]:
        """Jobs/s from `clients` threads submitting `total` jobs one by one, and each one's seconds.
        The clients are made, and connected, before the clock starts."""
        latencies: list[float] = []
        lock = threading.Lock()
        https = [self.http() for _ in range(clients)]
        for http in https:
            http.get("/whoami").raise_for_status()
        start = threading.Barrier(clients + 1)

        def work(http: httpx.Client, count: int) -> None:
            start.wait()
            for _ in range(count):
                began = time.perf_counter()
                http.post("/jobs", json={**WAITING, "name": "single"}).raise_for_status()
                with lock:
                    latencies.append(time.perf_counter() - began)
        threads = [threading.Thread(target=work, args=(http, total // clients)) for http in https]
        for thread in threads:
            thread.start()
        start.wait()
        began = time.perf_counter()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - began
        for http in https:
            http.close()
        self.queued += len(latencies)
        return len(latencies) / elapsed, latencies

    def reads(self, count: int) -> tuple[list[float], list[float]]:
        """Seconds of each first-page listing and of each lookup of one job."""
        listing, lookup = [], []
        with self.http() as client:
            some = client.get("/jobs", params={"limit": 1}).json()[0]["id"]
            for _ in range(count):
                began = time.perf_counter()
                client.get("/jobs").raise_for_status()
                listing.append(time.perf_counter() - began)
                began = time.perf_counter()
                client.get(f"/jobs/{some}").raise_for_status()
                lookup.append(time.perf_counter() - began)
        return listing, lookup

    def processes(self) -> list[psutil.Process]:
        """The server's process and its controller's (`server/control/process.py`), not the
        replicas the controller starts."""
        return [self.process, *(child for child in self.process.children()
                                if "mlyard.server.control.process" in " ".join(child.cmdline()))]

    def cpu_seconds(self) -> float:
        return sum(times.user + times.system for times in (process.cpu_times() for process in self.processes()))

    def rss(self) -> int:
        return sum(process.memory_info().rss for process in self.processes())

    def idle_cpu(self, seconds: float) -> float:
        """The server's CPU (both processes) over `seconds` with no requests, as a share of one core."""
        time.sleep(2)  # the rounds the last requests caused
        before = self.cpu_seconds()
        time.sleep(seconds)
        return (self.cpu_seconds() - before) / seconds

    def cli(self, *arguments: str) -> float:
        """Median wall seconds of a CLI command over three runs."""
        environment = {**self.environment, "MLYARD_URL": f"http://127.0.0.1:{self.port}", "MLYARD_TOKEN": self.token}
        times = []
        for _ in range(3):
            began = time.perf_counter()
            subprocess.run([str(BIN / "mlyard"), *arguments], env=environment, check=True, cwd=REPOSITORY,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - began)
        return statistics.median(times)

    def close(self) -> None:
        # A stopped server leaves its jobs running for the next one to adopt: the job holding
        # the node goes first.
        blocker = getattr(self, "blocker", None)
        if blocker is not None:
            with self.http() as client:
                client.post(f"/jobs/{blocker}/cancel")
                deadline = time.monotonic() + 30
                while client.get(f"/jobs/{blocker}").json()["status"] != "CANCELLED" and time.monotonic() < deadline:
                    time.sleep(0.2)
        self.bench.close()


class Sbatch:
    """`sbatch --hold --wrap true` against a throwaway Slurm: the peer of single submissions."""

    def __init__(self, environment: dict[str, str], output: str):
        self.environment = environment
        self.command = ["sbatch", "--hold", "--wrap", "true", "--output", f"{output}/%j.out"]

    def rate(self, clients: int, total: int) -> float:
        """Jobs/s from `clients` threads running sbatch `total // clients` times each."""
        def run(count: int) -> None:
            for _ in range(count):
                subprocess.run(self.command, env=self.environment, check=True, stdout=subprocess.DEVNULL)
        threads = [threading.Thread(target=run, args=(total // clients,)) for _ in range(clients)]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return clients * (total // clients) / (time.perf_counter() - began)


def single_submissions(server: Server, total: int, sbatch: Sbatch | None) -> dict[str, float | None]:
    """Single submission rates from 1 and `CLIENTS` clients, taking turns with sbatch's in
    `ROUNDS` rounds; each rate is the median of its rounds, each ratio the median of the rounds'
    ratios. Also the p50 and p99 of one sequential submission."""
    count = max(CLIENTS, total // ROUNDS)
    rates: dict[str, list[float]] = {}
    latencies: list[float] = []
    for _ in range(ROUNDS):
        for clients in (1, CLIENTS):
            ours, seconds = server.submit(clients, count)
            if clients == 1:
                latencies += seconds
            rates.setdefault(f"single {clients} client{'s' if clients > 1 else ''} /s", []).append(ours)
            if sbatch is not None:
                theirs = sbatch.rate(clients, count)
                rates.setdefault(f"sbatch {clients} /s", []).append(theirs)
                rates.setdefault(f"{clients} client{'s' if clients > 1 else ''} / sbatch", []).append(ours / theirs)
    row: dict[str, float | None] = {"sbatch 1 /s": None, f"sbatch {CLIENTS} /s": None, "1 client / sbatch": None,
                                    f"{CLIENTS} clients / sbatch": None}
    row.update({name: statistics.median(values) for name, values in rates.items()})
    row["submit p50 ms"] = 1000 * percentile(latencies, 0.5)
    row["submit p99 ms"] = 1000 * percentile(latencies, 0.99)
    return row


def measure(server: Server, size: int, options, sbatch: Sbatch | None) -> dict[str, float | None]:
    batch_rate = server.fill(size)
    queued = server.queued
    single = single_submissions(server, options.submissions, sbatch)
    listing, lookup = server.reads(options.reads)
    idle = server.idle_cpu(options.idle)
    return {
        "queued": queued, "single 1 client /s": single["single 1 client /s"],
        f"single {CLIENTS} clients /s": single[f"single {CLIENTS} clients /s"], "batch jobs/s": batch_rate,
        "submit p50 ms": single["submit p50 ms"], "submit p99 ms": single["submit p99 ms"],
        "list p50 ms": 1000 * percentile(listing, 0.5), "list p99 ms": 1000 * percentile(listing, 0.99),
        "get p50 ms": 1000 * percentile(lookup, 0.5), "get p99 ms": 1000 * percentile(lookup, 0.99),
        "idle CPU %": 100 * idle, "RSS MiB": server.rss() / 2**20,
        "--help ms": 1000 * server.cli("--help"), "jobs ms": 1000 * server.cli("jobs"),
        **{name: single[name] for name in ("sbatch 1 /s", f"sbatch {CLIENTS} /s", "1 client / sbatch",
                                           f"{CLIENTS} clients / sbatch")},
    }


def database_url(name: str) -> str | None:
    if name == "sqlite":
        return None
    sys.path.insert(0, str(REPOSITORY / "tests"))
    import postgres  # the tests' throwaway cluster

    return postgres.create_database()


def report(console: Console, results: dict[str, list[dict]]) -> list[str]:
    missed = []
    for name, rows in results.items():
        columns = [column for column in rows[0] if any(row[column] is not None for row in rows)
                   or "sbatch" not in column]
        table = Table(title=f"control plane, {name}")
        for column in columns:
            table.add_column(column, justify="right")
        for row in rows:
            table.add_row(*[f"{row[c]:,.0f}" if c == "queued" else "—" if row[c] is None
                            else f"{row[c]:,.2f}" if "/ sbatch" in c else f"{row[c]:,.1f}" for c in columns])
            at = f"{name} at {row['queued']:,} queued"
            if row["1 client / sbatch"] is not None and row["1 client / sbatch"] < 1:
                missed.append(f"{at}: single submissions below sbatch's rate")
            if row["batch jobs/s"] is not None and row["batch jobs/s"] < 500:
                missed.append(f"{at}: batches below 500 jobs/s")
            if row["--help ms"] > 150 or row["jobs ms"] > 300:
                missed.append(f"{at}: the CLI is slower than 150 ms (--help) or 300 ms (jobs)")
        largest, empty = rows[-1], rows[0]
        per_job = (largest["RSS MiB"] - empty["RSS MiB"]) * 2**20 / max(1, largest["queued"] - empty["queued"])
        console.print(table)
        console.print(f"RSS per queued job beyond the emptiest size: {per_job:,.0f} bytes")
        if largest["submit p99 ms"] > 50 or largest["list p99 ms"] > 50:
            missed.append(f"{name}: submission or list p99 above 50 ms at {largest['queued']:,} queued")
        if largest["idle CPU %"] > 5:
            missed.append(f"{name}: idle CPU above 5% of a core at {largest['queued']:,} queued")
        if per_job > 1024:
            missed.append(f"{name}: {per_job:,.0f} bytes of RSS per queued job")
    return missed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[0, 10_000, 100_000])
    parser.add_argument("--databases", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    parser.add_argument("--idle", type=float, default=30.0, help="idle seconds over which CPU is measured")
    parser.add_argument("--submissions", type=int, default=300,
                        help="single submissions per client count, over all rounds")
    parser.add_argument("--reads", type=int, default=100, help="listings and lookups per size")
    options = parser.parse_args()
    console = Console(width=240)
    results: dict[str, list[dict]] = {}
    with throwaway_slurm() as slurm, tempfile.TemporaryDirectory() as output:
        sbatch = Sbatch(slurm.environment, output) if slurm is not None else None
        for name in options.databases:
            with tempfile.TemporaryDirectory() as scratch:
                server = Server(Path(scratch), database_url(name))
                try:
                    results[name] = []
                    for size in sorted(options.sizes):
                        results[name].append(measure(server, size, options, sbatch))
                        console.print(f"{name}: {results[name][-1]}")
                finally:
                    server.close()
    missed = report(console, results)
    for line in missed:
        console.print(f"[red]missed: {line}[/red]")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

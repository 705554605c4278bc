"""Prometheus metrics: the database families from rows on a real database (SQLite and
PostgreSQL), and request timing by route template on the real app."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from mlyard.api.nodes import GpuUsage, NodeUsage
from mlyard.paths import Paths
from mlyard.server.app import create_app
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, JobRow, NodeRow, QueueRow, ReplicaRow
from mlyard.server.services import resources
from mlyard.server.settings import ServerSettings
from mlyard.server.http.telemetry import (
    JOB_DURATION_BUCKETS,
    QUEUE_WAIT_BUCKETS,
    DatabaseCollector,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples_of(families) -> Samples:
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in families for sample in family.samples}


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def add_job(session, job_id: int, *, queue: str = "default", status: str, submitted_at: float = 100.0,
            starts: tuple[float, ...] = (), ran: float = 0.0) -> None:
    session.add(JobRow(id=job_id, name=f"job-{job_id}", queue=queue, spec={}, status=status, submitted_at=submitted_at,
                       updated_at=submitted_at, attempt_count=len(starts), attained_time=ran))
    session.flush()
    for number, created_at in enumerate(starts, start=1):
        finished = None if status == "RUNNING" and number == len(starts) else created_at + 1
        session.add(AttemptRow(id=job_id * 10 + number, job_id=job_id, number=number, created_at=created_at,
                               launched_at=created_at, finished_at=finished))


def test_job_node_and_wait_families_come_from_the_rows(database_url: str) -> None:
    database = Database.open(database_url)
    try:
        with database.transaction() as session:
            session.add(QueueRow(name="vision", quota_gpu=4, weight=1.0, created_at=1.0, updated_at=1.0))
            session.add(QueueRow(name="idle", weight=1.0, created_at=1.0, updated_at=1.0))
            session.add(NodeRow(name="n1", backend="fake", address="10.0.0.1", cpu_ids=[0, 1, 2, 3],
                                memory_bytes=8 << 30, gpus=[{"index": 0}, {"index": 1}], labels={}, notes=[],
                                updated_at=1.0))
            add_job(session, 1, status="SUCCEEDED", starts=(103.0,), ran=20.0)
            # Only the first start counts as the wait; the run time adds up every attempt.
            add_job(session, 2, queue="vision", status="FAILED", starts=(200.0, 1000.0), ran=4000.0)
            add_job(session, 3, status="QUEUED")
            add_job(session, 4, status="CANCELLED")  # cancelled while queued: it never ran
            add_job(session, 5, queue="vision", status="RUNNING", starts=(100.5,))
            session.flush()
            session.add(ReplicaRow(attempt_id=51, job_id=5, role="worker", index=0, rank=0, node="n1",
                                   cpu_ids=[0, 1], gpu_ids=[1], memory_bytes=1 << 30, directory="/r", state="running"))
            session.add(ReplicaRow(attempt_id=11, job_id=1, role="worker", index=0, rank=0, node="n1",
                                   cpu_ids=[2], gpu_ids=[0], memory_bytes=1 << 30, directory="/r", state="exited"))
        samples = samples_of(DatabaseCollector(lambda: database).collect())
    finally:
        database.close()

    for status, queue, count in (("SUCCEEDED", "default", 1), ("QUEUED", "default", 1), ("CANCELLED", "default", 1),
                                 ("FAILED", "vision", 1), ("RUNNING", "vision", 1), ("RUNNING", "default", 0),
                                 ("QUEUED", "idle", 0)):
        assert sample(samples, "mlyard_jobs", status=status, queue=queue) == count, (status, queue)

    def bucket(name: str, le: float | str, **labels: str) -> float | None:
        return sample(samples, f"{name}_bucket", le=le if isinstance(le, str) else f"{float(le)}", **labels)

    wait = "mlyard_job_queue_wait_seconds"
    assert sample(samples, f"{wait}_count", queue="default") == 1
    assert sample(samples, f"{wait}_sum", queue="default") == 3.0
    assert sample(samples, f"{wait}_count", queue="vision") == 2
    assert sample(samples, f"{wait}_sum", queue="vision") == 100.5
    assert [bucket(wait, bound, queue="vision") for bound in QUEUE_WAIT_BUCKETS[:6]] == [1, 1, 1, 1, 1, 2]
    assert bucket(wait, "+Inf", queue="vision") == 2

    duration = "mlyard_job_duration_seconds"
    assert sample(samples, f"{duration}_count", queue="default", status="SUCCEEDED") == 1
    assert sample(samples, f"{duration}_sum", queue="vision", status="FAILED") == 4000.0
    assert sample(samples, f"{duration}_count", queue="default", status="CANCELLED") is None
    below = dict(zip(JOB_DURATION_BUCKETS, (bucket(duration, bound, queue="vision", status="FAILED")
                                            for bound in JOB_DURATION_BUCKETS), strict=True))
    assert below[3600] == 0 and below[7200] == 1
    assert bucket(duration, 30, queue="default", status="SUCCEEDED") == 1
    assert bucket(duration, 10, queue="default", status="SUCCEEDED") == 0

    # Only the replica of the unfinished attempt holds anything.
    assert sample(samples, "mlyard_node_cpus", node="n1") == 4
    assert sample(samples, "mlyard_node_cpus_allocated", node="n1") == 2
    assert sample(samples, "mlyard_node_memory_bytes", node="n1") == 8 << 30
    assert sample(samples, "mlyard_node_memory_allocated_bytes", node="n1") == 1 << 30
    assert sample(samples, "mlyard_node_gpus", node="n1") == 2
    assert sample(samples, "mlyard_node_gpus_allocated", node="n1") == 1


def test_live_node_and_gpu_gauges_come_from_each_nodes_latest_sample(database_url: str) -> None:
    now = time.time()

    def usage(at: float, cpu: float, gpus: list[GpuUsage]) -> NodeUsage:
        return NodeUsage(at=at, cpu_percent=cpu, load_average=[0, 0, 0], memory_used_bytes=int(cpu) << 20,
                         memory_total_bytes=1 << 30, gpus=gpus)

    database = Database.open(database_url)
    try:
        resources.record(database, "gpu-node", [
            usage(now - 10, 90.0, [GpuUsage(index=0, utilization_percent=10.0)]),
            usage(now - 5, 25.0, [GpuUsage(index=0, utilization_percent=75.0, memory_used_bytes=3 << 30,
                                           temperature_celsius=61.0, power_watts=300.0),
                                  GpuUsage(index=1, utilization_percent=0.0)]),  # NVML gave nothing else
        ])
        resources.record(database, "cpu-node", [usage(now - 5, 50.0, [])])
        resources.record(database, "gone-node", [usage(now - 3600, 80.0, [])])
        samples = samples_of(DatabaseCollector(lambda: database).collect())
    finally:
        database.close()

    assert sample(samples, "mlyard_node_cpu_utilization_ratio", node="gpu-node") == 0.25  # the latest
    assert sample(samples, "mlyard_node_memory_used_bytes", node="gpu-node") == 25 << 20
    assert sample(samples, "mlyard_node_cpu_utilization_ratio", node="cpu-node") == 0.5
    assert sample(samples, "mlyard_node_cpu_utilization_ratio", node="gone-node") is None, "a stale sample"
    assert sample(samples, "mlyard_gpu_utilization_ratio", node="gpu-node", gpu="0") == 0.75
    assert sample(samples, "mlyard_gpu_utilization_ratio", node="gpu-node", gpu="1") == 0.0
    assert sample(samples, "mlyard_gpu_memory_used_bytes", node="gpu-node", gpu="0") == 3 << 30
    assert sample(samples, "mlyard_gpu_temperature_celsius", node="gpu-node", gpu="0") == 61.0
    assert sample(samples, "mlyard_gpu_power_watts", node="gpu-node", gpu="0") == 300.0
    assert sample(samples, "mlyard_gpu_power_watts", node="gpu-node", gpu="1") is None, "not measured is not 0"
    assert not [key for key in samples if key[0].startswith("mlyard_gpu_") and ("node", "cpu-node") in key[1]]


async def _requests(app, home: Path) -> str:
    async with app.router.lifespan_context(app):
        token = (home / "admin.token").read_text().strip()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            assert (await client.get("/api/v1/jobs/424242")).status_code == 401
            answer = await client.get("/api/v1/jobs/424242", headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 404
            assert (await client.get("/no/such/424242")).status_code == 404
            assert (await client.delete("/api/v1/health")).status_code == 405
            scraped = await client.get("/metrics")  # no token, like the health check
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
            return scraped.text


def test_requests_are_timed_by_route_template_and_apps_keep_their_own_registries(tmp_path: Path) -> None:
    home = tmp_path / "home"
    # job_users="off": as root, "auto" refuses to start where job accounts cannot run Python.
    app = create_app(ServerSettings(paths=Paths(home), node_cpus=1, job_users="off"))
    other = create_app(ServerSettings(paths=Paths(tmp_path / "other"), node_cpus=1, job_users="off"))
    text = asyncio.run(_requests(app, home))
    assert "424242" not in text, "a raw path is never a label"
    samples = samples_of(text_string_to_metric_families(text))
    count = "mlyard_http_request_duration_seconds_count"
    for method, route, status in (("GET", "/api/v1/jobs/{job_id}", "401"), ("GET", "/api/v1/jobs/{job_id}", "404"),
                                  ("GET", "unmatched", "404"), ("DELETE", "/api/v1/health", "405")):
        assert sample(samples, count, method=method, route=route, status_code=status) == 1, (method, route, status)
    assert [value for (name, _), value in samples.items() if name == "mlyard_node_cpus"] == [1], "MLYARD_NODE_CPUS"

    other_text = other.state.telemetry.exposition().decode()
    assert "mlyard_http_request_duration_seconds_count{" not in other_text


def test_a_scrape_neither_waits_for_nor_holds_up_a_sqlite_writer(tmp_path: Path) -> None:
    database = Database.open(f"sqlite:///{tmp_path / 'mlyard.db'}")
    holding, release = threading.Event(), threading.Event()

    def write() -> None:
        with database.transaction() as session:
            session.add(QueueRow(name="busy", weight=1.0, created_at=1.0, updated_at=1.0))
            session.flush()
            holding.set()
            release.wait(30)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert holding.wait(30)
        began = time.monotonic()
        samples = samples_of(DatabaseCollector(lambda: database).collect())
        assert time.monotonic() - began < 5, "the busy timeout is 30 s: the scrape did not queue behind the writer"
        assert sample(samples, "mlyard_jobs", status="QUEUED", queue="busy") is None, "it read the last commit"
    finally:
        release.set()
        writer.join()
    samples = samples_of(DatabaseCollector(lambda: database).collect())
    assert sample(samples, "mlyard_jobs", status="QUEUED", queue="busy") == 0
    database.close()

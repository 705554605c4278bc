"""`GET /metrics` of the real server process while a real job runs and ends, read with
prometheus-client's own parser."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from conftest import DATABASES, RunningServer, start_server, stop_server, wait_until
from prometheus_client.parser import text_string_to_metric_families

from mlyard.scheduler import DEFAULT_POLICY
from mlyard.server.http.telemetry import FAMILIES

pytestmark = pytest.mark.slow


class Scrape:
    def __init__(self, server: RunningServer):
        answer = httpx.get(f"{server.url}/metrics", timeout=30)  # Prometheus scrapes without a token
        assert answer.status_code == 200, answer.text
        self.families = {family.name: family for family in text_string_to_metric_families(answer.text)}

    def samples(self, name: str, **labels: str) -> list:
        return [sample for family in self.families.values() for sample in family.samples
                if sample.name == name and labels.items() <= sample.labels.items()]

    def value(self, name: str, **labels: str) -> float:
        return sum(sample.value for sample in self.samples(name, **labels))


@pytest.fixture(params=DATABASES)
def idle_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RunningServer]:
    """A server of the test's own: the session's server may still run other tests' jobs, which
    end, or start from its queue, while this test counts the node's allocated cores."""
    running = start_server(tmp_path / "home", database=request.param)
    yield running
    stop_server(running)


def test_metrics_follow_a_real_job_from_submission_to_success(idle_server: RunningServer) -> None:
    server = idle_server
    before = Scrape(server)
    for name, kind in FAMILIES.items():
        if kind == "gauge":
            assert before.families[name].type == "gauge", name

    job = server.cli_json("run", "--no-code", "--name", "scraped", "--", "sleep", "4")
    assert before.value("mlyard_node_cpus_allocated") == 0
    running = wait_until(lambda: (scrape := Scrape(server)).value("mlyard_node_cpus_allocated") == 1 and scrape,
                         60, "the running job's core in mlyard_node_cpus_allocated")
    assert running.value("mlyard_jobs", status="RUNNING") + running.value("mlyard_jobs", status="STARTING") >= 1
    assert server.cli("wait", str(job["id"]), "--timeout", "120").returncode == 0
    after = Scrape(server)

    for name, kind in FAMILIES.items():
        assert name in after.families and after.families[name].type == kind, name
    succeeded = {"queue": "default", "status": "SUCCEEDED"}
    assert after.value("mlyard_jobs", **succeeded) >= before.value("mlyard_jobs", **succeeded) + 1
    duration = "mlyard_job_duration_seconds"
    assert after.value(f"{duration}_count", **succeeded) >= before.value(f"{duration}_count", **succeeded) + 1
    assert after.value(f"{duration}_bucket", le="+Inf", **succeeded) == after.value(f"{duration}_count", **succeeded)
    ran_for = after.value(f"{duration}_sum", **succeeded) - before.value(f"{duration}_sum", **succeeded)
    assert 4 <= ran_for < 60, "the job's run time went into the sum"
    wait = "mlyard_job_queue_wait_seconds"
    assert after.value(f"{wait}_count", queue="default") >= before.value(f"{wait}_count", queue="default") + 1

    assert after.value("mlyard_scheduler_cycle_duration_seconds_count", policy=DEFAULT_POLICY) >= 1
    requests = "mlyard_http_request_duration_seconds_count"
    assert after.value(requests, method="POST", route="/api/v1/jobs", status_code="201") >= 1
    assert after.value(requests, method="GET", route="/api/v1/jobs/{job_id}", status_code="200") >= 1
    routes = {sample.labels["route"] for sample in after.samples(requests)}
    assert not [route for route in routes if re.search(r"/\d+(/|$)", route)], f"raw paths as labels: {routes}"

    assert after.value("mlyard_node_cpus") == 2, "MLYARD_NODE_CPUS of the test server"
    sampled = wait_until(lambda: (scrape := Scrape(server)).samples("mlyard_node_cpu_utilization_ratio") and scrape,
                         60, "the node sampler's gauges")
    assert 0 <= sampled.value("mlyard_node_cpu_utilization_ratio") <= 1
    assert sampled.value("mlyard_node_memory_used_bytes") > 0
    assert after.value("mlyard_node_cpus_allocated") == 0

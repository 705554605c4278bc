"""Resource usage through a real server: a busy job's CPU shows in `GET /jobs/{id}/resources`,
`mlyard metrics JOB --resources`, `mlyard show` and `mlyard nodes`; node samples are listed;
bad query values are refused naming the field."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil
import pytest
from conftest import (
    DATABASES,
    RunningServer,
    favour,
    start_server,
    stop_server,
    wait_until,
)

pytestmark = pytest.mark.slow


def api(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", timeout=30,
                        headers={"Authorization": f"Bearer {server.token()}"})


def favour_job(server: RunningServer, job_id: int) -> bool:
    """Raises the priority of the job's processes once they run (see `conftest.favour`)."""
    detail = server.cli_json("show", str(job_id))
    pids = [replica["pid"] for attempt in detail["attempts"] for replica in attempt["replicas"] if replica["pid"]]
    try:
        tree = [process for pid in pids for process in (psutil.Process(pid), *psutil.Process(pid).children(True))]
    except psutil.Error:
        return False
    for process in tree:
        favour(process.pid)
    return len(tree) >= 2  # the launcher and the command


@pytest.mark.parametrize("database", DATABASES)
def test_a_busy_jobs_cpu_shows_through_the_api_and_the_cli(tmp_path: Path, database: str) -> None:
    server = start_server(tmp_path / "home", database=database, MLYARD_SAMPLE_INTERVAL="1")
    try:
        job = server.cli_json("run", "--no-code", "--name", "busy", "--", "python", "-c", "while True: pass")
        job_id = job["id"]
        wait_until(lambda: favour_job(server, job_id), 60, "the busy job running")
        with api(server) as client:
            def busy_point() -> dict | None:
                answer = client.get(f"/jobs/{job_id}/resources").json()
                return next((point for point in answer["points"] if point["cpu_percent"] >= 80), None)

            point = wait_until(busy_point, 60, "a sample of the busy job at 80% of a core or more")
            assert point["memory_bytes"] > 1 << 20 and point["replicas"] == 1

            resources = client.get(f"/jobs/{job_id}/resources").json()
            [replica] = resources["replicas"]
            assert (replica["replica"], replica["rank"], replica["attempt"]) == ("worker-0", 0, 1)
            assert replica["processes"] >= 2  # the launcher and the command below it

            nodes = client.get("/nodes").json()
            assert nodes[0]["usage"]["memory_total_bytes"] > 0 and len(nodes[0]["usage"]["load_average"]) == 3
            assert nodes[0]["inventory"]["cpu_count"] == psutil.cpu_count()
            samples = client.get(f"/nodes/{nodes[0]['name']}/samples", params={"resolution": "raw"}).json()
            assert samples["resolution"] == "raw" and samples["samples"]

            for path, params, field in (
                (f"/nodes/{nodes[0]['name']}/samples", {"resolution": "5m"}, "resolution"),
                (f"/nodes/{nodes[0]['name']}/samples", {"since": "-1"}, "since"),
                (f"/jobs/{job_id}/resources", {"since": "yesterday"}, "since"),
                (f"/jobs/{job_id}/resources", {"since": "inf"}, "since"),
                (f"/jobs/{job_id}/resources", {"limit": "0"}, "limit"),
            ):
                answer = client.get(path, params=params)
                assert answer.status_code == 422, (path, params, answer.text)
                assert [detail["field"] for detail in answer.json()["details"]] == [field], answer.text
            assert client.get("/nodes/nowhere/samples").status_code == 404
            assert client.get("/jobs/999999/resources").status_code == 404

        shown = server.cli_json("metrics", str(job_id), "--resources")
        assert shown["job_id"] == job_id and max(point["cpu_percent"] for point in shown["points"]) >= 80
        table = server.cli("metrics", str(job_id), "--resources", "--since", "10m", check=True).stdout
        assert "CPU %" in table and "MEMORY" in table
        assert "usage      cpu" in server.cli("show", str(job_id), check=True).stdout
        assert "CPU BUSY" in server.cli("nodes", check=True).stdout

        wrong = server.cli("metrics", str(job_id), "--resources", "--since", "soon")
        assert wrong.returncode == 2 and "--since" in wrong.stderr and "Traceback" not in wrong.stderr
        server.cli("cancel", str(job_id), check=True)
    finally:
        stop_server(server)

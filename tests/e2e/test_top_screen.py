"""`mlyard top` against a real server with a busy job: the node row, the job with its CPU figure,
the same as JSON, and the refreshing screen (a frame after another when output is not a
terminal) ending cleanly on Ctrl-C."""

from __future__ import annotations

import re
import signal
import subprocess
import time

import psutil
import pytest
from conftest import MLYARD, REPOSITORY, RunningServer, favour, replica_pids, wait_until

pytestmark = pytest.mark.slow


def favoured(server: RunningServer, job_id: int) -> bool:
    """Raises the priority of the job's processes once they run, so the busy loop gets its core."""
    try:
        tree = [process for pid in replica_pids(server.cli_json("show", str(job_id)))
                for process in (psutil.Process(pid), *psutil.Process(pid).children(True))]
    except psutil.Error:
        return False
    for process in tree:
        favour(process.pid)
    return len(tree) >= 2


def test_top_shows_the_node_and_a_busy_job(server: RunningServer) -> None:
    job_id = server.cli_json("run", "--no-code", "--name", "top-busy", "--", "python", "-c", "while True: pass")["id"]
    try:
        wait_until(lambda: favoured(server, job_id), 60, "the busy job running")

        def busy_frame() -> dict | None:
            frame = server.cli_json("top", "--once")
            mine = [job for job in frame["jobs"] if job["job_id"] == job_id]
            return frame if mine and (mine[0]["cpu_percent"] or 0) >= 50 else None

        frame = wait_until(busy_frame, 60, "a frame with the busy job at half a core or more")
        assert set(frame) == {"at", "server", "nodes", "jobs"} and frame["server"] == server.url
        [node] = frame["nodes"]
        assert node["usage"]["cpu_percent"] >= 0 and node["usage"]["memory_total_bytes"] > 0
        assert node["inventory"]["cpu_count"] == psutil.cpu_count() and node["allocated_cpus"] >= 1
        [job] = [job for job in frame["jobs"] if job["job_id"] == job_id]
        assert (job["name"], job["queue"], job["status"], job["replicas"], job["cpus"]) == (
            "top-busy", "default", "RUNNING", 1, 1)
        assert job["nodes"] == [node["name"]] and job["measured"] == 1 and "user" in job
        assert job["memory_bytes"] > 1 << 20 and job["launched_at"] <= frame["at"]

        table = server.cli("top", "--once", check=True).stdout
        assert "NODE" in table and "ALLOCATED" in table and "holding resources" in table
        node_row = next(line for line in table.splitlines() if line.startswith(node["name"]))
        assert re.search(r"\d+%", node_row) and f"cpu {node['allocated_cpus']}/" in node_row
        job_row = next(line for line in table.splitlines() if "top-busy" in line)
        cpu = re.search(r"(\d+)% of 1", job_row)
        assert cpu and int(cpu.group(1)) >= 50 and str(job_id) in job_row, table

        watching = subprocess.Popen([MLYARD, "top", "--interval", "0.5"], cwd=REPOSITORY, env=server.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    text=True)
        time.sleep(3)
        watching.send_signal(signal.SIGINT)
        out, err = watching.communicate(timeout=30)
        assert watching.returncode == 0 and "Traceback" not in err, err
        assert out.count("mlyard top") >= 2 and "top-busy" in out
    finally:
        server.cli("cancel", str(job_id), check=True)

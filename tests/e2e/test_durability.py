"""Submissions survive the server: idempotent retries, a kill -9 under load, a full disk."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
from conftest import (
    DATABASES,
    RunningServer,
    process_gone,
    start_server,
    stop_server,
    wait_for,
)

SUBMITTER = Path(__file__).with_name("submitter.py")
HOLD = {"quota": {"gpu": 0, "cpu": 0, "memory": 0}, "borrow_limit": {"gpu": 0, "cpu": 0, "memory": 0}}


def api(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", timeout=60,
                        headers={"Authorization": f"Bearer {server.token()}"})


def kill_server(server: RunningServer) -> None:
    pid = json.loads((server.home / "server.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: process_gone(pid), timeout=10)


def all_jobs(server: RunningServer) -> list[dict]:
    with server.client() as client:  # every page
        return [job.model_dump(mode="json") for job in client.jobs(include_finished=True)]


def test_an_idempotency_key_makes_a_retry_return_the_first_job(server: RunningServer) -> None:
    spec = {"name": "once", "command": ["true"], "queue": "default"}
    with api(server) as client:
        first = client.post("/jobs", json=spec, headers={"Idempotency-Key": "k-once-1"})
        again = client.post("/jobs", json=spec, headers={"Idempotency-Key": "k-once-1"})
        assert first.status_code == again.status_code == 201
        assert again.json()["id"] == first.json()["id"]
        assert again.headers.get("Idempotent-Replayed") == "true" and "Idempotent-Replayed" not in first.headers

        other = client.post("/jobs", json={**spec, "name": "other"}, headers={"Idempotency-Key": "k-once-1"})
        assert other.status_code == 409
        assert other.json()["details"][0]["field"] == "headers.Idempotency-Key"
        assert f"job {first.json()['id']}" in other.json()["message"]

        bad = client.post("/jobs", json=spec, headers={"Idempotency-Key": "has space"})
        assert bad.status_code == 422 and bad.json()["details"][0]["field"] == "headers.Idempotency-Key"
        fresh = client.post("/jobs", json=spec, headers={"Idempotency-Key": "k-once-2"})
        assert fresh.status_code == 201 and fresh.json()["id"] != first.json()["id"]


@pytest.mark.slow
@pytest.mark.parametrize("database", DATABASES)
def test_a_server_killed_during_1000_concurrent_submissions_loses_none_and_duplicates_none(
    tmp_path: Path, database: str
) -> None:
    server = start_server(tmp_path / "home", database=database)
    try:
        with server.client() as client:
            client.set_queue("hold", HOLD)  # the jobs wait, so only submissions are measured
        clients, per_client = 4, 250
        outputs = [tmp_path / f"answered-{index}.txt" for index in range(clients)]
        processes = [
            subprocess.Popen([sys.executable, str(SUBMITTER), server.url, server.token(), f"c{index}",
                              str(per_client), "8", str(output)], stderr=subprocess.PIPE, text=True)
            for index, output in enumerate(outputs)
        ]

        def answered() -> int:
            return sum(len(output.read_text().splitlines()) for output in outputs if output.exists())

        assert wait_for(lambda: answered() >= 150, timeout=180, interval=0.05)
        kill_server(server)
        killed_at = answered()
        server.cli("server", "start", check=True, timeout=90)
        for process in processes:
            _, errors = process.communicate(timeout=600)
            assert process.returncode == 0, errors

        lines = [line.split() for output in outputs for line in output.read_text().splitlines()]
        assert killed_at < clients * per_client, "the kill came while submissions were in flight"
        assert len(lines) == clients * per_client, "every submission was answered 201 in the end"
        jobs = all_jobs(server)
        names = Counter(job["name"] for job in jobs)
        assert len(jobs) == clients * per_client and set(names.values()) == {1}, "no job lost, none twice"
        by_name = {job["name"]: job["id"] for job in jobs}
        assert all(by_name[name] == int(job_id) for name, _, job_id in lines), "each answer names the stored job"

        with api(server) as client:  # retries long after the fact still find their job
            for name, key, job_id in lines[:: len(lines) // 20]:
                spec = {"name": name, "command": ["true"], "queue": "hold",
                        "roles": [{"resources": {"memory": "64Mi"}}]}
                replay = client.post("/jobs", json=spec, headers={"Idempotency-Key": key})
                assert replay.status_code == 201 and replay.json()["id"] == int(job_id)
        assert len(all_jobs(server)) == clients * per_client
    finally:
        stop_server(server)


def _fill(directory: Path) -> None:
    """Writes until not one more byte fits (big blocks first, then ever smaller ones)."""
    descriptor = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(descriptor, b"\0" * size)
            except OSError:
                size //= 2
    finally:
        os.close(descriptor)


@pytest.mark.slow
def test_a_full_disk_refuses_submissions_clearly_and_keeps_the_database_and_the_server(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)], check=False,
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"a small disk needs a tmpfs mount, which needs root: {mounted.stderr.strip()}")
    server = None
    try:
        server = start_server(disk / "home", MLYARD_STOP_GRACE="1")
        before = server.cli_json("run", "--no-code", "--name", "before", "--", "echo", "stored")
        assert server.cli("wait", str(before["id"]), "--timeout", "60").returncode == 0
        code = tmp_path / "code"
        code.mkdir()
        (code / "weights.bin").write_bytes(os.urandom(2 << 20))

        # An empty write-ahead log makes the next commit need new space on the disk.
        with sqlite3.connect(server.home / "mlyard.db") as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        _fill(disk)

        refused = server.cli("run", "--no-code", "--name", "refused", "--", "true")
        assert refused.returncode != 0
        assert "disk is full" in refused.stderr and "Traceback" not in refused.stderr + refused.stdout
        upload = server.cli("run", "--context", str(code), "--name", "with-code", "--", "true")
        assert upload.returncode != 0
        assert "disk is full" in upload.stderr and "Traceback" not in upload.stderr + upload.stdout

        with server.client() as client:
            assert client.health().status == "ok"
            names = [job.name for job in client.jobs(include_finished=True)]
        assert names == ["before"], "nothing half-written is left behind"
        assert not any((server.home / "blobs" / "tmp").iterdir()), "no partial upload is left"
        with sqlite3.connect(f"file:{server.home / 'mlyard.db'}?mode=ro", uri=True) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)

        (disk / "filler").unlink()
        after = server.cli_json("run", "--context", str(code), "--name", "after", "--", "ls")
        assert server.cli("wait", str(after["id"]), "--timeout", "60").returncode == 0
        assert "weights.bin" in server.cli("logs", str(after["id"]), check=True).stdout
    finally:
        if server is not None:
            stop_server(server)
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("database", DATABASES)
def test_a_ddp_job_outlives_a_kill_9_of_the_server_and_finishes_with_its_whole_log(
    tmp_path: Path, database: str
) -> None:
    server = start_server(tmp_path / "home", database=database)
    try:
        job_id = server.cli_json(
            "submit", "examples/digits-ddp.yaml",
            "--set", 'command=["python", "examples/digits_ddp.py", "--epoch-delay", "0.4"]',
        )["id"]
        assert wait_for(lambda: "epoch 3/20" in server.cli("logs", str(job_id)).stdout, timeout=180, interval=0.3)
        pids = [replica["pid"] for replica in server.cli_json("show", str(job_id))["attempts"][0]["replicas"]]
        kill_server(server)
        assert not any(process_gone(pid) for pid in pids), "the replicas outlive the server"
        server.cli("server", "start", check=True, timeout=90)
        with server.client() as client:
            assert client.health().adopted == 2
        assert server.cli("wait", str(job_id), "--timeout", "300").returncode == 0

        detail = server.cli_json("show", str(job_id))
        assert detail["status"] == "SUCCEEDED" and detail["attempt_count"] == 1
        assert [replica["exit_code"] for replica in detail["attempts"][0]["replicas"]] == [0, 0]
        log = server.cli("logs", str(job_id), check=True).stdout
        epochs = [int(epoch) for epoch in re.findall(r"^epoch (\d+)/20 ", log, re.MULTILINE)]
        assert epochs == list(range(1, 21)), "the log holds what was written before and after the kill"
        accuracy = float(re.search(r"^final test_accuracy=([0-9.]+)", log, re.MULTILINE).group(1))
        assert accuracy >= 0.95
    finally:
        stop_server(server)

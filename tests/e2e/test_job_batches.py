"""Batch submission (`POST /api/v1/jobs:batch`): all or nothing, errors naming the item, and
idempotency keys per item that make a retry safe, across a kill -9 of the server too."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from conftest import RunningServer, process_gone, start_server, stop_server, wait_for

from mlyard.client import Client

HOLD = {"quota": {"gpu": 0, "cpu": 0, "memory": 0}, "borrow_limit": {"gpu": 0, "cpu": 0, "memory": 0}}
"""A queue whose jobs wait: nothing runs, so the tests see submissions only."""


def api(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", timeout=60,
                        headers={"Authorization": f"Bearer {server.token()}"})


def held_queue(server: RunningServer) -> str:
    name = f"batch-{uuid.uuid4().hex[:10]}"
    with server.client() as client:
        client.set_queue(name, HOLD)
    return name


def spec(queue: str, name: str, **fields: object) -> dict:
    return {"name": name, "command": ["true"], "queue": queue, "roles": [{"resources": {"memory": "64Mi"}}],
            **fields}


def stored(server: RunningServer, queue: str) -> int:
    with api(server) as client:
        response = client.get("/jobs", params={"queue": queue, "all": "true", "limit": 1})
        response.raise_for_status()
        return int(response.headers["X-Total-Count"])


def test_a_batch_answers_in_order_and_a_repeat_replays_the_items_with_keys(server: RunningServer) -> None:
    queue = held_queue(server)
    items = [{"spec": spec(queue, f"item-{index}"), "idempotency_key": f"{queue}-{index}"} for index in range(5)]
    items.append({"spec": spec(queue, "no-key")})
    with api(server) as client:
        first = client.post("/jobs:batch", json={"jobs": items})
        assert first.status_code == 201, first.text
        answers = first.json()["items"]
        assert [item["job"]["name"] for item in answers] == [f"item-{index}" for index in range(5)] + ["no-key"]
        assert not any(item["replayed"] for item in answers)
        assert all(item["job"]["status"] == "QUEUED" for item in answers)
        ids = [item["job"]["id"] for item in answers]
        assert ids == sorted(ids) and len(set(ids)) == 6

        again = client.post("/jobs:batch", json={"jobs": items}).json()["items"]
        assert [item["job"]["id"] for item in again[:5]] == ids[:5] and all(item["replayed"] for item in again[:5])
        assert again[5]["job"]["id"] not in ids and not again[5]["replayed"], "an item without a key is new"
        # The keys are the single submission's keys: the same caller, key and spec replay there too.
        single = client.post("/jobs", json=spec(queue, "item-2"), headers={"Idempotency-Key": f"{queue}-2"})
        assert single.status_code == 201 and single.json()["id"] == ids[2]
        assert single.headers.get("Idempotent-Replayed") == "true"
        assert stored(server, queue) == 7

        changed = [*items[:2], {**items[2], "spec": spec(queue, "changed")}]
        conflict = client.post("/jobs:batch", json={"jobs": changed})
        assert conflict.status_code == 409
        assert conflict.json()["details"][0]["field"] == "jobs.2.idempotency_key"
        assert f"job {ids[2]}" in conflict.json()["message"]
        twice = client.post("/jobs:batch", json={"jobs": [{"spec": spec(queue, "a"), "idempotency_key": "same"},
                                                          {"spec": spec(queue, "b"), "idempotency_key": "same"}]})
        assert twice.status_code == 422 and twice.json()["details"][0]["field"] == "jobs.1.idempotency_key"
    assert stored(server, queue) == 7, "refused batches store nothing"


def test_the_same_batch_sent_twice_at_once_stores_its_jobs_once(server: RunningServer) -> None:
    queue = held_queue(server)
    items = [{"spec": spec(queue, f"race-{index}"), "idempotency_key": f"{queue}-{index}"} for index in range(50)]

    def send(_: int) -> list[dict]:
        with api(server) as client:
            response = client.post("/jobs:batch", json={"jobs": items})
            assert response.status_code == 201, response.text
            return response.json()["items"]

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(send, range(2)))
    assert [item["job"]["id"] for item in answers[0]] == [item["job"]["id"] for item in answers[1]]
    flags = [{item["replayed"] for item in answer} for answer in answers]
    assert sorted(flags, key=sorted) == [{False}, {True}], "one stored them all, the other got them all"
    assert stored(server, queue) == 50


@pytest.mark.parametrize("server", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("change", "field", "code"), [
    ({"roles": [{"resources": {"cpu": -1}}]}, "jobs.3.spec.roles.0.resources.cpu", "invalid_request"),
    ({"queue": "no-such-queue"}, "jobs.3.spec.queue", "invalid_request"),
    ({"roles": [{"resources": {"cpu": 512}}]}, "jobs.3.spec.roles", "unschedulable"),
    ({"env": {"TOKEN": "***"}}, "jobs.3.spec.env.TOKEN", "invalid_request"),
])
def test_a_batch_with_one_bad_item_stores_nothing_and_names_the_item_and_field(
    server: RunningServer, change: dict, field: str, code: str
) -> None:
    queue = held_queue(server)
    items = [{"spec": spec(queue, f"good-{index}"), "idempotency_key": f"{queue}-{index}"} for index in range(6)]
    items[3] = {"spec": {**spec(queue, "bad"), **change}, "idempotency_key": f"{queue}-3"}
    with api(server) as client:
        refused = client.post("/jobs:batch", json={"jobs": items})
        assert refused.status_code == 422, refused.text
        body = refused.json()
        assert body["error"] == code
        assert field in [detail["field"] for detail in body["details"]]
        assert "jobs.3" in body["message"]
        assert stored(server, queue) == 0

        # Nothing of the refused batch holds on: its keys are free, so the fixed batch stores all.
        items[3] = {"spec": spec(queue, "fixed"), "idempotency_key": f"{queue}-3"}
        accepted = client.post("/jobs:batch", json={"jobs": items})
        assert accepted.status_code == 201 and not any(item["replayed"] for item in accepted.json()["items"])
    assert stored(server, queue) == 6


@pytest.mark.parametrize("server", ["sqlite"], indirect=True)
def test_a_batch_holds_1_to_1000_jobs(server: RunningServer) -> None:
    with api(server) as client:
        for jobs in ([], [{"spec": spec("default", "x")}] * 1001):
            response = client.post("/jobs:batch", json={"jobs": jobs})
            assert response.status_code == 422 and response.json()["details"][0]["field"] == "jobs"


class AnswerThief:
    """A TCP relay in front of a server that, for the first batch submission it carries, reads
    the server's whole answer, kills the server with SIGKILL and closes the client's connection
    without passing the answer on: the batch was committed, and its answer is lost."""

    def __init__(self, server: RunningServer):
        self.server = server
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stolen: bytes | None = None
        self.killed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(downstream,), daemon=True).start()

    def _relay(self, downstream: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.server.port))
        except OSError:  # the server is down: the client sees a dropped connection, and retries
            downstream.close()
            return
        carrying_batch = threading.Event()
        threading.Thread(target=self._forward_requests, args=(downstream, upstream, carrying_batch),
                         daemon=True).start()
        answer = b""
        try:
            while data := upstream.recv(65536):
                if carrying_batch.is_set() and self.stolen is None:
                    answer += data
                    if self._complete(answer):
                        self.stolen = answer
                        self._kill_server()
                        return
                    continue
                downstream.sendall(data)
        except OSError:
            pass
        finally:
            for end in (downstream, upstream):
                # shutdown, not only close: the other thread's recv would keep the socket open.
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()

    @staticmethod
    def _forward_requests(downstream: socket.socket, upstream: socket.socket, carrying_batch: threading.Event) -> None:
        try:
            while data := downstream.recv(65536):
                if b"POST /api/v1/jobs:batch " in data:
                    carrying_batch.set()
                upstream.sendall(data)
        except OSError:
            pass

    @staticmethod
    def _complete(answer: bytes) -> bool:
        head, separator, body = answer.partition(b"\r\n\r\n")
        if not separator:
            return False
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return len(body) >= length

    def _kill_server(self) -> None:
        pid = json.loads((self.server.home / "server.json").read_text())["pid"]
        os.kill(pid, signal.SIGKILL)
        assert wait_for(lambda: process_gone(pid), timeout=10)
        self.killed.set()


def test_batch_keys_survive_a_kill_9_between_the_commit_and_the_answer(tmp_path: Path) -> None:
    server = start_server(tmp_path / "home")
    thief = AnswerThief(server)
    try:
        queue = held_queue(server)
        items = [(spec(queue, f"survivor-{index}"), f"{queue}-{index}") for index in range(20)]
        items.append((spec(queue, "client-keyed"), None))  # the client makes its key, and keeps it for retries
        result: list = []
        with Client(f"http://127.0.0.1:{thief.port}", server.token(), retry_seconds=120) as client:
            client.health()  # reached once: a connection lost later means a restart, which is retried
            submitting = threading.Thread(target=lambda: result.extend(client.submit_batch(items)))
            submitting.start()
            assert thief.killed.wait(60), "the batch was answered and its answer stolen"
            server.cli("server", "start", check=True, timeout=90)
            submitting.join(120)
        assert not submitting.is_alive()

        lost = json.loads(thief.stolen.partition(b"\r\n\r\n")[2])
        assert thief.stolen.startswith(b"HTTP/1.1 201")
        assert [job.id for job, _ in result] == [item["job"]["id"] for item in lost["items"]]
        assert all(replayed for _, replayed in result), "the retry got the jobs the lost answer named"
        assert [job.name for job, _ in result] == [item[0]["name"] for item in items]
        assert stored(server, queue) == len(items), "nothing was stored twice"
    finally:
        thief.close()
        stop_server(server)

"""Job listings page by keyset (`after`), newest first, with a total that follows the filters."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter

import httpx
import pytest
from conftest import RunningServer

from mlyard.client import Client
from mlyard.spec import JobStatus

HOLD = {"quota": {"gpu": 0, "cpu": 0, "memory": 0}, "borrow_limit": {"gpu": 0, "cpu": 0, "memory": 0}}
"""A queue whose jobs wait: nothing runs, and a cancelled job ends at once."""


def held_queue(client: Client, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    client.set_queue(name, HOLD)
    return name


def specs(queue: str, prefix: str, count: int) -> list[tuple[dict, None]]:
    return [({"name": f"{prefix}-{index}", "command": ["true"], "queue": queue,
              "roles": [{"resources": {"memory": "64Mi"}}]}, None) for index in range(count)]


def every_page(client: Client, queue: str, *, include_finished: bool, pause: float) -> list[int]:
    """The ids of all pages of 7, each page asked for after the `after` of the one before."""
    seen: list[int] = []
    after = None
    while True:
        page, _total, after = client.jobs_page(queue=queue, include_finished=include_finished, after=after, limit=7)
        seen += [job.id for job in page]
        if after is None:
            return seen
        time.sleep(pause)


@pytest.mark.parametrize("server", ["sqlite"], indirect=True)
def test_keyset_paging_shows_every_job_once_while_jobs_are_submitted_and_cancelled(server: RunningServer) -> None:
    with server.client() as client:
        queue = held_queue(client, "paging")
        existing = [job.id for job, _ in client.submit_batch(specs(queue, "old", 120))]
    submitted: list[int] = []
    cancelled: list[tuple[float, int]] = []
    stop = threading.Event()

    def submit() -> None:
        with server.client() as own:
            while not stop.is_set():
                submitted.extend(job.id for job, _ in own.submit_batch(specs(queue, "new", 3)))
                time.sleep(0.01)

    def cancel() -> None:
        with server.client() as own:
            for job_id in random.Random(19).sample(existing, 60):
                if stop.is_set():
                    return
                own.cancel(job_id)
                cancelled.append((time.monotonic(), job_id))
                time.sleep(0.02)

    workers = [threading.Thread(target=submit), threading.Thread(target=cancel)]
    for worker in workers:
        worker.start()
    try:
        with server.client() as client:
            started = time.monotonic()
            unfinished = every_page(client, queue, include_finished=False, pause=0.02)
            everything = every_page(client, queue, include_finished=True, pause=0.02)
            ended = time.monotonic()
    finally:
        stop.set()
        for worker in workers:
            worker.join(60)

    assert submitted and any(started < at < ended for at, _ in cancelled), "jobs came and went during the paging"
    for listing in (unfinished, everything):
        assert [job_id for job_id, count in Counter(listing).items() if count > 1] == [], "no job twice"
        assert listing == sorted(listing, reverse=True), "newest first"
        assert set(listing) <= set(existing) | set(submitted)
    assert set(existing) <= set(everything), "every job that was there when the paging began"
    still_waiting = set(existing) - {job_id for _, job_id in cancelled}
    assert still_waiting <= set(unfinished), "every job that stayed unfinished throughout"


def test_the_total_follows_the_filters_and_the_next_links_walk_the_pages(server: RunningServer) -> None:
    with server.client() as client:
        queue = held_queue(client, "counted")
        other = held_queue(client, "counted")
        ids = [job.id for job, _ in client.submit_batch(specs(queue, "tc", 60))]
        client.submit_batch(specs(other, "tc", 3))
        for job_id in ids[:5]:
            client.cancel(job_id)

        jobs, total, after = client.jobs_page(queue=queue)
        assert (len(jobs), total, after) == (50, 55, jobs[-1].id), "50 by default, 55 unfinished in all"
        assert [job.id for job in client.jobs(queue=queue)] == ids[5:][::-1], "jobs() reads every page"
        assert client.jobs_page(queue=queue, include_finished=True)[1] == 60
        assert client.jobs_page(queue=queue, statuses=[JobStatus.CANCELLED])[1] == 5
        assert client.jobs_page(queue=queue, include_finished=True, search="tc-1")[1] == 11  # tc-1, tc-10 … tc-19
        assert client.jobs_page(search=f"{queue[-10:]}")[1] == 0

    with httpx.Client(base_url=f"{server.url}/api/v1", headers={"Authorization": f"Bearer {server.token()}"},
                      timeout=30) as http:
        first = http.get("/jobs", params={"queue": queue, "limit": 30})
        assert first.headers["X-Total-Count"] == "55" and first.headers["X-Next-After"] == str(first.json()[-1]["id"])
        second = http.get(first.links["next"]["url"])
        assert [job["id"] for job in second.json()] == ids[5:30][::-1]
        assert second.headers["X-Total-Count"] == "55"
        assert "X-Next-After" not in second.headers and "link" not in second.headers, "the last page"
        by_offset = http.get("/jobs", params={"queue": queue, "limit": 30, "offset": 30})
        assert by_offset.json() == second.json(), "offset still pages, for older clients"
        for params in ({"limit": 1001}, {"limit": 0}, {"after": 0}):
            refused = http.get("/jobs", params=params)
            assert refused.status_code == 422 and refused.json()["details"][0]["field"] == next(iter(params))

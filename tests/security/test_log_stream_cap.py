"""Live log streams are capped per user, a stream's slot comes back when its client goes away,
and open streams leave the server free to answer everything else: a stream that asked the
database on a worker thread every half second made 300 of them hold up `GET /jobs` for seconds."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server, wait_for

CAP = 16
PROMPT = 5.0
"""Seconds the API has to answer while the streams are open (it takes milliseconds; 300 streams
polling the database kept it waiting 2-4 s)."""


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("stream-cap"), MLYARD_MAX_LOG_STREAMS_PER_USER=str(CAP))
    yield running
    stop_server(running)


def browser(server: RunningServer) -> httpx.Client:
    """An HTTP client logged in to the web UI with the admin's token, as a browser would be."""
    client = httpx.Client(base_url=server.url, timeout=10, headers={"Origin": server.url},
                          limits=httpx.Limits(max_connections=None, max_keepalive_connections=None))
    form = client.get("/login").text
    fields = {"token": server.token(), "next": "/jobs"}
    if (match := re.search(r'name="login_csrf" value="([^"]*)"', form)) is not None:
        fields["login_csrf"] = match.group(1)
    assert client.post("/login", data=fields).status_code == 303
    return client


class Stream:
    """An open event stream; its line iterator is kept, since dropping it closes the response."""

    def __init__(self, client: httpx.Client, job_id: int) -> None:
        self.response = client.send(client.build_request("GET", f"/jobs/{job_id}/logs/stream"), stream=True)
        self.status_code = self.response.status_code
        if self.status_code == 200:
            self.lines = self.response.iter_lines()
            assert next(self.lines).startswith("retry:")  # being served: its slot is held

    def close(self) -> None:
        self.response.close()


def open_stream(client: httpx.Client, job_id: int) -> Stream:
    return Stream(client, job_id)


def test_streams_beyond_the_cap_are_refused_until_one_closes(capped: RunningServer) -> None:
    job = capped.cli_json("run", "--no-code", "--name", "ticking", "--", "sh", "-c",
                          "while true; do echo tick; sleep 1; done")
    client = browser(capped)
    try:
        streams = [open_stream(client, job["id"]) for _ in range(CAP)]
        assert [stream.status_code for stream in streams] == [200] * CAP
        refused = open_stream(client, job["id"])
        assert refused.status_code == 429
        assert refused.response.headers["Retry-After"].isdigit()
        assert "MLYARD_MAX_LOG_STREAMS_PER_USER" in refused.response.read().decode()
        # With the cap's worth of streams open, the API still answers at once.
        with httpx.Client(base_url=f"{capped.url}/api/v1", timeout=PROMPT,
                          headers={"Authorization": f"Bearer {capped.token()}"}) as api:
            for _ in range(5):
                assert api.get("/jobs").status_code == 200

        streams.pop().close()
        assert wait_for(lambda: _accepted(client, job["id"], streams), timeout=10)
    finally:
        for stream in streams:
            stream.close()
        client.close()
        capped.cli("cancel", str(job["id"]))


def _accepted(client: httpx.Client, job_id: int, streams: list[Stream]) -> bool:
    response = open_stream(client, job_id)
    if response.status_code == 200:
        streams.append(response)
        return True
    response.close()
    return False

"""Canaries for the security tests: an HTTP listener on 127.0.0.1 that counts every request it
gets, and files with a random marker outside MLYARD_HOME. A test hands the canary's URL or path
to the server as hostile input and then asserts that the listener got no hit and that no answer,
log or page holds the marker.

Test modules of tests/security import these directly (`from security_support import ...`); the
fixtures are plain pytest fixtures, so importing one into a module makes it usable there."""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest


@dataclass
class Hit:
    method: str
    path: str
    client: str


@dataclass
class HttpCanary:
    """A listener on 127.0.0.1 that answers 404 to everything and records each request."""

    port: int = 0
    hits: list[Hit] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def count(self) -> int:
        return len(self.hits)

    def start(self) -> HttpCanary:
        canary = self

        class Recorder(BaseHTTPRequestHandler):
            def _record(self) -> None:
                canary.hits.append(Hit(self.command, self.path, self.client_address[0]))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _record

            def log_message(self, format: str, *arguments: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def assert_untouched(self) -> None:
        assert self.hits == [], f"the canary at {self.url} was reached: {self.hits}"

    def __enter__(self) -> HttpCanary:
        return self.start()

    def __exit__(self, *exception: object) -> None:
        self.stop()


@dataclass(frozen=True)
class FileCanary:
    """A readable file whose content is a random marker no server answer may ever hold."""

    path: Path
    marker: str

    def leaked_in(self, text: str | bytes) -> bool:
        if isinstance(text, bytes):
            return self.marker.encode() in text
        return self.marker in text

    def assert_not_in(self, text: str | bytes, where: str = "the answer") -> None:
        assert not self.leaked_in(text), f"{where} holds the content of the canary file {self.path}"


def plant_file_canary(directory: Path, name: str = "canary.txt") -> FileCanary:
    """Writes a canary file into `directory` (world-readable, so a job account could read it too)."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = f"MLYARD-CANARY-{secrets.token_hex(16)}"
    path = directory / name
    path.write_text(marker + "\n", encoding="ascii")
    path.chmod(0o644)
    return FileCanary(path=path, marker=marker)


def web_session_cookie(url: str, token: str) -> str:
    """Logs in to the web UI at `url` with an API token as a browser would (the login page's
    CSRF value, a same-origin post) and returns the `Cookie` header value of the session."""
    with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as browser:
        form = browser.get("/login")
        found = re.search(r'name="login_csrf" value="([^"]*)"', form.text)
        answer = browser.post("/login", data={"token": token, "next": "/jobs",
                                              "login_csrf": found.group(1) if found else ""},
                              headers={"Origin": url, "Sec-Fetch-Site": "same-origin"})
        assert answer.status_code == 303, f"web login failed: {answer.status_code} {answer.text[:300]}"
        session = {name: value for name, value in answer.cookies.items() if "csrf" not in name}
        assert session, f"the login set no session cookie: {answer.headers}"
        return "; ".join(f"{name}={value}" for name, value in session.items())


@pytest.fixture
def http_canary() -> Iterator[HttpCanary]:
    with HttpCanary() as canary:
        yield canary


@pytest.fixture(scope="module")
def module_http_canary() -> Iterator[HttpCanary]:
    with HttpCanary() as canary:
        yield canary


@pytest.fixture(scope="module")
def file_canary(tmp_path_factory: pytest.TempPathFactory) -> FileCanary:
    """A canary in a folder of its own, beside (never inside) any MLYARD_HOME the module starts."""
    return plant_file_canary(tmp_path_factory.mktemp("outside-home"))

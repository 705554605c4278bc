"""Path traversal: every text parameter of every route (the API's from its OpenAPI document, the
pages' and `/static` from the application's routes) gets each value of a traversal corpus, sent
byte for byte as an authenticated admin. No answer may be a 5xx, hold a canary file's content
(one outside MLYARD_HOME, one in its parent), `/etc/passwd`, the database or the admin token, and
`/static` may answer 200 only with a file of the static folder. The canaries must survive."""

from __future__ import annotations

import http.client
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock
from urllib.parse import quote

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server
from security_support import FileCanary, plant_file_canary, web_session_cookie

from mlyard.web.templating import STATIC_DIRECTORY

pytestmark = pytest.mark.slow  # a server and a job, then about a thousand requests

INTEGER_NAMES = {"job_id", "token_id", "attempt", "offset", "limit", "after", "before_id", "page_number"}
FILLERS = {"job_id": None, "token_id": "1", "attempt": "1", "name": "default", "user": "admin"}
FORBIDDEN_CONTENT = [b"root:x:0:0", b"SQLite format 3"]


@dataclass
class Target:
    server: RunningServer
    canaries: list[FileCanary]
    job: int
    cookie: str

    def forbidden(self) -> list[bytes]:
        return [canary.marker.encode() for canary in self.canaries] + FORBIDDEN_CONTENT + [self.server.token().encode()]


def _encoded(text: str) -> str:
    return quote(text, safe="")


def corpus(canaries: list[FileCanary]) -> list[str]:
    """Values as they go into the URL: some already percent-encoded, some raw on purpose."""
    outside, parent = canaries
    values = [
        "..", "%2E%2E", ".", "../", "..%2F", "../../../../etc/passwd", _encoded("../../../../etc/passwd"),
        "%2e%2e%2f", "%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd", "%252e%252e%252f",
        "%252e%252e%252f%252e%252e%252fetc%252fpasswd", "..\\..\\..\\etc\\passwd", "..%5c..%5c..%5cetc%5cpasswd",
        _encoded("/etc/passwd"), _encoded(str(outside.path)), _encoded("../" * 12 + str(outside.path)[1:]),
        "%00", "x%00.txt", "..%2F%00", "a" * 5000, "....//", "....%2F%2F....%2F%2Fetc%2Fpasswd",
        "%E2%80%A4%E2%80%A4%2F", "%EF%BC%8E%EF%BC%8E%2Fetc%2Fpasswd", "%C0%AE%C0%AE%2F", "%E2%80%A5%2F",
    ]
    # The parent of MLYARD_HOME is one to four levels above the folders a name could be joined to.
    values += [_encoded("../" * depth + parent.path.name) for depth in range(1, 5)]
    return values


def _flat_routes(routes: list) -> Iterator[tuple[str, object]]:
    """(path, route) of the application, through the routers FastAPI includes lazily."""
    for route in routes:
        if hasattr(route, "original_router"):
            prefix = route.include_context.prefix
            for inner, found in _flat_routes(route.original_router.routes):
                yield prefix + inner, found
        elif hasattr(route, "path"):
            yield route.path, route


def _is_integer(parameter) -> bool:
    annotation = str(getattr(parameter.field_info, "annotation", ""))
    return parameter.name in INTEGER_NAMES or annotation in {"<class 'int'>", "int | None", "typing.Optional[int]"}


def page_parameters(server: RunningServer) -> list[tuple[str, str, str, str]]:
    """(method, path template, parameter, "path"|"query") of the pages outside the API document."""
    from mlyard.server.app import create_app
    from mlyard.server.settings import ServerSettings

    with mock.patch.dict(os.environ, server.env, clear=True):
        app = create_app(ServerSettings.from_environment())
    found = []
    for path, route in _flat_routes(app.routes):
        if path.startswith("/api/") or getattr(route, "include_in_schema", True) or "GET" not in route.methods:
            continue
        dependant = getattr(route, "dependant", None)
        if dependant is None:  # the API docs' own pages
            continue
        for kind, parameters in (("path", dependant.path_params), ("query", dependant.query_params)):
            found += [("GET", path, parameter.name, kind) for parameter in parameters if not _is_integer(parameter)]
    return found


def api_parameters(document: dict) -> list[tuple[str, str, str, str]]:
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                types = {schema.get("type")} | {option.get("type") for option in schema.get("anyOf", [])}
                if parameter["in"] in {"path", "query"} and "string" in types and "enum" not in schema:
                    found.append((method.upper(), path, parameter["name"], parameter["in"]))
    return found


def _url(path: str, parameter: str, kind: str, value: str, job: int) -> str:
    filled = path
    for name in [part[1:-1] for part in path.replace("}", "}/").split("/") if part.startswith("{")]:
        filler = str(job) if name == "job_id" else FILLERS.get(name, "default")
        filled = filled.replace("{" + name + "}", value if (name == parameter and kind == "path") else filler)
    return filled + (f"?{parameter}={value}" if kind == "query" else "")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    base = tmp_path_factory.mktemp("traversal")
    canaries = [plant_file_canary(tmp_path_factory.mktemp("outside-home")), plant_file_canary(base, "parent-canary.txt")]
    server = start_server(base / "home", MLYARD_JOB_USERS="off")
    try:
        job = server.cli_json("run", "--no-code", "--name", "traversal", "--", "python", "-c", "print('hello')")["id"]
        headers = {"Authorization": f"Bearer {server.token()}"}
        deadline = time.monotonic() + 60
        while httpx.get(f"{server.url}/api/v1/jobs/{job}", headers=headers).json()["status"] != "SUCCEEDED":
            assert time.monotonic() < deadline, "the job did not succeed"
            time.sleep(0.3)
        yield Target(server, canaries, job, web_session_cookie(server.url, server.token()))
    finally:
        stop_server(server)


def _send(connection: http.client.HTTPConnection, method: str, url: str, target: Target) -> tuple[int, bytes]:
    """One request with exactly these bytes in its target (http.client does not normalise paths)."""
    body = b"{}" if method in {"PUT", "PATCH", "POST"} else None
    connection.request(method, url, body=body, headers={
        "Authorization": f"Bearer {target.server.token()}", "Cookie": target.cookie,
        "Content-Type": "application/json", "Host": f"127.0.0.1:{target.server.port}"})
    response = connection.getresponse()
    return response.status, response.read()


def _check(status: int, body: bytes, request: str, target: Target) -> list[str]:
    problems = []
    if status >= 500:
        problems.append(f"{request}: {status} {body[:200]!r}")
    problems += [f"{request}: answered content from outside ({content[:20]!r}…)"
                 for content in target.forbidden() if content in body]
    return problems


def _run(requests: list[tuple[str, str]], target: Target) -> list[str]:
    problems = []
    connection = http.client.HTTPConnection("127.0.0.1", target.server.port, timeout=30)
    for method, url in requests:
        try:
            status, body = _send(connection, method, url, target)
        except (http.client.HTTPException, OSError) as error:
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", target.server.port, timeout=30)
            problems.append(f"{method} {url[:120]}: no answer ({error!r})")
            continue
        problems += _check(status, body, f"{method} {url[:120]}", target)
    connection.close()
    return problems


def test_no_text_parameter_of_any_route_reads_outside(target: Target) -> None:
    document = httpx.get(f"{target.server.url}/api/v1/openapi.json").json()
    parameters = api_parameters(document) + page_parameters(target.server)
    named = {parameter for _, _, parameter, _ in parameters}
    assert {"digest", "name", "replica", "user", "chart", "node"} <= named, named  # the walk still finds them
    values = corpus(target.canaries)
    requests = [(method, _url(path, parameter, kind, value, target.job))
                for method, path, parameter, kind in parameters for value in values]
    started = time.monotonic()
    problems = _run(requests, target)
    print(f"{len(requests)} requests on {len(parameters)} parameters in {time.monotonic() - started:.1f}s")
    assert not problems, "\n".join(problems[:40])
    for canary in target.canaries:
        assert canary.path.read_text().strip() == canary.marker, f"{canary.path} was changed"


def test_static_files_answer_only_files_of_the_static_folder(target: Target) -> None:
    inside = {path.read_bytes() for path in Path(STATIC_DIRECTORY).rglob("*") if path.is_file()}
    values = corpus(target.canaries) + ["..%2Ftemplating.py", "../templating.py", "..%2F__init__.py",
                                        "%2e%2e/%2e%2e/__init__.py", "..%2F..%2Fserver%2Fapp.py"]
    answered_outside, problems = [], []
    connection = http.client.HTTPConnection("127.0.0.1", target.server.port, timeout=30)
    for value in values:
        url = f"/static/{value}"
        status, body = _send(connection, "GET", url, target)
        problems += _check(status, body, f"GET {url[:120]}", target)
        if status == 200 and body not in inside:
            answered_outside.append(url[:120])
    connection.close()
    assert not problems, "\n".join(problems)
    assert not answered_outside, answered_outside
    real = sorted(path for path in Path(STATIC_DIRECTORY).rglob("*") if path.is_file())[0]
    url = "/static/" + real.relative_to(STATIC_DIRECTORY).as_posix()
    assert _send(http.client.HTTPConnection("127.0.0.1", target.server.port), "GET", url, target)[0] == 200, url


def test_the_check_sees_each_kind_of_leak(target: Target) -> None:
    for content in target.forbidden():
        assert _check(200, b"x" + content + b"y", "GET /x", target), content
    assert _check(502, b"", "GET /x", target)
    assert not _check(404, b"not found", "GET /x", target)

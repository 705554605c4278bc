"""Every answer carries the strict Content-Security-Policy and the other security headers, a
`Host` the server is not known by answers 400 (DNS rebinding), and the API docs page loads
Swagger UI from this server's own files and renders under the policy in Chromium."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from browsing import Visit, expect
from conftest import RunningServer, start_server, stop_server

from mlyard.server.http.allowed_hosts import default_hosts, host_of, parse_hosts
from mlyard.server.http.security_headers import CONTENT_SECURITY_POLICY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("mlyard-headers"))
    yield running
    stop_server(running)


def test_pages_api_answers_and_files_carry_the_security_headers(server: RunningServer) -> None:
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY and "'unsafe-eval'" not in CONTENT_SECURITY_POLICY
    with httpx.Client(base_url=server.url) as http:
        for path in ("/login", "/jobs", "/api/v1/health", "/api/v1/jobs", "/static/app.js", "/no-such-page"):
            headers = http.get(path).headers
            assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path
            assert "frame-ancestors 'none'" in headers["content-security-policy"]
            assert (headers["x-content-type-options"], headers["referrer-policy"], headers["x-frame-options"]) == (
                "nosniff", "same-origin", "DENY"), path


def test_a_host_the_server_is_not_known_by_answers_400_even_without_a_token(server: RunningServer) -> None:
    with httpx.Client(base_url=server.url) as http:
        for path in ("/api/v1/health", "/login", "/api/v1/openapi.json"):
            answer = http.get(path, headers={"Host": f"rebound.evil.example:{server.port}"})
            assert answer.status_code == 400, path
            assert "MLYARD_ALLOWED_HOSTS" in answer.json()["message"]
        for host in (f"localhost:{server.port}", f"127.0.0.1:{server.port}", "localhost"):
            assert http.get("/api/v1/health", headers={"Host": host}).status_code == 200, host


def test_allowed_hosts_are_parsed_and_default_to_the_servers_own_names() -> None:
    assert parse_hosts("mlyard.example.com, 10.0.0.5  [::1]") == ("mlyard.example.com", "10.0.0.5", "::1")
    assert (host_of("Example.com:8642"), host_of("[::1]:8642"), host_of("10.1.2.3")) == (
        "example.com", "::1", "10.1.2.3")
    local = default_hosts("127.0.0.1", None)
    assert {"localhost", "127.0.0.1", "::1"} <= set(local)
    # Bound to every address (a pod): each of them, and the Service name replicas use.
    everywhere = default_hosts("0.0.0.0", "http://mlyard.mlyard.svc:8642")
    assert {"mlyard.mlyard.svc", "0.0.0.0", "127.0.0.1"} <= set(everywhere)
    assert len(everywhere) > len(local)


def test_the_api_docs_page_renders_swagger_ui_from_this_server_under_the_policy(
        browser, server: RunningServer, request: pytest.FixtureRequest) -> None:
    with httpx.Client(base_url=server.url) as http:
        html = http.get("/api/v1/docs").text
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert assets and all(asset.startswith("/static/") for asset in assets), assets
    assert "<script>" not in html
    tab = Visit(browser, server, request.node.name)
    outside: list[str] = []
    tab.page.on("request", lambda sent: None if sent.url.startswith(server.url) else outside.append(sent.url))
    try:
        tab.page.goto("/api/v1/docs")
        expect(tab.page.locator(".swagger-ui .title")).to_contain_text("mlyard")
        expect(tab.page.locator(".opblock-tag").first).to_be_visible()
        tab.page.locator(".opblock-summary").first.click()  # an operation's panel, with highlighted examples
        expect(tab.page.locator(".opblock-body .responses-wrapper").first).to_be_visible()
        tab.page.wait_for_timeout(300)
        tab.shot("docs")
    finally:
        tab.context.close()
    assert outside == []
    assert tab.csp_violations == []

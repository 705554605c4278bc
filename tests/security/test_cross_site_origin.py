"""The Origin check of changing web requests, behind a proxy that ends TLS as well as direct:
the request's own scheme (http behind the proxy) never decides the port an Origin must have."""

from __future__ import annotations

import pytest

from mlyard.web.cross_site import cross_site_reason

ALLOWED = [
    ("mlyard.example.com", "https://mlyard.example.com"),  # TLS ended by a proxy that keeps Host
    ("mlyard.example.com", "http://mlyard.example.com"),
    ("mlyard.example.com:443", "https://mlyard.example.com"),
    ("MLyard.Example.com", "https://mlyard.example.com:443"),
    ("mlyard.example.com:8080", "http://mlyard.example.com:8080"),
    ("127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("[::1]:8000", "http://[::1]:8000"),
]
REFUSED = [
    ("mlyard.example.com", "https://evil.example"),
    ("mlyard.example.com", "https://mlyard.example.com.evil.example"),
    ("mlyard.example.com", "https://mlyard.example.com:8443"),  # no port in Host: only the default
    ("mlyard.example.com:8080", "http://mlyard.example.com:9090"),
    ("mlyard.example.com:8080", "http://mlyard.example.com"),
    ("mlyard.example.com:8080", "https://mlyard.example.com"),
    ("mlyard.example.com", "null"),
    ("", "https://mlyard.example.com"),
    ("mlyard.example.com:bad", "https://mlyard.example.com"),
]


@pytest.mark.parametrize(("host", "origin"), ALLOWED)
def test_an_origin_naming_this_server_is_allowed(host: str, origin: str) -> None:
    assert cross_site_reason({"host": host, "origin": origin, "sec-fetch-site": "same-origin"}) is None


@pytest.mark.parametrize(("host", "origin"), REFUSED)
def test_an_origin_naming_another_server_or_port_is_refused(host: str, origin: str) -> None:
    assert cross_site_reason({"host": host, "origin": origin}) is not None


def test_sec_fetch_site_still_refuses_other_sites() -> None:
    headers = {"host": "mlyard.example.com", "origin": "https://mlyard.example.com"}
    assert cross_site_reason({**headers, "sec-fetch-site": "cross-site"}) is not None
    assert cross_site_reason({"host": "mlyard.example.com"}) is None  # neither header: the CSRF values hold

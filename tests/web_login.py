"""Logging in to the web UI over plain HTTP, as a browser's form post does: the login page
first (for its pre-login CSRF cookie and field), then the form."""

from __future__ import annotations

import re

import httpx

from mlyard.web.session import LOGIN_CSRF_COOKIE, LOGIN_CSRF_FIELD

CSRF_VALUE = re.compile(r'name="csrf" value="([0-9a-f]+)"')


def log_in_form(http: httpx.Client, *, next: str = "/jobs", **fields: str) -> httpx.Response:
    assert http.get("/login").status_code == 200
    return http.post("/login", data={"next": next, LOGIN_CSRF_FIELD: http.cookies[LOGIN_CSRF_COOKIE], **fields})


def web_session(http: httpx.Client, token: str) -> str:
    """Logs `http` in with an API token; returns the CSRF value its forms carry (read from a
    page: it is keyed by the server's secret, so the cookie alone does not give it)."""
    answer = log_in_form(http, token=token)
    assert answer.status_code == 303, answer.text
    return page_csrf(http)


def page_csrf(http: httpx.Client) -> str:
    """The CSRF value of the session `http` holds, as its pages' forms carry it."""
    found = CSRF_VALUE.search(http.get("/jobs").text)
    assert found, "no CSRF value on /jobs"
    return found.group(1)

"""Logging in to the web UI over plain HTTP, as a browser's form post does: the login page
first (for its pre-login CSRF cookie and field), then the form."""

from __future__ import annotations

import httpx

from mlyard.web.session import COOKIE, LOGIN_CSRF_COOKIE, LOGIN_CSRF_FIELD, csrf_token


def log_in_form(http: httpx.Client, *, next: str = "/jobs", **fields: str) -> httpx.Response:
    assert http.get("/login").status_code == 200
    return http.post("/login", data={"next": next, LOGIN_CSRF_FIELD: http.cookies[LOGIN_CSRF_COOKIE], **fields})


def web_session(http: httpx.Client, token: str) -> str:
    """Logs `http` in with an API token; returns the CSRF value its forms carry."""
    answer = log_in_form(http, token=token)
    assert answer.status_code == 303, answer.text
    return csrf_token(http.cookies[COOKIE])

"""Web UI sessions against a real server: the cookie holds a session of its own (never an API
token, never usable on the API), which ends at logout, with the token it was started with, and
at a password change (with every token made from the password); a session works only from the
address it was started from, and its forms' CSRF value does not follow from the cookie; an open
log stream ends with its session; the login form and every changing verb refuse other sites;
failed logins from one address do not lock the user out at another."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import RunningServer, start_server, stop_server
from web_login import log_in_form, web_session

from mlyard.web.session import COOKIE, LOGIN_CSRF_COOKIE, LOGIN_CSRF_FIELD

pytestmark = pytest.mark.slow

PASSWORD = "correct horse 1"
_names = itertools.count(1)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("mlyard-sessions"))
    yield running
    stop_server(running)


def new_user(server: RunningServer) -> str:
    name = f"sess{next(_names)}"
    server.cli("users", "add", name, "--password-stdin", "--project", "default", check=True, input=f"{PASSWORD}\n")
    return name


def api(server: RunningServer, token: str | None = None, address: str | None = None) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address) if address else None
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=f"{server.url}/api/v1", headers=headers, transport=transport)


def login_token(server: RunningServer, user: str, password: str = PASSWORD) -> str:
    with api(server) as http:
        answer = http.post("/login", json={"user": user, "password": password})
    assert answer.status_code == 201, answer.text
    assert answer.json()["info"]["kind"] == "login"
    return answer.json()["token"]


def works(server: RunningServer, token: str) -> bool:
    with api(server, token) as http:
        return http.get("/whoami").status_code == 200


def page_works(browser: httpx.Client) -> bool:
    """Whether the browser's session still opens a page (a dead one is sent to the login)."""
    return browser.get("/jobs").status_code == 200


def test_a_token_login_keeps_a_session_of_its_own_that_the_api_refuses_and_logout_ends(
        server: RunningServer) -> None:
    token = server.token()
    with httpx.Client(base_url=server.url) as browser:
        csrf = web_session(browser, token)
        cookie = browser.cookies[COOKIE]
        assert cookie != token and token not in cookie
        assert page_works(browser)
        with api(server, cookie) as stolen:  # a cookie that leaked to a job's port opens no API
            refused = stolen.get("/whoami")
            assert refused.status_code == 401 and "web UI" in refused.json()["message"]
            assert stolen.post("/jobs", json={"name": "x", "command": ["true"]}).status_code == 401
        with httpx.Client(base_url=server.url, cookies={COOKIE: cookie}) as cookie_only:
            assert cookie_only.get("/api/v1/whoami").status_code == 401  # the API reads no cookie
        assert browser.post("/logout", data={"csrf": csrf}).status_code == 303
    with httpx.Client(base_url=server.url, cookies={COOKIE: cookie}) as replayed:
        assert not page_works(replayed)
    assert works(server, token)  # the token it was started with stays


def test_revoking_the_token_a_session_was_started_with_ends_the_session(server: RunningServer) -> None:
    user = new_user(server)
    with api(server, login_token(server, user)) as http:
        issued = http.post("/tokens", json={"name": "for the browser"}).json()
        with httpx.Client(base_url=server.url) as browser:
            web_session(browser, issued["token"])
            assert page_works(browser)
            assert http.delete(f"/tokens/{issued['info']['id']}").status_code == 200
            assert not page_works(browser)


def test_a_password_change_ends_other_sessions_and_login_tokens_but_not_the_callers(
        server: RunningServer) -> None:
    user = new_user(server)
    caller, other_login = login_token(server, user), login_token(server, user)
    with api(server, caller) as http:
        script_token = http.post("/tokens", json={"name": "ci"}).json()["token"]
    with httpx.Client(base_url=server.url) as by_password, httpx.Client(base_url=server.url) as by_token:
        assert log_in_form(by_password, user=user, password=PASSWORD).status_code == 303
        web_session(by_token, script_token)
        with api(server, caller) as http:
            changed = http.put(f"/users/{user}/password", json={"password": "a new one 22", "current_password": PASSWORD})
            assert changed.status_code == 200, changed.text
        assert works(server, caller)
        assert not works(server, other_login)
        assert not page_works(by_password) and not page_works(by_token)
        assert not works(server, script_token)  # made with a login token: the password gave it too


def test_a_password_change_ends_tokens_made_from_the_password_but_not_those_made_from_admin_token(
        server: RunningServer) -> None:
    with api(server, server.token()) as admin:
        assert admin.put("/users/admin/password", json={"password": PASSWORD}).status_code == 200
        by_admin_token = admin.post("/tokens", json={"name": "from admin.token"}).json()["token"]
        with api(server, by_admin_token) as http:  # made from a token that is not password-derived either
            grandchild = http.post("/tokens", json={"name": "from that one"}).json()["token"]
    with api(server, login_token(server, "admin")) as http:
        by_password = http.post("/tokens", json={"name": "made after a password login"}).json()["token"]
    with api(server, by_password) as http:
        by_password_child = http.post("/tokens", json={"name": "made with that one"}).json()["token"]
    assert works(server, by_password) and works(server, by_password_child)
    with api(server, server.token()) as admin:
        assert admin.put("/users/admin/password", json={"password": "a new one 33"}).status_code == 200
    with api(server, by_password) as http:
        assert http.get("/whoami").status_code == 401
    assert not works(server, by_password_child)
    assert works(server, by_admin_token) and works(server, grandchild) and works(server, server.token())


def browser_at(server: RunningServer, address: str, **options) -> httpx.Client:
    return httpx.Client(base_url=server.url, transport=httpx.HTTPTransport(local_address=address), **options)


def test_a_session_cookie_replayed_from_another_address_opens_nothing(server: RunningServer) -> None:
    """A cookie caught on a job's port of the UI's host, replayed by the job from elsewhere."""
    user = new_user(server)
    with browser_at(server, "127.0.0.1") as browser:
        assert log_in_form(browser, user=user, password=PASSWORD).status_code == 303
        cookie = browser.cookies[COOKIE]
        assert page_works(browser)
    with browser_at(server, "127.0.0.2", cookies={COOKIE: cookie}) as elsewhere:
        answer = elsewhere.get("/jobs")
        assert answer.status_code == 303 and answer.headers["Location"].startswith("/login")
        assert elsewhere.get("/jobs", headers={"HX-Request": "true"}).status_code == 401
    with browser_at(server, "127.0.0.1", cookies={COOKIE: cookie}) as same_place:
        assert page_works(same_place)
        # The CSRF value is keyed by the server's secret: the cookie alone does not give it.
        guessed = hmac.new(cookie.encode(), b"mlyard web form", hashlib.sha256).hexdigest()
        assert same_place.post("/logout", data={"csrf": guessed}).status_code == 403
        assert page_works(same_place)


def test_an_open_log_stream_ends_when_its_session_does(server: RunningServer) -> None:
    job = server.cli_json("run", "--no-code", "--name", "ticking", "--", "sh", "-c",
                          "while true; do echo tick; sleep 1; done")
    try:
        with httpx.Client(base_url=server.url, timeout=httpx.Timeout(10, read=20)) as browser:
            csrf = web_session(browser, server.token())
            with browser.stream("GET", f"/jobs/{job['id']}/logs/stream") as stream:
                assert stream.status_code == 200
                lines = stream.iter_lines()
                assert next(lines).startswith("retry:")
                with httpx.Client(base_url=server.url, cookies=browser.cookies) as other_tab:
                    assert other_tab.post("/logout", data={"csrf": csrf}).status_code == 303
                deadline = time.monotonic() + 60
                ended = False
                for line in lines:
                    if "session has ended" in line:
                        ended = True
                        break
                    assert time.monotonic() < deadline, "the stream went on after logout"
                assert ended
                assert all("tick" not in line for line in lines)  # and nothing more comes
    finally:
        server.cli("cancel", str(job["id"]))


def test_an_administrators_reset_ends_every_session_and_login_token_of_the_user(server: RunningServer) -> None:
    user = new_user(server)
    first, second = login_token(server, user), login_token(server, user)
    with httpx.Client(base_url=server.url) as browser:
        assert log_in_form(browser, user=user, password=PASSWORD).status_code == 303
        with api(server, server.token()) as admin:
            assert admin.put(f"/users/{user}/password", json={"password": "reset by admin"}).status_code == 200
        assert not works(server, first) and not works(server, second)
        assert not page_works(browser)
    assert works(server, server.token())


@pytest.mark.parametrize("headers", [{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                                     {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
                                     {"Origin": "null"}])
def test_a_cross_site_login_post_is_refused(server: RunningServer, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=server.url) as browser:
        browser.get("/login")
        answer = browser.post("/login", headers=headers, data={
            "token": server.token(), LOGIN_CSRF_FIELD: browser.cookies[LOGIN_CSRF_COOKIE]})
        assert answer.status_code == 403 and "refused:" in answer.text
        assert COOKIE not in browser.cookies


def test_a_login_post_without_the_login_pages_value_is_refused(server: RunningServer) -> None:
    """A browser that sends neither Origin nor Sec-Fetch-Site is covered by the double submit."""
    with httpx.Client(base_url=server.url) as browser:
        answer = browser.post("/login", data={"token": server.token()})
        assert answer.status_code == 403 and "login form" in answer.text
        browser.get("/login")
        answer = browser.post("/login", data={"token": server.token(), LOGIN_CSRF_FIELD: "forged"})
        assert answer.status_code == 403 and COOKIE not in browser.cookies
        same_site = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
        csrf = web_session(browser, server.token())
        assert browser.post("/logout", headers=same_site, data={"csrf": csrf}).status_code == 303


def test_cross_site_changing_verbs_on_web_routes_are_refused(server: RunningServer) -> None:
    with httpx.Client(base_url=server.url) as browser:
        csrf = web_session(browser, server.token())
        for method in ("POST", "PUT", "PATCH", "DELETE"):
            for path in ("/submit", "/jobs/1/cancel", "/logout", "/jobs"):
                for headers in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                                {"Sec-Fetch-Site": "same-site"}):
                    answer = browser.request(method, path, headers={**headers, "X-CSRF-Token": csrf},
                                             data={"csrf": csrf, "yaml": "name: x\ncommand: [true]\n"})
                    assert answer.status_code == 403, (method, path, headers, answer.status_code)
        assert page_works(browser)


def test_failures_from_one_address_do_not_keep_the_user_out_at_another(server: RunningServer) -> None:
    user = new_user(server)
    with api(server, address="127.0.0.2") as guesser:
        codes = [guesser.post("/login", json={"user": user, "password": f"guess {n}"}).status_code
                 for n in range(8)]
    assert codes[:3] == [401] * 3 and 429 in codes
    with api(server, address="127.0.0.1") as owner:
        assert owner.post("/login", json={"user": user, "password": PASSWORD}).status_code == 201

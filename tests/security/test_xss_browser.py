"""Stored and reflected XSS in the web UI, in Chromium: every user-controlled field that passes
validation holds script payloads (job commands, env keys and values, log lines, metric names,
project descriptions, token names, form errors, the login page), then every page is opened and
its live parts given time to load. A canary function `__xss` that the payloads call must never
run, no dialog may open, and no element a payload would create may exist."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator

import httpx
import pytest
from browsing import Visit, expect
from conftest import RunningServer, start_server, stop_server, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PAYLOADS = ["<img src=x onerror=__xss(1)>", "\"><svg onload=__xss(2)>", "javascript:__xss(3)", "'-__xss(4)-'",
            "{{7*7}}", "</script><script>__xss(5)</script>", "${__xss(6)}", "</textarea><img src=x onerror=__xss(7)>"]
# Metric names follow a pattern; these are the names that would break a careless chart script.
METRIC_NAMES = ["__proto__", "constructor", "toString", "loss/../x"]
CANARY = """
window.__xssCalls = [];
window.__xss = function (n) { window.__xssCalls.push(String(n)); };
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__cspViolations.push({directive: e.violatedDirective, blocked: e.blockedURI, sample: e.sample || ''});
});
"""
INJECTED = "img[src='x'], svg[onload], script:not([src])"
JOB_CODE = """
import json, sys
from mlyard.sdk import report
payloads = json.loads(sys.argv[1])
for payload in payloads:
    print(payload, flush=True)
print('\\x1b[31m' + payloads[0] + '\\x1b[0m', flush=True)
for step in range(3):
    report(step, **{name: float(step) for name in json.loads(sys.argv[2])})
sys.exit(3)
"""


@pytest.fixture(scope="module")
def xss_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("xss-home"), MLYARD_JOB_USERS="off")
    yield server
    stop_server(server)


def _api(server: RunningServer) -> httpx.Client:
    return httpx.Client(base_url=f"{server.url}/api/v1", timeout=30,
                        headers={"Authorization": f"Bearer {server.token()}"})


@pytest.fixture(scope="module")
def planted(xss_server: RunningServer) -> int:
    """The objects whose fields hold the payloads; the job's id."""
    server = xss_server
    joined = " ".join(PAYLOADS)
    env = {f"XSS_{index}": payload for index, payload in enumerate(PAYLOADS)}
    spec = {"name": "xss-job", "command": [sys.executable, "-c", JOB_CODE, json.dumps(PAYLOADS),
                                           json.dumps(METRIC_NAMES), *PAYLOADS], "env": env,
            "project": "xss-project"}
    with _api(server) as api:
        answer = api.post("/projects", json={"name": "xss-project", "description": joined})
        assert answer.status_code in {200, 201}, answer.text
        api.post("/tokens", json={"name": joined[:128]}).raise_for_status()
        job = api.post("/jobs", json=spec)
        assert job.status_code in {200, 201}, job.text
        job_id = job.json()["id"]
        wait_until(lambda: api.get(f"/jobs/{job_id}").json()["status"] in {"FAILED", "SUCCEEDED"}, 90,
                   "the payload job's end")
    return job_id


def _verdict(visit: Visit, where: str) -> list[str]:
    page = visit.page
    page.wait_for_timeout(1200)  # the htmx fragments and charts load after the page
    calls = page.evaluate("window.__xssCalls || []")
    injected = page.evaluate(f"Array.from(document.querySelectorAll({INJECTED!r}))"
                             ".filter(e => (e.outerHTML || '').includes('__xss')).map(e => e.outerHTML)")
    violations = [v for v in page.evaluate("window.__cspViolations || []") if "__xss" in v["sample"]]
    visit.shot(re.sub(r"\W+", "-", where)[:40])
    return ([f"{where}: __xss called {calls}"] if calls else []) + [f"{where}: injected {e[:120]}" for e in injected] + \
        [f"{where}: a CSP violation by an injected script {v}" for v in violations]


def _open_tabs(visit: Visit) -> None:
    for tab in visit.page.get_by_role("tab").all():
        tab.click()
        visit.page.wait_for_timeout(200)


def test_no_payload_runs_on_any_page(browser, xss_server: RunningServer, planted: int) -> None:
    visit = Visit(browser, xss_server, "xss-every-page")
    dialogs: list[str] = []
    visit.page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    visit.context.add_init_script(CANARY)
    problems: list[str] = []
    try:
        visit.page.goto("/login?next=javascript:__xss(3)")
        visit.page.fill("#user", PAYLOADS[1])
        visit.page.fill("#password", "wrong")
        visit.page.get_by_role("button", name="Log in", exact=True).click()
        expect(visit.page.locator("#login-error")).to_be_visible()
        problems += _verdict(visit, "login error")
        visit.log_in(xss_server.token())
        job = planted
        pages = ["/jobs", f"/jobs/{job}", "/overview", "/nodes", "/queues",
                 "/queues/default", "/submit", f"/submit?source={job}", f"/submit?source={job}&mode=yaml",
                 f"/jobs/{job}/charts/metrics", f"/jobs/{job}/summary"]
        node = xss_server.cli_json("nodes")[0]["name"]
        pages += [f"/nodes/{node}"]
        for path in pages:
            visit.page.goto(path)
            if path == f"/jobs/{job}":
                expect(visit.page.locator("pre.log").first).to_contain_text(PAYLOADS[0], timeout=30_000)
                _open_tabs(visit)
            problems += _verdict(visit, path)
        problems += _submit_with_payloads(visit)
        # The canary itself: a payload that does get in is seen (called, or at least present).
        visit.page.evaluate("document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=__xss(99)>')")
        assert _verdict(visit, "control"), "the canary no longer sees an injected payload"
    finally:
        visit.context.close()
    assert not dialogs, f"dialogs opened: {dialogs}"
    assert not problems, "\n".join(problems)


def _submit_with_payloads(visit: Visit) -> list[str]:
    """A refused form shows its errors beside the fields, with the values typed in."""
    problems = []
    visit.page.goto("/submit")
    visit.page.fill("#field-name", PAYLOADS[0])
    visit.page.fill("#field-command", " ".join(PAYLOADS))
    visit.page.fill("#field-env", "\n".join(f"{payload}={payload}" for payload in PAYLOADS))
    visit.page.get_by_role("button", name="Submit job").click()
    visit.page.wait_for_load_state()
    problems += _verdict(visit, "submit errors")
    return problems


def test_the_payloads_are_shown_as_text(browser, xss_server: RunningServer, planted: int) -> None:
    """The other side of the check above: the values are on the page, escaped, not dropped."""
    visit = Visit(browser, xss_server, "xss-shown-as-text")
    try:
        visit.log_in(xss_server.token())
        visit.page.goto(f"/jobs/{planted}")
        log = visit.page.locator("pre.log").first
        expect(log).to_contain_text(PAYLOADS[0], timeout=30_000)
        for payload in PAYLOADS:
            assert payload in log.inner_text()
        assert "{{7*7}}" in visit.page.inner_text("body")
    finally:
        visit.context.close()

"""The web UI in a real browser (Debian's Chromium, driven by Playwright) against a real
server: logging in, the jobs table, a job's live log and cancelling a job. Each test saves a
screenshot of every page it visits under test-artifacts/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browsing import Visit, expect, run_job
from conftest import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SLOW_PRINTER = "import time\nfor i in range(8):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.7)\nprint('done')"


def test_a_page_without_login_sends_the_browser_to_the_login_page(visit: Visit) -> None:
    visit.page.goto("/jobs?status=active")
    expect(visit.page).to_have_url(re.compile(r"/login\?next=%2Fjobs%3Fstatus%3Dactive$"))
    expect(visit.page.locator("h1")).to_have_text("Log in")
    visit.shot("redirected")


def test_a_wrong_token_shows_an_error_and_sets_no_cookie(visit: Visit) -> None:
    visit.page.goto("/login")
    visit.page.get_by_text("Log in with an API token instead").click()
    visit.page.fill("#token", "mly_wrong")
    visit.page.get_by_role("button", name="Log in with the token").click()
    expect(visit.page.locator("#login-error")).to_have_text("invalid or revoked token")
    visit.shot("refused")
    assert visit.session_cookies() == []


def test_logging_in_keeps_a_session_of_its_own_in_a_strict_httponly_cookie_until_logout(visit: Visit,
                                                                             web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    (cookie,) = visit.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == ("mlyard_session", True, "Strict")
    assert cookie["value"] != web_server.token()  # a session of its own, not the API token
    assert visit.page.evaluate("document.cookie") == ""  # out of reach of scripts
    visit.shot("jobs")
    visit.page.get_by_role("button", name="Log out").click()
    expect(visit.page).to_have_url(re.compile(r"/login$"))
    assert visit.session_cookies() == []
    visit.page.goto("/jobs")
    expect(visit.page).to_have_url(re.compile(r"/login"))
    visit.shot("logged-out")


def test_a_job_from_the_cli_reaches_succeeded_on_the_jobs_page(visit: Visit, web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    job = run_job(web_server, "web-quick", "import time; time.sleep(2); print('hello from the job')")
    row = visit.page.locator(f"#jobs-table tr[data-job='{job}']")
    expect(row).to_be_visible()  # the table refreshes itself: no reload
    visit.shot("submitted")
    expect(row.locator(".status")).to_have_text("SUCCEEDED", timeout=90_000)
    visit.shot("succeeded")
    row.get_by_role("link", name="web-quick").click()
    expect(visit.page).to_have_url(re.compile(rf"/jobs/{job}$"))
    expect(visit.page.locator("#job-summary .status").first).to_have_text("SUCCEEDED")
    expect(visit.page.locator("pre.log")).to_contain_text("hello from the job")
    expect(visit.page.locator("[data-log-state]")).to_have_text("attempt 1 · complete")
    expect(visit.page.locator("pre.spec")).to_contain_text("name: web-quick")
    visit.shot("job")


def test_a_running_job_shows_its_log_lines_as_they_are_printed(visit: Visit, web_server: RunningServer) -> None:
    job = run_job(web_server, "web-printer", SLOW_PRINTER)
    visit.log_in(web_server.token())
    visit.page.goto(f"/jobs/{job}")
    log = visit.page.locator("pre.log")
    expect(log).to_contain_text("tick 1", timeout=60_000)
    # Seen while the job still prints: the lines arrive live, not with the finished job.
    assert "done" not in log.inner_text()
    assert visit.page.locator("#job-summary").get_attribute("data-status") not in ("SUCCEEDED", "FAILED")
    visit.shot("live")
    expect(log).to_contain_text("tick 7\ndone", timeout=60_000)
    expect(visit.page.locator("#job-summary .status").first).to_have_text("SUCCEEDED", timeout=30_000)
    expect(visit.page.locator("#replicas-heading + table")).to_contain_text("worker-0")
    download = visit.page.get_by_role("link", name="Download")
    assert download.get_attribute("href") == f"/jobs/{job}/logs/download?replica=worker-0"
    with visit.page.expect_download() as started:
        download.click()
    assert "tick 3" in Path(started.value.path()).read_text()
    visit.shot("finished")


def test_a_sleeping_job_is_cancelled_from_its_page(visit: Visit, web_server: RunningServer) -> None:
    job = run_job(web_server, "web-sleeper", "import time; print('sleeping', flush=True); time.sleep(600)")
    visit.log_in(web_server.token())
    visit.page.goto(f"/jobs/{job}")
    expect(visit.page.locator("#job-summary .status").first).to_have_text("RUNNING", timeout=60_000)
    expect(visit.page.locator("pre.log")).to_contain_text("sleeping")
    visit.shot("running")
    # The same request without the page's CSRF value, as another site's form would send it if a
    # browser ignored SameSite: refused, and the job keeps running.
    for form in ({}, {"csrf": "0" * 64}):
        forged = visit.page.request.post(f"/jobs/{job}/cancel", form=form, max_redirects=0)
        assert forged.status == 403 and "out of date or did not come from this site" in forged.text()
    assert web_server.cli_json("show", str(job))["status"] == "RUNNING"
    questions = []

    def answer(dialog) -> None:
        questions.append(dialog.message)
        dialog.accept()

    visit.page.once("dialog", answer)
    visit.page.get_by_role("button", name="Cancel job").click()
    expect(visit.page.locator(".notice")).to_contain_text("Cancellation requested")
    assert questions == [f"Cancel job {job} (web-sleeper)?"]
    expect(visit.page.locator("#job-summary .status").first).to_have_text("CANCELLED", timeout=60_000)
    expect(visit.page.get_by_role("button", name="Cancel job")).to_have_count(0)
    visit.shot("cancelled")
    assert web_server.cli_json("show", str(job))["status"] == "CANCELLED"


def test_the_status_filter_and_pages_are_query_parameters(visit: Visit, web_server: RunningServer) -> None:
    failed = run_job(web_server, "web-failing", "raise SystemExit(3)")
    assert web_server.cli("wait", str(failed), "--timeout", "60").returncode != 0
    visit.log_in(web_server.token())
    visit.page.select_option("#status-filter", "FAILED")  # submits itself
    expect(visit.page).to_have_url(re.compile(r"/jobs\?status=FAILED$"))
    rows = visit.page.locator("#jobs-table tbody tr[data-job]")
    expect(rows.first).to_be_visible()
    assert set(rows.locator(".status").all_inner_texts()) == {"FAILED"}
    expect(visit.page.locator(f"tr[data-job='{failed}'] td.message")).to_contain_text("exit")
    visit.shot("failed-only")
    visit.page.fill("#search-filter", "WEB-FAIL")
    visit.page.get_by_role("button", name="Filter").click()
    expect(visit.page).to_have_url(re.compile(r"/jobs\?status=FAILED&q=WEB-FAIL$"))
    expect(rows.first).to_be_visible()
    assert {name.lower() for name in rows.locator("td:nth-child(2)").all_inner_texts()} == {"web-failing"}
    visit.page.locator(f"tr[data-job='{failed}']").get_by_role("link", name="admin").click()
    expect(visit.page).to_have_url(re.compile(r"/jobs\?status=FAILED&owner=admin&q=WEB-FAIL$"))
    expect(visit.page.locator(f"tr[data-job='{failed}']")).to_be_visible()
    visit.shot("searched")
    visit.page.goto("/jobs?owner=nobody")
    expect(visit.page.locator("#jobs-table .empty")).to_have_text("No jobs match these filters.")
    visit.page.goto("/jobs?status=FAILED&page=2")
    expect(visit.page.locator("#jobs-table .empty")).to_have_text("No jobs match these filters on this page.")
    visit.page.get_by_role("link", name="← Newer").click()
    expect(visit.page).to_have_url(re.compile(r"/jobs\?status=FAILED&page=1$"))
    visit.shot("first-page")
    visit.page.goto("/jobs/999999")
    expect(visit.page.locator("p.error")).to_have_text("job 999999 does not exist")
    visit.shot("missing-job")


def test_a_user_logs_in_with_a_password_and_logging_out_ends_the_session(visit: Visit,
                                                                         web_server: RunningServer) -> None:
    user = f"web-user-{web_server.port}"
    web_server.cli("users", "add", user, "--password-stdin", input="browser pass 1\n", check=True)
    visit.log_in_with_password(user, "wrong password")
    expect(visit.page.locator("#login-error")).to_have_text("wrong user name or password")
    expect(visit.page.locator("#user")).to_have_value(user)  # kept, only the password is typed again
    assert visit.session_cookies() == []
    visit.shot("refused")
    visit.log_in_with_password(user, "browser pass 1")
    expect(visit.page).to_have_url(re.compile(r"/jobs$"))
    expect(visit.page.locator(".who")).to_contain_text(user)
    visit.shot("logged-in")
    sessions = [token for token in web_server.cli_json("tokens", "--all") if token["user"] == user]
    assert [(token["kind"], token["name"]) for token in sessions] == [("session", "web session")]
    assert sessions[0]["expires_at"] is not None
    visit.page.get_by_role("button", name="Log out").click()
    expect(visit.page).to_have_url(re.compile(r"/login$"))
    assert not [token for token in web_server.cli_json("tokens", "--all") if token["user"] == user]

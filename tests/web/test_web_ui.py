"""The web UI in a real browser (Debian's Chromium, driven by Playwright) against a real
server: logging in, the jobs table, a job's live log and cancelling a job. Each test saves a
screenshot of every page it visits under test-artifacts/."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPOSITORY, RunningServer, start_server, stop_server

playwright_api = pytest.importorskip("playwright.sync_api")
expect = playwright_api.expect

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPOSITORY / "test-artifacts" / "web"
CHROMIUM_ARGUMENTS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--no-first-run", "--disable-quic"]
SLOW_PRINTER = "import time\nfor i in range(8):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.7)\nprint('done')"


@pytest.fixture(scope="module")
def web_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("mlyard-web"))
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    with playwright_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGUMENTS)
        yield launched
        launched.close()


class Visit:
    """A browser tab that saves a screenshot of each step, numbered, under the test's name."""

    def __init__(self, browser, server: RunningServer, name: str) -> None:
        self.context = browser.new_context(base_url=server.url, viewport={"width": 1366, "height": 900})
        self.context.set_default_timeout(20_000)
        self.page = self.context.new_page()
        self.folder = ARTIFACTS / name
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.shots = 0

    def shot(self, label: str) -> None:
        self.shots += 1
        self.page.screenshot(path=str(self.folder / f"{self.shots:02d}-{label}.png"), full_page=True)

    def log_in(self, token: str) -> None:
        self.page.goto("/login")
        self.page.fill("#token", token)
        self.shot("login")
        self.page.click("button[type=submit]")
        expect(self.page).to_have_url(re.compile(r"/jobs$"))


@pytest.fixture
def visit(browser, web_server: RunningServer, request: pytest.FixtureRequest) -> Iterator[Visit]:
    tab = Visit(browser, web_server, request.node.name)
    yield tab
    tab.context.close()


def run_job(server: RunningServer, name: str, code: str) -> int:
    return server.cli_json("run", "--no-code", "--name", name, "--", "python", "-c", code)["id"]


def test_a_page_without_login_sends_the_browser_to_the_login_page(visit: Visit) -> None:
    visit.page.goto("/jobs?status=active")
    expect(visit.page).to_have_url(re.compile(r"/login\?next=%2Fjobs%3Fstatus%3Dactive$"))
    expect(visit.page.locator("h1")).to_have_text("Log in")
    visit.shot("redirected")


def test_a_wrong_token_shows_an_error_and_sets_no_cookie(visit: Visit) -> None:
    visit.page.goto("/login")
    visit.page.fill("#token", "mly_wrong")
    visit.page.click("button[type=submit]")
    expect(visit.page.locator("#login-error")).to_have_text("invalid or revoked token")
    visit.shot("refused")
    assert visit.context.cookies() == []


def test_logging_in_keeps_the_token_in_a_strict_httponly_cookie_until_logout(visit: Visit,
                                                                             web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    (cookie,) = visit.context.cookies()
    assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == ("mlyard_token", True, "Strict")
    assert visit.page.evaluate("document.cookie") == ""  # out of reach of scripts
    visit.shot("jobs")
    visit.page.get_by_role("button", name="Log out").click()
    expect(visit.page).to_have_url(re.compile(r"/login$"))
    assert visit.context.cookies() == []
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
    visit.page.goto("/jobs?status=FAILED&page=2")
    expect(visit.page.locator("#jobs-table .empty")).to_have_text("No jobs with this status on this page.")
    visit.page.get_by_role("link", name="← Newer").click()
    expect(visit.page).to_have_url(re.compile(r"/jobs\?status=FAILED&page=1$"))
    visit.shot("first-page")
    visit.page.goto("/jobs/999999")
    expect(visit.page.locator("p.error")).to_have_text("job 999999 does not exist")
    visit.shot("missing-job")

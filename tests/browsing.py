"""Browser fixtures for the web UI tests: Debian's Chromium driven by Playwright against a real
server, once on SQLite and once on PostgreSQL. `visit` is a tab that saves a numbered
screenshot of every step under test-artifacts/web/<test name>/.

The fixtures are made visible to every test module by tests/conftest.py; Playwright is imported
only when a browser test asks for it, so the rest of the suite runs without it."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import DATABASES, REPOSITORY, RunningServer, start_server, stop_server

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPOSITORY / "test-artifacts" / "web"
CHROMIUM_ARGUMENTS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                      "--disable-sync", "--no-first-run", "--disable-quic"]


def playwright_api():
    return pytest.importorskip("playwright.sync_api")


def expect(*arguments, **options):
    return playwright_api().expect(*arguments, **options)


@pytest.fixture(scope="session", params=DATABASES)
def web_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server of the browser tests' own, so that the jobs other tests leave do not fill its pages.
    Its MLYARD_DATA_ROOTS folder is where the Data pages' tests put what an administrator registers."""
    roots = tmp_path_factory.mktemp(f"mlyard-web-data-roots-{request.param}")
    running = start_server(tmp_path_factory.mktemp(f"mlyard-web-{request.param}"), database=request.param,
                           MLYARD_DATA_ROOTS=str(roots))
    yield running
    stop_server(running)


# Per module: Playwright's sync API keeps an event loop running in the main thread while it is
# open, which would break later tests that call asyncio.run().
@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    api = playwright_api()
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)")
    with api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGUMENTS)
        yield launched
        launched.close()


class Visit:
    """A browser tab that saves a screenshot of each step, numbered, under the test's name."""

    def __init__(self, browser, server: RunningServer, name: str) -> None:
        self.server = server
        self.context = browser.new_context(base_url=server.url, viewport={"width": 1366, "height": 900})
        self.context.set_default_timeout(20_000)
        self.page = self.context.new_page()
        # Every page must keep to the server's Content-Security-Policy: a violation is an error
        # in the console (Chromium's own report, and one from the event, which names the directive).
        self.csp_violations: list[str] = []
        self.page.add_init_script('document.addEventListener("securitypolicyviolation", (event) => console.error('
                                  '`CSP violation: ${event.violatedDirective} ${event.blockedURI}`))')
        self.page.on("console", self._console)
        self.folder = ARTIFACTS / re.sub(r"[^\w.-]+", "-", name).strip("-")
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self.shots = 0

    def _console(self, message) -> None:
        if "CSP violation" in message.text or "Content Security Policy" in message.text:
            self.csp_violations.append(message.text)

    def session_cookies(self) -> list[dict]:
        return [cookie for cookie in self.context.cookies() if cookie["name"].endswith("mlyard_session")]

    def shot(self, label: str) -> None:
        self.shots += 1
        self.page.screenshot(path=str(self.folder / f"{self.shots:02d}-{label}.png"), full_page=True)

    def log_in(self, token: str | None = None) -> None:
        """Logs in with an API token (the admin's by default) and lands on the jobs page."""
        self.page.goto("/login?next=%2Fjobs")
        self.page.get_by_text("Log in with an API token instead").click()
        self.page.fill("#token", token or self.server.token())
        self.shot("login")
        self.page.get_by_role("button", name="Log in with the token").click()
        expect(self.page).to_have_url(re.compile(r"/jobs$"))

    def log_in_with_password(self, user: str, password: str) -> None:
        self.page.goto("/login?next=%2Fjobs")
        self.page.fill("#user", user)
        self.page.fill("#password", password)
        self.shot("login")
        self.page.get_by_role("button", name="Log in", exact=True).click()


@pytest.fixture
def visit(browser, web_server: RunningServer, request: pytest.FixtureRequest) -> Iterator[Visit]:
    tab = Visit(browser, web_server, request.node.name)
    yield tab
    tab.context.close()
    assert not tab.csp_violations, f"the page broke its Content-Security-Policy: {tab.csp_violations}"


def run_job(server: RunningServer, name: str, code: str, *options: str) -> int:
    """Submits `python -c CODE` without a code snapshot and returns the job's id."""
    return server.cli_json("run", "--no-code", "--name", name, *options, "--", "python", "-c", code)["id"]

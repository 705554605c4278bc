"""The queues pages in a real browser against a real server: quotas and usage per queue, the
jobs a queue keeps waiting with the scheduler's reason, one queue's page, and a missing queue."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest
from browsing import Visit, expect, run_job
from conftest import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SLEEPER = "import time; print('holding', flush=True); time.sleep(600)"


@pytest.fixture
def tight_queue(web_server: RunningServer) -> Iterator[tuple[str, list[int]]]:
    """A queue of its own with room for one one-core job; the jobs the test puts in it are
    cancelled at the end, since the server serves the other browser tests too."""
    name = f"web-q-{uuid.uuid4().hex[:8]}"
    web_server.cli("queues", "set", name, "--project", "vision", "--cpu", "1", "--borrow-cpu", "0",
                   "--weight", "2", check=True)
    jobs: list[int] = []
    yield name, jobs
    for job in jobs:
        web_server.cli("cancel", str(job))
    for job in jobs:
        web_server.cli("wait", str(job), "--timeout", "60")
    web_server.cli("queues", "rm", name)


def test_a_queue_shows_its_quota_usage_and_why_its_second_job_waits(visit: Visit, web_server: RunningServer,
                                                                    tight_queue: tuple[str, list[int]]) -> None:
    name, jobs = tight_queue
    jobs.append(run_job(web_server, "web-q-first", SLEEPER, "--cpus", "1", "--set", f"queue={name}"))
    jobs.append(run_job(web_server, "web-q-second", SLEEPER, "--cpus", "1", "--set", f"queue={name}"))
    first, second = jobs
    visit.log_in(web_server.token())
    visit.page.goto("/queues")
    expect(visit.page.locator("h1")).to_have_text("Queues")
    expect(visit.page.locator(".queues-readonly")).to_contain_text("mlyard queues set")
    card = visit.page.locator(f"#queue-{name}")
    expect(card.locator(".queue-settings")).to_contain_text("vision")
    expect(card.locator(".queue-settings")).to_contain_text("2")  # the weight
    # The page refreshes itself until the scheduler has started one and explained the other.
    expect(card.locator("[data-count='running']")).to_have_text("1", timeout=60_000)
    reason = card.locator(f"tr[data-job='{second}'] .wait-reason")
    expect(reason).to_contain_text(f"queue {name} over quota: cpu 1/1", timeout=60_000)
    expect(card.locator("[data-count='waiting']")).to_have_text("1")
    expect(card.locator(f"tr[data-job='{first}']")).to_have_count(0)
    cpu = card.locator("tr[data-resource='cpu']")
    expect(cpu.locator("td.num").nth(0)).to_have_text("1")  # used
    expect(cpu.locator("td.num").nth(1)).to_have_text("1")  # quota
    expect(cpu.locator("td.num").nth(2)).to_have_text("0")  # borrowing limit
    expect(cpu.locator(".qbar")).to_have_attribute("aria-label", "CPU cores: 1 used · quota 1 · no borrowing")
    card.scroll_into_view_if_needed()
    visit.shot("queues")

    # A refresh of the list keeps the keyboard's place.
    link = card.get_by_role("link", name="web-q-second")
    link.focus()
    visit.page.evaluate("() => new Promise((settled) => document.addEventListener('htmx:afterSettle', settled, "
                        "{once: true}))")
    expect(link).to_be_focused()

    card.get_by_role("link", name=name, exact=True).click()
    expect(visit.page).to_have_url(re.compile(rf"/queues/{name}$"))
    expect(visit.page.locator("h1")).to_have_text(f"Queue {name}")
    expect(visit.page.locator(f"#queue-{name} tr[data-job='{second}'] .wait-reason")).to_contain_text("over quota")
    expect(visit.page.locator(".queues-readonly")).to_contain_text(f"mlyard queues set {name}")
    visit.shot("one-queue")

    visit.page.get_by_role("link", name="web-q-second").click()
    expect(visit.page).to_have_url(re.compile(rf"/jobs/{second}$"))
    visit.shot("waiting-job")

    # Cancelling the waiting job takes it off the live queue page without a reload.
    visit.page.goto(f"/queues/{name}")
    web_server.cli("cancel", str(second), check=True)
    expect(visit.page.locator(f"#queue-{name} .queue-none-waiting")).to_have_text("No job waits in this queue.",
                                                                                 timeout=30_000)
    visit.shot("none-waiting")


def test_the_default_queue_is_listed_without_a_stored_quota(visit: Visit, web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    visit.page.goto("/queues")
    card = visit.page.locator("#queue-default")
    expect(card.locator(".queue-tag")).to_have_text("implicit")
    expect(card.locator("tr[data-resource='cpu'] .qbar")).to_have_attribute(
        "aria-label", re.compile(r"^CPU cores: \d+ used · no quota or borrowing limit$"))
    visit.shot("default-queue")


def test_an_unknown_queue_is_a_404_page_that_names_it(visit: Visit, web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    response = visit.page.goto("/queues/no-such-queue")
    assert response is not None and response.status == 404
    expect(visit.page.locator("p.error")).to_have_text("queue 'no-such-queue' does not exist")
    expect(visit.page.get_by_role("navigation", name="Main").get_by_role("link", name="Queues")).to_have_attribute(
        "aria-current", "page")
    visit.shot("unknown-queue")

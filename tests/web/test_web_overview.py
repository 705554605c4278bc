"""The overview in a real browser against a real server: the utilization charts drawn from the
node's samples, jobs per status, the queues' usage and the latest status changes, all
refreshing themselves."""

from __future__ import annotations

import re
import uuid

import pytest
from browsing import Visit, expect, run_job
from conftest import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

DRAWN = re.compile(r"^[1-9]")
"""data-points once a chart has drawn something; the server samples its node every 5 s."""


def _gpus(server: RunningServer) -> int:
    return sum(len(node["gpus"]) for node in server.cli_json("nodes"))


def test_the_overview_shows_utilization_job_counts_queues_and_recent_events(visit: Visit,
                                                                           web_server: RunningServer) -> None:
    job = run_job(web_server, "web-overview-quick", "print('counted')")
    assert web_server.cli("wait", str(job), "--timeout", "90").returncode == 0
    visit.log_in(web_server.token())
    visit.page.get_by_role("navigation", name="Main").get_by_role("link", name="Overview").click()
    expect(visit.page).to_have_url(re.compile(r"/overview$"))
    expect(visit.page.locator("h1")).to_have_text("Overview")

    chart = visit.page.locator("#chart-utilization")
    expect(chart).to_have_attribute("data-points", DRAWN, timeout=60_000)
    expect(chart.locator("figcaption")).to_have_text("CPU and memory")
    expect(visit.page.get_by_role("link", name="1 h")).to_have_attribute("aria-current", "true")
    if _gpus(web_server):
        expect(visit.page.locator("#chart-gpu")).to_have_attribute("data-points", DRAWN, timeout=60_000)
    else:
        expect(visit.page.locator("#no-gpus")).to_have_text(
            "No GPUs in this cluster: there is no GPU utilization to show.")

    tile = visit.page.locator("#status-tile-SUCCEEDED")
    expect(tile.locator(".status-count")).to_have_text(DRAWN)
    expect(tile.locator(".status")).to_have_text("SUCCEEDED")
    expect(tile).to_have_attribute("href", "/jobs?status=SUCCEEDED")
    event = visit.page.locator(f"#overview-events li[data-job='{job}']").first
    expect(event).to_contain_text("web-overview-quick")
    expect(event.locator(".status").last).to_have_text("SUCCEEDED")
    expect(visit.page.locator("#overview-queues li[data-queue='default']")).to_be_visible()
    visit.shot("overview")

    tile.click()
    expect(visit.page).to_have_url(re.compile(r"/jobs\?status=SUCCEEDED$"))
    expect(visit.page.locator(f"#jobs-table tr[data-job='{job}']")).to_be_visible()
    visit.shot("succeeded-jobs")


def test_the_overview_follows_a_new_job_and_a_new_queue_without_a_reload(visit: Visit,
                                                                         web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    visit.page.goto("/overview")
    expect(visit.page.locator("#overview-events")).to_be_visible()
    queue = f"web-ov-{uuid.uuid4().hex[:8]}"
    web_server.cli("queues", "set", queue, "--cpu", "1", "--borrow-cpu", "0", check=True)
    job = run_job(web_server, "web-overview-sleeper", "import time; time.sleep(600)", "--set", f"queue={queue}")
    try:
        event = visit.page.locator(f"#overview-events li[data-job='{job}']").first
        expect(event.locator(".status").last).to_have_text("RUNNING", timeout=60_000)
        expect(visit.page.locator("[data-count='running']").first).to_have_text(DRAWN)
        entry = visit.page.locator(f"#overview-queues li[data-queue='{queue}']")
        expect(entry.locator("[data-count='running']")).to_have_text("1")
        expect(entry.locator(".qbar[data-resource='cpu']")).to_have_attribute(
            "aria-label", "CPU cores: 1 used · quota 1 · no borrowing")
        entry.scroll_into_view_if_needed()
        visit.shot("running")
        entry.get_by_role("link", name=queue).click()
        expect(visit.page).to_have_url(re.compile(rf"/queues/{queue}$"))
        visit.shot("queue")
    finally:
        web_server.cli("cancel", str(job))
        web_server.cli("wait", str(job), "--timeout", "60")
        web_server.cli("queues", "rm", queue)


def test_the_window_choice_redraws_the_charts_and_a_wrong_window_is_named(visit: Visit,
                                                                         web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    visit.page.goto("/overview")
    visit.page.get_by_role("link", name="24 h").click()
    expect(visit.page).to_have_url(re.compile(r"/overview\?window=24h$"))
    expect(visit.page.get_by_role("link", name="24 h")).to_have_attribute("aria-current", "true")
    chart = visit.page.locator("#chart-utilization")
    expect(chart).to_have_attribute("data-chart", "/overview/charts/utilization.json?window=24h")
    expect(chart).to_have_attribute("data-points", DRAWN, timeout=60_000)
    visit.shot("day")

    payload = visit.page.request.get("/overview/charts/utilization.json?window=7d").json()
    assert [line["label"] for line in payload["series"]] == ["CPU", "Memory"]
    assert payload["final"] is False and len(payload["x"]) == len(payload["series"][0]["values"])
    refused = visit.page.request.get("/overview/charts/utilization.json?window=2h")
    assert refused.status == 422
    assert refused.json()["message"] == "window must be one of 1h, 6h, 24h, 7d, not '2h'"

    response = visit.page.goto("/overview?window=2h")
    assert response is not None and response.status == 422
    expect(visit.page.locator("p.error")).to_have_text("window must be one of 1h, 6h, 24h, 7d, not '2h'")
    expect(visit.page.get_by_role("navigation", name="Main")).to_be_visible()
    visit.shot("wrong-window")

"""A job's charts in a real browser: the training metrics it reports through `mlyard.sdk.report`
appear as charts while it runs, beside the CPU and memory its processes used, and the charts
stop refreshing once the job has ended."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browsing import Visit, expect, run_job
from conftest import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

DRAWN = re.compile(r"^[1-9]")
REPORTER = """import os, sys, time
from mlyard.sdk import report
deadline = time.time() + 120
while not os.path.exists(sys.argv[1]) and time.time() < deadline:  # the test saw the page before any report
    time.sleep(0.1)
for step in range(20):
    assert report(step=step, loss=1 / (step + 1), accuracy=step / 20)
    sum(range(200_000))
    time.sleep(0.5)
print('trained', flush=True)
"""


def test_reported_metrics_and_resources_are_charted_live_and_final_once_the_job_ends(
        visit: Visit, web_server: RunningServer, tmp_path: Path) -> None:
    go = tmp_path / "go"
    job = web_server.cli_json("run", "--no-code", "--name", "web-metrics", "--", "python", "-c", REPORTER,
                              str(go))["id"]
    visit.log_in(web_server.token())
    visit.page.goto(f"/jobs/{job}")
    # Before the first report the page says so, then picks the names up by itself.
    expect(visit.page.locator("#no-metrics")).to_contain_text("No metrics reported yet")
    visit.shot("no-metrics-yet")
    go.touch()
    loss = visit.page.locator("figure[data-metric='loss']")
    expect(loss).to_have_attribute("data-points", DRAWN, timeout=60_000)
    expect(visit.page.locator("figure[data-metric='accuracy']")).to_have_attribute("data-points", DRAWN)
    expect(visit.page.locator("#job-metrics-latest tr[data-metric='loss'] td").nth(0)).to_have_text("loss")
    cpu = visit.page.locator("#job-chart-cpu")
    expect(cpu).to_have_attribute("data-points", DRAWN, timeout=60_000)
    expect(visit.page.locator("#job-chart-memory")).to_have_attribute("data-points", DRAWN, timeout=30_000)
    expect(visit.page.locator("#job-chart-memory figcaption")).to_contain_text("requested 1Gi")
    expect(visit.page.locator("#job-chart-gpu-memory")).to_have_count(0)  # the job asked for no GPU
    visit.shot("live")
    expect(visit.page.locator("#job-summary .status").first).to_have_text("SUCCEEDED", timeout=90_000)
    expect(loss).to_have_attribute("data-state", "final", timeout=30_000)
    expect(loss).to_have_attribute("data-points", "20")
    expect(cpu).to_have_attribute("data-state", "final", timeout=30_000)
    latest = visit.page.locator("#job-metrics-latest tr[data-metric='loss'] td")
    expect(latest.nth(2)).to_have_text("19", timeout=30_000)  # the last step
    expect(latest.nth(4)).to_have_text("20")
    expect(visit.page.locator("#job-metrics-latest")).not_to_have_attribute("hx-trigger", re.compile("every"))
    visit.shot("final")


def test_a_finished_job_without_metrics_says_so_and_its_charts_do_not_poll(visit: Visit,
                                                                          web_server: RunningServer) -> None:
    job = run_job(web_server, "web-no-metrics", "print('no metrics here')")
    web_server.cli("wait", str(job), "--timeout", "60", check=True)
    visit.log_in(web_server.token())
    visit.page.goto(f"/jobs/{job}")
    expect(visit.page.locator("#no-metrics")).to_contain_text("No metrics reported yet")
    expect(visit.page.locator("#job-metrics-latest")).not_to_have_attribute("hx-get", re.compile("."))
    expect(visit.page.locator("#job-chart-cpu")).to_have_attribute("data-state", "final")
    visit.shot("finished-without-metrics")


def test_chart_data_of_an_unknown_job_or_chart_is_a_clear_error(visit: Visit, web_server: RunningServer) -> None:
    visit.log_in(web_server.token())
    response = visit.page.goto("/jobs/999999/charts/metric.json?name=loss")
    assert response.status == 404
    expect(visit.page.locator("p.error")).to_have_text("job 999999 does not exist")
    visit.shot("unknown-job")
    job = run_job(web_server, "web-chartless", "print('ok')")
    response = visit.page.goto(f"/jobs/{job}/charts/temperature.json")
    assert response.status == 404
    expect(visit.page.locator("p.error")).to_contain_text("there is no chart 'temperature'")
    visit.shot("unknown-chart")
    response = visit.page.goto(f"/jobs/{job}/charts/gpu-utilization.json?node=elsewhere")
    assert response.status == 404
    expect(visit.page.locator("p.error")).to_contain_text("holds no GPUs on node 'elsewhere'")

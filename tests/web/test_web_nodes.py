"""The nodes pages in a real browser: the live nodes table, a node's page with its live
resource charts over a chosen window, and the clear errors for a node or window that does not
exist. The machine has no GPU, so the node page must say so instead of drawing empty GPU charts."""

from __future__ import annotations

import re

import pytest
from browsing import Visit, expect
from conftest import RunningServer

pytestmark = [pytest.mark.slow, pytest.mark.browser]

DRAWN = re.compile(r"^[1-9]")
"""data-points once a chart has drawn at least one value."""


def the_node(web_server: RunningServer) -> str:
    (node,) = web_server.client().nodes()
    return node.name


def test_the_nodes_table_shows_capacity_and_current_use_and_links_each_node(visit: Visit,
                                                                          web_server: RunningServer) -> None:
    name = the_node(web_server)
    visit.log_in(web_server.token())
    visit.page.get_by_role("link", name="Nodes").click()
    expect(visit.page).to_have_url(re.compile(r"/nodes$"))
    expect(visit.page.locator("h1")).to_have_text("Nodes")
    row = visit.page.locator(f"#nodes-table tr[data-node='{name}']")
    expect(row.locator(".status")).to_have_text("up", timeout=60_000)  # the first sample arrives
    cells = row.locator("td")
    expect(cells.nth(2)).to_have_text(re.compile(r"^\d+ / 2$"))  # MLYARD_NODE_CPUS=2
    expect(cells.nth(4)).to_have_text("none")  # no GPUs here
    expect(cells.nth(5)).to_contain_text("%")
    expect(cells.nth(6)).to_contain_text(re.compile(r"\S+ / \S+i"))
    expect(row.locator("time[data-relative]")).to_be_visible()
    expect(visit.page.locator("#nodes-table")).to_have_attribute("hx-trigger", "every 5s")
    visit.shot("nodes")
    row.get_by_role("link", name=name).click()
    expect(visit.page).to_have_url(re.compile(rf"/nodes/{re.escape(name)}$"))
    expect(visit.page.locator("#node-summary h1")).to_contain_text(f"Node {name}")
    visit.shot("node")


def test_a_node_page_draws_live_charts_and_says_it_has_no_gpus(visit: Visit, web_server: RunningServer) -> None:
    name = the_node(web_server)
    visit.log_in(web_server.token())
    visit.page.goto(f"/nodes/{name}")
    for chart in ("cpu", "memory", "network", "disk", "load"):
        figure = visit.page.locator(f"#chart-{chart}")
        expect(figure).to_have_attribute("data-points", DRAWN, timeout=60_000)
        expect(figure).to_have_attribute("data-state", "live")
    expect(visit.page.locator("#chart-memory figcaption")).to_contain_text("of ")
    expect(visit.page.locator("#no-gpus")).to_have_text("This node has no GPUs, so there are no GPU charts.")
    expect(visit.page.locator("figure[id^='chart-gpu']")).to_have_count(0)
    expect(visit.page.locator("#node-summary")).to_contain_text("No job holds resources on this node.")
    expect(visit.page.get_by_role("link", name="1 hour")).to_have_attribute("aria-current", "true")
    cpu = visit.page.locator("#chart-cpu")
    before = int(cpu.get_attribute("data-points"))
    # Live: the chart asks again by itself and draws the samples taken since.
    expect(cpu).not_to_have_attribute("data-points", str(before), timeout=30_000)
    visit.shot("charts")
    visit.page.get_by_role("link", name="15 min").click()
    expect(visit.page).to_have_url(re.compile(rf"/nodes/{re.escape(name)}\?window=15m$"))
    expect(visit.page.get_by_role("heading", name="Resources over the last 15 min")).to_be_visible()
    expect(visit.page.get_by_role("link", name="15 min")).to_have_attribute("aria-current", "true")
    assert cpu.get_attribute("data-chart").endswith("/charts/cpu.json?window=15m")
    expect(cpu).to_have_attribute("data-points", DRAWN, timeout=30_000)
    visit.page.get_by_role("link", name="24 hours").click()
    expect(visit.page.locator("#chart-cpu")).to_have_attribute("data-points", DRAWN, timeout=30_000)
    visit.shot("window-24h")


def test_an_unknown_node_window_or_chart_is_a_clear_error_page(visit: Visit, web_server: RunningServer) -> None:
    name = the_node(web_server)
    visit.log_in(web_server.token())
    response = visit.page.goto("/nodes/no-such-node")
    assert response.status == 404
    expect(visit.page.locator("p.error")).to_have_text("node 'no-such-node' does not exist")
    visit.shot("unknown-node")
    response = visit.page.goto(f"/nodes/{name}?window=2h")
    assert response.status == 400
    expect(visit.page.locator("p.error")).to_have_text("window '2h' is not one of 15m, 1h, 6h, 24h")
    visit.shot("bad-window")
    response = visit.page.goto(f"/nodes/{name}/charts/gpu-fans.json")
    assert response.status == 404
    expect(visit.page.locator("p.error")).to_contain_text("there is no chart 'gpu-fans'")
    visit.shot("unknown-chart")
    assert visit.page.goto("/nodes/no-such-node/charts/cpu.json").status == 404

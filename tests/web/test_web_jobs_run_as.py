"""The Nodes pages say which OS account jobs run as, as a fact of the node, not as a warning."""

from __future__ import annotations

import time

from test_web_chart_data import WINDOW_LABELS, node, render, usage

from mlyard.web.nodes import node_view

RUN_AS = "jobs run as: root (MLYARD_JOB_USERS=off)"
WARNING = "memory limits are not enforced"


def test_the_nodes_table_and_a_nodes_page_name_the_account_jobs_run_as() -> None:
    info = node(usage(time.time())).model_copy(update={"notes": [WARNING, RUN_AS]})
    view = node_view(info, 5.0, time.time())
    table = render("nodes_table.html", views=[view])
    assert f'<div class="sub jobs-run-as">{RUN_AS}</div>' in table
    assert f"⚠ {WARNING}" in table and f"⚠ {RUN_AS}" not in table
    page = render("node.html", view=view, node=info, jobs=[], window="1h", windows=WINDOW_LABELS, refresh=5,
                  has_gpus=True, gpu_temperature=False, gpu_power=False)
    assert '<dt>Jobs run as</dt><dd class="jobs-run-as">root (MLYARD_JOB_USERS=off)</dd>' in page

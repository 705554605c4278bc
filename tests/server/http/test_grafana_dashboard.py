"""The Grafana dashboard in deploy/grafana draws only families the server exports, or the
node sampler's families that docs/architecture.md names."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from conftest import REPOSITORY

from mlyard.server.http.telemetry import FAMILIES, SAMPLER_FAMILIES

DASHBOARD = REPOSITORY / "deploy" / "grafana" / "mlyard-dashboard.json"
ARCHITECTURE = REPOSITORY / "docs" / "architecture.md"
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum")
PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                   "group_right", "inf", "nan"}


def sample_names(families: dict[str, str]) -> set[str]:
    names = set()
    for name, kind in families.items():
        names |= {name + suffix for suffix in HISTOGRAM_SUFFIXES} if kind == "histogram" else {name}
    return names


def metric_names(expression: str) -> set[str]:
    """The series names a PromQL expression selects: what is left once strings, label
    matchers, ranges, grouping clauses, variables and function calls are taken out."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expression)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\$\{?\w+\}?", "", text)
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        following = text[match.end():].lstrip()
        if following.startswith("(") or match.group() in PROMQL_KEYWORDS:
            continue
        names.add(match.group())
    return names


def panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_every_metric_the_dashboard_draws_is_exported_or_a_documented_sampler_family() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    known = sample_names(FAMILIES) | sample_names(SAMPLER_FAMILIES)
    used: set[str] = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            names = metric_names(target["expr"])
            assert names, f"panel {panel['title']!r}: no metric in {target['expr']!r}"
            assert names <= known, f"panel {panel['title']!r} uses {sorted(names - known)}"
            used |= names
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            metric = re.match(r"label_values\((\w+)\s*,", variable["query"]["query"]).group(1)
            assert metric in known, f"variable {variable['name']!r} uses {metric}"
    # The panels the dashboard promises: jobs, waits, durations, scheduler, API, nodes and GPUs.
    for family in ("mlyard_jobs", "mlyard_job_queue_wait_seconds_bucket", "mlyard_job_duration_seconds_bucket",
                   "mlyard_scheduler_cycle_duration_seconds_bucket", "mlyard_http_request_duration_seconds_bucket",
                   "mlyard_node_cpus_allocated", "mlyard_node_memory_allocated_bytes", "mlyard_node_gpus_allocated",
                   *SAMPLER_FAMILIES):
        assert family in used, f"no panel draws {family}"


def test_the_dashboard_imports_anywhere_through_a_prometheus_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert all(target["datasource"] == panel["datasource"] for target in panel["targets"]), panel["title"]


def test_the_architecture_page_lists_every_family() -> None:
    text = ARCHITECTURE.read_text()
    missing = [name for name in (*FAMILIES, *SAMPLER_FAMILIES) if f"`{name}`" not in text]
    assert not missing, f"docs/architecture.md does not list {missing}"


def test_the_promql_reader_finds_names_and_only_names() -> None:
    assert metric_names('histogram_quantile(0.95, sum by (le, route) (rate(a_bucket{route!="/x"}[$__rate_interval])))') \
        == {"a_bucket"}
    assert metric_names('max by (node) (b{node=~"$node"}) / max by (node) (c) and on (node) d offset 5m') \
        == {"b", "c", "d"}

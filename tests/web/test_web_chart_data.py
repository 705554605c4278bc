"""How the nodes pages and a job's charts shape samples and metrics into chart lines: pure
functions on fabricated values, no server."""

from __future__ import annotations

import re
import time

import pytest

from mlyard.api.nodes import GpuInfo, GpuUsage, NodeInfo, NodeUsage
from mlyard.api.jobs import JobDetail
from mlyard.api.metrics import MetricPoint
from mlyard.errors import MlyardError
from mlyard.web.charts import chart_payload
from mlyard.web.job_charts import gpu_nodes, metric_lines, names_digest, summarize, thin
from mlyard.web.nodes import (
    NODE_CHARTS,
    WINDOW_LABELS,
    after_minutes,
    chart_lines,
    gpu_columns,
    node_health,
    node_view,
    timed,
    window_rows,
    window_seconds,
)
from mlyard.web.templating import templates


def usage(at: float, gpus: list[GpuUsage] = (), cpu: float = 10.0) -> NodeUsage:
    return NodeUsage(at=at, cpu_percent=cpu, load_average=[0.5, 0.4, 0.3], memory_used_bytes=1 << 30,
                     memory_total_bytes=4 << 30, gpus=list(gpus))


def gpu(index: int, utilization: float | None, memory: int | None = None) -> GpuUsage:
    return GpuUsage(index=index, utilization_percent=utilization, memory_used_bytes=memory,
                    memory_total_bytes=80 << 30)


def test_each_gpu_gets_its_own_line_and_a_gpu_missing_from_a_sample_leaves_a_gap() -> None:
    samples = [
        usage(100.0, [gpu(0, 90.0, 10 << 30), gpu(1, 20.0, 1 << 30)]),
        usage(105.0, [gpu(0, 95.0, 11 << 30)]),  # GPU 1 dropped out of this sample
        usage(110.0, [gpu(1, None, 2 << 30), gpu(0, 50.0, 12 << 30)]),  # out of order, no utilization figure
    ]
    times, lines = chart_lines(timed(samples, 5.0), gpu_columns(samples, "utilization_percent"))
    assert times == [100.0, 105.0, 110.0]
    assert lines == {"GPU 0": [90.0, 95.0, 50.0], "GPU 1": [20.0, None, None]}
    _, memory = chart_lines(timed(samples, 5.0), NODE_CHARTS["gpu-memory"](samples))
    assert memory == {"GPU 0": [10 << 30, 11 << 30, 12 << 30], "GPU 1": [1 << 30, None, 2 << 30]}
    payload = chart_payload(times, lines)
    assert [series["label"] for series in payload["series"]] == ["GPU 0", "GPU 1"]


def test_gpu_lines_can_be_limited_to_the_gpus_a_job_holds() -> None:
    samples = [usage(100.0, [gpu(0, 1.0), gpu(1, 2.0), gpu(2, 3.0)])]
    assert list(gpu_columns(samples, "utilization_percent", only=[2, 0])) == ["GPU 0", "GPU 2"]


def test_a_node_without_gpus_has_no_gpu_lines() -> None:
    samples = [usage(100.0), usage(105.0)]
    times, lines = chart_lines(timed(samples, 5.0), gpu_columns(samples, "utilization_percent"))
    assert (times, lines) == ([100.0, 105.0], {})
    assert chart_payload(times, lines)["series"] == []


def test_a_pause_in_the_sampling_breaks_the_line_instead_of_joining_across_it() -> None:
    samples = [usage(100.0, cpu=1.0), usage(105.0, cpu=2.0), usage(200.0, cpu=3.0), usage(205.0, cpu=4.0)]
    times, lines = chart_lines(timed(samples, 5.0), NODE_CHARTS["cpu"](samples))
    assert times == [100.0, 105.0, 152.5, 200.0, 205.0]
    assert lines == {"CPU busy": [1.0, 2.0, None, 3.0, 4.0]}


def test_minute_averages_are_followed_by_the_raw_samples_not_rolled_up_yet() -> None:
    minutes = timed([usage(0.0, cpu=1.0), usage(60.0, cpu=2.0)], 60.0)
    raw = timed([usage(100.0, cpu=9.0), usage(120.0, cpu=3.0), usage(125.0, cpu=4.0)], 5.0)
    merged = after_minutes(minutes, raw)
    assert [item.at for item in merged] == [0.0, 60.0, 120.0, 125.0]  # 100 is inside the minute from 60
    _, lines = chart_lines(merged, NODE_CHARTS["cpu"]([item.row for item in merged]))
    assert lines["CPU busy"] == [1.0, 2.0, 3.0, 4.0]  # a minute then 5 s samples: no gap


def test_short_windows_read_raw_samples_and_long_ones_minutes_then_raw() -> None:
    asked = []

    def read(since: float, resolution: str) -> list[NodeUsage]:
        asked.append((since, resolution))
        return [usage(600.0)] if resolution == "1m" else [usage(650.0), usage(665.0)]

    assert [item.at for item in window_rows(read, 100.0, minutes=False, raw=5.0)] == [650.0, 665.0]
    assert asked == [(100.0, "raw")]
    asked.clear()
    assert [item.at for item in window_rows(read, 100.0, minutes=True, raw=5.0)] == [600.0, 665.0]
    assert asked[0] == (100.0, "1m")
    assert asked[1][1] == "raw" and asked[1][0] == pytest.approx(660.0, abs=0.01)


def test_a_window_outside_the_choices_is_refused_by_name() -> None:
    assert window_seconds("15m") == 900
    with pytest.raises(MlyardError, match="window '2h' is not one of 15m, 1h, 6h, 24h"):
        window_seconds("2h")


def node(sample: NodeUsage | None) -> NodeInfo:
    return NodeInfo(name="n1", backend="local", address="127.0.0.1", cpu_ids=[0, 1], memory_bytes=4 << 30,
                    gpus=[GpuInfo(index=0, model="NVIDIA H200", memory_bytes=141 << 30)], labels={}, notes=[],
                    allocated_cpus=0, allocated_memory_bytes=0, allocated_gpus=0, updated_at=0.0, usage=sample)


def test_a_node_is_up_while_its_sampler_reports_and_stale_after() -> None:
    assert node_health(node(None), 5.0, 1000.0).label == "no samples"
    assert "sampling is off" in node_health(node(None), 0.0, 1000.0).detail
    assert node_health(node(usage(990.0)), 5.0, 1000.0).label == "up"
    stale = node_health(node(usage(900.0)), 5.0, 1000.0)
    assert (stale.label, stale.tone) == ("stale", "warning")
    assert node_health(node(usage(900.0)), 60.0, 1000.0).label == "up"  # three slow periods are not over


def point(id: int, step: int, value: float, at: float, *, rank: int = 0, attempt: int = 1,
          name: str = "loss") -> MetricPoint:
    return MetricPoint(id=id, attempt=attempt, rank=rank, step=step, name=name, value=value, at=at)


def test_a_metric_is_one_line_on_time_with_a_repeated_step_keeping_its_latest_value() -> None:
    points = [point(1, 0, 1.0, 10.0), point(2, 1, 0.5, 11.0), point(3, 1, 0.4, 11.5), point(4, 2, 0.3, 12.0)]
    assert metric_lines(points) == ([10.0, 11.0, 12.0], {"loss": [1.0, 0.4, 0.3]})


def test_ranks_line_up_by_step_and_a_restarted_attempt_continues_in_time() -> None:
    points = [point(1, 0, 1.0, 10.0), point(2, 0, 1.1, 10.2, rank=1), point(3, 1, 0.9, 11.0, rank=1),
              point(4, 0, 0.8, 20.0, attempt=2)]
    times, lines = metric_lines(points)
    assert times == [10.0, 11.0, 20.0]
    assert lines == {"rank 0": [1.0, None, 0.8], "rank 1": [1.1, 0.9, None]}


def test_a_long_history_is_thinned_to_bucket_means_keeping_the_latest_point() -> None:
    times = [float(i) for i in range(101)]
    thinned_times, lines = thin(times, {"loss": [float(i) for i in range(101)]}, 11)
    assert len(thinned_times) <= 11
    assert thinned_times[-1] == 100.0 and lines["loss"][-1] == 100.0
    assert lines["loss"][0] == pytest.approx(4.5)  # the mean of 0..9
    assert thinned_times == sorted(thinned_times)
    assert thin(times[:5], {"loss": [1.0] * 5}, 11) == (times[:5], {"loss": [1.0] * 5})


def test_the_summary_of_each_metric_counts_its_values_and_keeps_the_first_and_latest() -> None:
    first = summarize({}, [point(1, 0, 1.0, 10.0), point(2, 0, 0.1, 10.0, name="accuracy")])
    later = summarize(first, [point(3, 5, 0.5, 12.0)])
    assert later["loss"].count == 2 and later["loss"].first.step == 0 and later["loss"].last.step == 5
    assert first["loss"].count == 1  # the earlier summary is left as it was
    assert names_digest(sorted(later.values(), key=lambda s: s.name)) != names_digest([later["loss"]])


def render(name: str, **context: object) -> str:
    return templates.get_template(name).render(principal=None, nav="nodes", **context)


def test_a_node_with_gpus_gets_gpu_charts_and_its_gpus_in_the_table() -> None:
    sample = usage(time.time(), [gpu(0, 87.0, 40 << 30), gpu(1, 3.0, 1 << 30)])
    sample.gpus[0].temperature_celsius = 61.0
    info = node(sample).model_copy(update={"gpus": [GpuInfo(index=0, model="NVIDIA H200", memory_bytes=141 << 30),
                                                    GpuInfo(index=1, model="NVIDIA H200", memory_bytes=141 << 30)],
                                           "allocated_gpus": 1})
    view = node_view(info, 5.0, time.time())
    html = render("node.html", view=view, node=info, jobs=[], window="1h", windows=WINDOW_LABELS, refresh=5,
                  has_gpus=True, gpu_temperature=True, gpu_power=False)
    assert 'id="chart-gpu-utilization" data-chart="/nodes/n1/charts/gpu-utilization.json?window=1h"' in html
    assert 'id="chart-gpu-memory"' in html and "141Gi each" in html
    assert 'id="chart-gpu-temperature"' in html and 'id="chart-gpu-power"' not in html
    assert "no GPUs" not in html
    assert "87%" in html and "40Gi / 141Gi" in html and "61 °C" in html  # the GPUs' current figures
    table = render("nodes_table.html", views=[view])
    assert "1 / 2" in table and "NVIDIA H200" in table
    assert re.search(r"GPU 0</span>\s*<span class=\"num\">87%", table)


def test_a_node_without_gpus_says_so_instead_of_drawing_empty_gpu_charts() -> None:
    info = node(usage(time.time())).model_copy(update={"gpus": []})
    html = render("node.html", view=node_view(info, 5.0, time.time()), node=info, jobs=[], window="6h",
                  windows=WINDOW_LABELS, refresh=15, has_gpus=False, gpu_temperature=False, gpu_power=False)
    assert "This node has no GPUs, so there are no GPU charts." in html
    assert "chart-gpu" not in html
    assert 'data-chart="/nodes/n1/charts/cpu.json?window=6h" data-refresh="15"' in html


def gpu_job(*, status: str = "RUNNING") -> JobDetail:
    replica = {"name": "worker-0", "role": "worker", "index": 0, "rank": 0, "node": "n1", "state": "running",
               "pid": 10, "exit_code": None, "cpu_ids": [0, 1], "gpu_ids": [3, 1], "memory_bytes": 2 << 30,
               "started_at": 1.0, "finished_at": None}
    attempt = {"number": 1, "created_at": 1.0, "launched_at": 1.0, "running_at": 1.0, "finished_at": None,
               "stop_reason": None, "master_port": None, "replicas": [replica]}
    return JobDetail.model_validate({
        "id": 7, "name": "train", "project": "p", "queue": "q", "priority": 0, "status": status, "message": None,
        "exit_code": None, "replica_count": 1, "attempt_count": 1, "snapshot": None, "submitted_at": 1.0,
        "started_at": 1.0, "finished_at": None, "attempts": [attempt], "events": [],
        "spec": {"name": "train", "command": ["python", "train.py"], "roles": [{"resources": {"gpu": 2}}]},
    })


def test_a_job_holding_gpus_gets_gpu_memory_and_a_utilization_chart_of_its_gpus() -> None:
    job = gpu_job()
    assert gpu_nodes(job) == {"n1": [1, 3]}
    html = render("job_charts.html", job=job)
    assert 'data-chart="/jobs/7/charts/gpu-memory.json"' in html
    assert 'data-chart="/jobs/7/charts/gpu-utilization.json?node=n1"' in html
    assert "GPU 1, 3 on n1" in html
    assert 'data-y-max="200"' in html  # two cores held
    assert "requested 2Gi" in html

"""The overview's data shaping without a browser or a database: choosing between raw samples
and minute averages, cluster percentages across nodes, job counts, and queue bars."""

from __future__ import annotations

import pytest

from mlyard.api.queues import QueueAmounts, QueueInfo, QueueUsage
from mlyard.errors import InvalidRequest
from mlyard.server.store.rows import MINUTE_PERIOD, RAW_PERIOD
from mlyard.spec import JobStatus
from mlyard.server.services.overview import (
    MIN_BUCKETS,
    WINDOWS,
    Bar,
    Capacity,
    Sample,
    aggregate,
    bucket_times,
    count_statuses,
    parse_window,
    pick_samples,
    queue_bars,
    trim_leading,
)

GIB = 1 << 30


def sample(node: str, at: float, cpu: float = 0.0, used: int = 0, total: int = 100, *, period: int = RAW_PERIOD,
           samples: int = 1, gpus: tuple = ()) -> Sample:
    return Sample(node=node, period=period, at=at, samples=samples, cpu_percent=cpu, memory_used=used,
                  memory_total=total, gpus=gpus)


def test_windows_are_parsed_and_an_unknown_one_is_named_in_the_error() -> None:
    assert parse_window(None).key == "1h"
    assert parse_window("7d").seconds == 7 * 24 * 3600
    with pytest.raises(InvalidRequest, match=r"window must be one of 1h, 6h, 24h, 7d, not '2h'") as raised:
        parse_window("2h")
    assert raised.value.field == "window"


def test_every_window_draws_a_few_hundred_points_at_most() -> None:
    for window in WINDOWS.values():
        times = bucket_times(1_000_000.0, window)
        assert 200 <= len(times) <= 400
        assert times[0] <= 1_000_000.0 - window.seconds < times[1]
        assert times[-1] <= 1_000_000.0 < times[-1] + window.bucket
    assert WINDOWS["1h"].prefers_raw and not WINDOWS["6h"].prefers_raw


def test_raw_samples_and_the_minute_average_made_of_them_are_never_both_counted() -> None:
    raw = [sample("a", 60.0), sample("a", 65.0), sample("a", 125.0), sample("b", 61.0)]
    minutes = [sample("a", 60.0, period=MINUTE_PERIOD, samples=12), sample("a", 0.0, period=MINUTE_PERIOD, samples=12)]
    fine = pick_samples(raw + minutes, prefer_raw=True)
    # Raw wins; the minute before any raw sample (expired raw rows) is filled by its average.
    assert sorted((row.node, row.at, row.period) for row in fine) == [
        ("a", 0.0, MINUTE_PERIOD), ("a", 60.0, RAW_PERIOD), ("a", 65.0, RAW_PERIOD), ("a", 125.0, RAW_PERIOD),
        ("b", 61.0, RAW_PERIOD)]
    coarse = pick_samples(raw + minutes, prefer_raw=False)
    # Minutes win; raw rows fill minutes not rolled up yet, and another node's minute is its own.
    assert sorted((row.node, row.at, row.period) for row in coarse) == [
        ("a", 0.0, MINUTE_PERIOD), ("a", 60.0, MINUTE_PERIOD), ("a", 125.0, RAW_PERIOD), ("b", 61.0, RAW_PERIOD)]


def test_cpu_weighs_nodes_by_cores_and_memory_adds_bytes_up() -> None:
    samples = [sample("big", 0.0, cpu=50.0, used=30, total=100), sample("small", 1.0, cpu=100.0, used=10, total=100)]
    result = aggregate(samples, {"big": 6, "small": 2}, [0.0, 10.0], 10.0)
    assert result.times == [0.0, 10.0]
    assert result.cpu == [pytest.approx((50 * 6 + 100 * 2) / 8), None]  # an empty bucket is a gap, not a zero
    assert result.memory == [pytest.approx(20.0), None]
    assert result.gpu == [None, None] and result.gpu_memory == [None, None]


def test_a_node_s_samples_in_one_bucket_are_averaged_by_how_many_samples_each_stands_for() -> None:
    samples = [sample("a", 0.0, cpu=10.0, samples=3), sample("a", 5.0, cpu=50.0, samples=1)]
    result = aggregate(samples, {"a": 4}, [0.0], 60.0)
    assert result.cpu == [pytest.approx(20.0)]


def test_samples_outside_the_window_are_left_out() -> None:
    result = aggregate([sample("a", -5.0, cpu=99.0), sample("a", 25.0, cpu=99.0)], {}, [0.0, 10.0], 10.0)
    assert result.cpu == [None, None]


def test_gpus_of_all_nodes_are_averaged_alike_and_gpu_memory_adds_up() -> None:
    a = ({"index": 0, "utilization_percent": 100.0, "memory_used_bytes": 2 * GIB, "memory_total_bytes": 8 * GIB},
         {"index": 1, "utilization_percent": 0.0, "memory_used_bytes": 0, "memory_total_bytes": 8 * GIB})
    b = ({"index": 0, "utilization_percent": 50.0, "memory_used_bytes": 6 * GIB, "memory_total_bytes": 8 * GIB},
         {"index": 1, "utilization_percent": None, "memory_used_bytes": None, "memory_total_bytes": 8 * GIB})
    result = aggregate([sample("a", 0.0, gpus=a), sample("b", 0.0, gpus=b)], {}, [0.0], 10.0)
    assert result.gpu == [pytest.approx(50.0)]  # three GPUs measured: (100 + 0 + 50) / 3
    assert result.gpu_memory == [pytest.approx(100 * 8 / 24)]


def test_the_buckets_before_the_first_sample_are_left_out_but_later_gaps_stay() -> None:
    times = [10.0 * index for index in range(20)]
    result = trim_leading(aggregate([sample("a", 65.0, cpu=10.0), sample("a", 85.0, cpu=30.0)], {}, times, 10.0))
    assert (result.times[0], result.cpu[:3]) == (60.0, [10.0, None, 30.0])
    # A single sample at the end still leaves a time axis around it.
    late = trim_leading(aggregate([sample("a", 195.0, cpu=50.0)], {}, times, 10.0))
    assert (len(late.times), late.cpu[-1]) == (MIN_BUCKETS, 50.0)
    empty = aggregate([], {}, [0.0, 10.0], 10.0)
    assert trim_leading(empty) == empty  # nothing measured: the chart says so over the whole window


def test_job_counts_list_every_status_in_lifecycle_order() -> None:
    counts = count_statuses([("RUNNING", 2), ("QUEUED", 3), ("FAILED", 1)])
    assert [entry.status for entry in counts.statuses] == list(JobStatus)
    assert (counts.queued, counts.running, counts.active, counts.total) == (3, 2, 5, 6)
    assert counts.of(JobStatus.SUCCEEDED) == 0


def queue(quota: QueueAmounts, borrow: QueueAmounts, usage: QueueUsage) -> QueueInfo:
    return QueueInfo(name="team", project="vision", quota=quota, borrow_limit=borrow, weight=1.0, usage=usage,
                     running=1, waiting=0, waiting_jobs=[])


def test_queue_bars_measure_use_against_quota_and_ceiling_on_the_cluster_s_scale() -> None:
    cluster = Capacity(nodes=1, cpus=8, memory=64 * GIB, gpus=0)
    info = queue(QueueAmounts(cpu=2, memory=16 * GIB), QueueAmounts(cpu=2, memory=0),
                 QueueUsage(gpu=0, cpu=3, memory=4 * GIB))
    cpu, memory = queue_bars(info, cluster)  # no GPU anywhere: no GPU bar
    assert (cpu.resource, cpu.used, cpu.quota, cpu.ceiling, cpu.scale) == ("cpu", 3, 2, 4, 8)
    assert (cpu.used_percent, cpu.quota_percent, cpu.ceiling_percent) == (37.5, 25.0, 50.0)
    assert (cpu.borrowed, cpu.borrow_limit, cpu.state) == (1, 2, "borrowing")
    assert cpu.summary == "3 used · quota 2 · may borrow 2 · borrowing 1"
    assert (memory.state, memory.ceiling, memory.amount(memory.used)) == ("within", 16 * GIB, "4Gi")
    assert memory.summary == "4Gi used · quota 16Gi · no borrowing"


def test_a_queue_without_quota_or_limit_and_one_over_its_lowered_ceiling() -> None:
    cluster = Capacity(nodes=2, cpus=4, memory=8 * GIB, gpus=2)
    free = queue(QueueAmounts(), QueueAmounts(), QueueUsage(gpu=1, cpu=1, memory=GIB))
    gpu = queue_bars(free, cluster)[0]
    assert (gpu.resource, gpu.quota, gpu.ceiling, gpu.quota_percent, gpu.ceiling_percent) == ("gpu", None, None, None,
                                                                                             None)
    # Nothing guaranteed and nothing capped: the scheduler never counts it as borrowing.
    assert (gpu.summary, gpu.state, gpu.borrowed) == ("1 used · no quota or borrowing limit", "unlimited", 0)
    unlimited = queue(QueueAmounts(cpu=1), QueueAmounts(), QueueUsage(gpu=0, cpu=2, memory=0))
    cpu = queue_bars(unlimited, cluster)[1]
    assert (cpu.state, cpu.summary) == ("borrowing", "2 used · quota 1 · borrows without limit · borrowing 1")
    squeezed = queue(QueueAmounts(gpu=1), QueueAmounts(gpu=0), QueueUsage(gpu=2, cpu=0, memory=0))
    assert queue_bars(squeezed, cluster)[0].state == "over"


def test_a_bar_never_runs_past_its_track() -> None:
    bar = Bar("cpu", "CPU cores", used=12, quota=10, ceiling=None, scale=4)
    assert bar.used_percent == 100.0 and bar.quota_percent == 100.0
    assert Bar("cpu", "CPU cores", used=0, quota=None, ceiling=0, scale=0).used_percent == 0.0

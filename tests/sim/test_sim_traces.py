"""Trace loaders on the real public traces, and their errors on malformed rows."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mlyard.sim import TraceError, load_openb_nodes, load_trace

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
PHILLY = TRACES / "philly-pollux" / "philly.csv"
ITP = TRACES / "microsoft-itp-2021" / "raw" / "cluster04.csv"
OPENB = TRACES / "alibaba-openb-2023" / "openb_pod_list_default.csv"
OPENB_SPEC = TRACES / "alibaba-openb-2023" / "openb_pod_list_gpuspec33.csv"
OPENB_NODES = TRACES / "alibaba-openb-2023" / "openb_node_list_gpu_node.csv"

needs_traces = pytest.mark.skipif(not PHILLY.exists(), reason="the public traces are not in ../shared/traces")

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
ITP_HEADER = "job_id,submission_time,duration,num_gpu"
OPENB_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
                "scheduled_time")


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def in_order(jobs) -> bool:
    return all((a.submitted_at, a.job_id) <= (b.submitted_at, b.job_id) for a, b in itertools.pairwise(jobs))


@needs_traces
def test_philly_has_every_row_sorted_from_zero_with_the_vc_as_tenant():
    jobs = load_trace(PHILLY, "philly")
    assert len(jobs) == 82_247
    assert jobs[0].submitted_at == 0 and in_order(jobs)
    assert len({job.tenant for job in jobs}) == 15
    assert sum(job.gpus * job.duration for job in jobs) / 3600 == pytest.approx(978_078, rel=1e-4)
    assert max(job.gpus for job in jobs) == 128
    # 2017-09-04 10:30:41 to 2017-12-22 08:02:11
    assert jobs[-1].submitted_at == 9_408_690


@needs_traces
def test_itp_cluster04_has_synthetic_tenants_by_default():
    jobs = load_trace(ITP, "itp")
    assert len(jobs) == 15_802
    assert jobs[0].submitted_at == 0 and in_order(jobs)
    assert {job.tenant for job in jobs} == {"tenant-0", "tenant-1", "tenant-2", "tenant-3"}
    assert sum(job.gpus * job.duration for job in jobs) / 3600 == pytest.approx(705_683, rel=1e-4)
    assert {job.tenant for job in load_trace(ITP, "itp", tenants="none", limit=50)} == {"default"}


@needs_traces
def test_openb_pods_carry_cpu_memory_qos_priority_and_whole_gpus():
    jobs = load_trace(OPENB, "openb")
    assert len(jobs) == 8_152 and in_order(jobs)
    assert {job.tenant for job in jobs} == {"LS", "BE", "Burstable", "Guaranteed"}
    first = jobs[0]  # openb-pod-0000: 12 cores, 16 GiB, 1 GPU, LS, lives 0 .. 12,537,496 s
    assert (first.cpu, first.memory_bytes, first.gpus, first.priority) == (12.0, 16 << 30, 1, 2)
    assert first.duration == 12_537_496
    assert sum(1 for job in jobs if job.gpus == 0) == 1_088
    assert sum(1 for job in jobs if job.gpus == 1) == 6_989  # fractional GPUs count as one
    by_qos = {job.tenant: job.priority for job in jobs}
    assert by_qos["LS"] == by_qos["Guaranteed"] > by_qos["Burstable"] > by_qos["BE"]
    constrained = load_trace(OPENB_SPEC, "openb")
    assert sum(1 for job in constrained if job.gpu_models) == 2_388
    assert ("V100M16", "V100M32") in {job.gpu_models for job in constrained}


@needs_traces
def test_openb_node_list():
    nodes = load_openb_nodes(OPENB_NODES)
    assert len(nodes) == 1_213 and sum(node.gpus for node in nodes) == 6_212
    assert (nodes[0].name, nodes[0].cpu, nodes[0].memory_bytes, nodes[0].gpus, nodes[0].gpu_model) == (
        "openb-node-0000", 64.0, 256 << 30, 2, "P100")


def test_limit_keeps_the_first_jobs_by_submission_and_rebases_time(tmp_path: Path):
    path = write(tmp_path, "c.csv", ITP_HEADER, "a,500,10,1", "b,100,20,2", "c,300,30,4")
    jobs = load_trace(path, "itp", limit=2)
    assert [(job.job_id, job.submitted_at, job.duration, job.gpus) for job in jobs] == [(2, 0, 20, 2), (3, 200, 30, 4)]


def test_zero_durations_and_trailing_blank_lines_are_fine(tmp_path: Path):
    path = write(tmp_path, "philly.csv", PHILLY_HEADER, "2017-10-09 07:01:55,0.0,1,0.0,vc1",
                 "2017-10-09 07:00:00,5,2,10,vc2", "", "")
    jobs = load_trace(path, "philly")
    assert [(job.submitted_at, job.duration, job.tenant) for job in jobs] == [(0, 5, "vc2"), (115, 0, "vc1")]


@pytest.mark.parametrize(
    ("fmt", "header", "bad_row", "message"),
    [
        ("philly", PHILLY_HEADER, "2017-10-09 07:01:55,abc,1,66.0,vc", "line 3: duration 'abc' is not a number"),
        ("philly", PHILLY_HEADER, "2017-10-09 07:01:55,-5,1,66.0,vc", "line 3: duration -5 is negative"),
        ("philly", PHILLY_HEADER, "2017-13-09 07:01:55,5,1,5,vc", "line 3: timestamp '2017-13-09 07:01:55' is not"),
        ("philly", PHILLY_HEADER, "2017-10-09,5,1,5,vc", "line 3: timestamp '2017-10-09' is not"),
        ("philly", PHILLY_HEADER, "2017-10-09 07:01:55,5,1", "line 3: missing column 'cluster'"),
        ("philly", PHILLY_HEADER, "2017-10-09 07:01:55,5,1.5,5,vc", "line 3: num_gpus '1.5' is not a whole number"),
        ("itp", ITP_HEADER, "x,12,nan,1", "line 3: duration 'nan' is not a finite number"),
        ("itp", ITP_HEADER, "x,12,30,-1", "line 3: num_gpu -1 is negative"),
        ("itp", ITP_HEADER, "x,soon,30,1", "line 3: submission_time 'soon' is not a number"),
        ("openb", OPENB_HEADER, "p,1000,1024,1,1000,,LS,Running,50,10,", "line 3: deletion_time 10 is before"),
        ("openb", OPENB_HEADER, "p,1000,1024,1,1000,,VIP,Running,5,10,", "line 3: qos 'VIP' is not one of"),
        ("openb", OPENB_HEADER, "p,lots,1024,1,1000,,LS,Running,5,10,", "line 3: cpu_milli 'lots' is not a number"),
    ],
)
def test_a_malformed_row_is_named_by_file_line_and_column(tmp_path: Path, fmt, header, bad_row, message):
    good = {"philly": "2017-10-09 07:00:00,5,1,5,vc", "itp": "a,0,5,1",
            "openb": "p0,1000,1024,1,1000,,LS,Running,0,5,0"}[fmt]
    path = write(tmp_path, f"{fmt}.csv", header, good, bad_row, good)
    with pytest.raises(TraceError) as caught:
        load_trace(path, fmt)
    assert str(caught.value).startswith(f"{fmt}.csv {message}")
    assert "\n" not in str(caught.value)


def test_a_wrong_header_names_the_missing_column(tmp_path: Path):
    path = write(tmp_path, "cluster01.csv", "job,submitted,duration,gpus", "a,0,5,1")
    with pytest.raises(TraceError, match=r"^cluster01.csv line 1: header lacks column 'job_id'"):
        load_trace(path, "itp")
    with pytest.raises(TraceError, match="line 1: header lacks column 'timestamp'"):
        load_trace(write(tmp_path, "p.csv", ITP_HEADER, "a,0,5,1"), "philly")


def test_missing_and_empty_files_and_bad_tenant_choices(tmp_path: Path):
    with pytest.raises(TraceError, match="does not exist"):
        load_trace(tmp_path / "nope.csv", "itp")
    with pytest.raises(TraceError, match="empty"):
        load_trace(write(tmp_path, "empty.csv", ""), "itp")
    with pytest.raises(TraceError, match="holds no jobs"):
        load_trace(write(tmp_path, "header.csv", ITP_HEADER), "itp")
    good = write(tmp_path, "c.csv", ITP_HEADER, "a,0,5,1")
    with pytest.raises(TraceError, match="--tenants vc needs a trace with that column"):
        load_trace(good, "itp", tenants="vc")
    with pytest.raises(TraceError, match="--tenants must be"):
        load_trace(good, "itp", tenants="0")
    with pytest.raises(TraceError, match="unknown trace format 'csv'"):
        load_trace(good, "csv")

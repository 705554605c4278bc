"""What `mlyard top` draws from a frame (GPU nodes included, which this machine may not have),
and how it fails without a server."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import MLYARD, free_port
from rich.console import Console

from mlyard.api.nodes import GpuInfo, GpuUsage, NodeInfo, NodeInventory, NodeUsage
from mlyard.api.resources import RunningJobUsage
from mlyard.cli.top_view import TopFrame, bar, bytes_pair, render
from mlyard.spec import JobStatus

NOW = 1_800_000_000.0
GIB = 1 << 30


def node(name: str, *, gpus: int = 0, usage_at: float | None = NOW - 2) -> NodeInfo:
    usage = None
    if usage_at is not None:
        usage = NodeUsage(
            at=usage_at, cpu_percent=63.0, load_average=[3.5, 2.25, 1.0], memory_used_bytes=24 * GIB,
            memory_total_bytes=64 * GIB, net_rx_bytes_per_second=3 * 1024 * 1024, net_tx_bytes_per_second=2048,
            disk_read_bytes_per_second=0, disk_write_bytes_per_second=5 * 1024 * 1024,
            gpus=[GpuUsage(index=index, utilization_percent=87.0 - 40 * index, memory_used_bytes=(12 + index) * GIB,
                           memory_total_bytes=80 * GIB) for index in range(gpus)],
        )
    return NodeInfo(
        name=name, backend="local", address="10.0.0.1", cpu_ids=list(range(16)), memory_bytes=64 * GIB,
        gpus=[GpuInfo(index=index, model="H100", memory_bytes=80 * GIB) for index in range(gpus)], labels={},
        notes=[], allocated_cpus=4, allocated_memory_bytes=8 * GIB, allocated_gpus=min(gpus, 1), updated_at=NOW,
        usage=usage, inventory=NodeInventory(cpu_model="Test CPU", cpu_count=16, memory_bytes=64 * GIB, gpu_count=gpus),
    )


def job(job_id: int, *, cpu_percent: float | None, gpus: int = 0) -> RunningJobUsage:
    measured = cpu_percent is not None
    return RunningJobUsage(
        job_id=job_id, name=f"train-{job_id}", user="ada", project="vision", queue="research",
        status=JobStatus.RUNNING, replicas=2, nodes=["gpu-1"], cpus=2, gpus=gpus, launched_at=NOW - 125,
        at=NOW - 1 if measured else None, cpu_percent=cpu_percent, memory_bytes=3 * GIB if measured else None,
        gpu_memory_bytes=(20 * GIB if gpus else 0) if measured else None, measured=2 if measured else 0,
    )


def text_of(frame: TopFrame, **options) -> str:
    console = Console(width=300, record=True, color_system=None, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render(frame, **options))
    console.file.close()
    return console.export_text()


def row(text: str, start: str) -> str:
    return next(line for line in text.splitlines() if line.lstrip().startswith(start))


def test_a_gpu_node_shows_each_gpus_utilization_and_memory_and_its_allocation() -> None:
    text = text_of(TopFrame(at=NOW, server="http://mlyard:8470", nodes=[node("gpu-1", gpus=2)], jobs=[]))
    assert "GPUS (util, memory)" in text and "ALLOCATED" in text
    first = row(text, "gpu-1")
    assert "63%" in first and "24.0/64.0 GiB" in first and "rx 3.0 MiB/s" in first and "r 0 B/s" in first
    assert "0 █████░  87% 12.0/80.0 GiB" in first and "cpu 4/16" in first
    second = text.splitlines()[text.splitlines().index(first) + 1]
    assert "1 ███░░░  47% 13.0/80.0 GiB" in second and "gpu 1/2" in second and "w 5.0 MiB/s" in second
    assert "load 3.50 2.25 1.00" in second and "Test CPU" in second
    assert "1 node · 0 jobs holding resources" in text and "no job holds resources" in text


def test_a_node_without_gpus_or_recent_figures() -> None:
    frame = TopFrame(at=NOW, server="s", nodes=[node("cpu-1"), node("quiet", usage_at=NOW - 600)], jobs=[])
    text = text_of(frame)
    cpu_row = row(text, "cpu-1")
    assert "63%" in cpu_row and "gpu " not in cpu_row and "%" not in cpu_row.split("GiB", 1)[1].split("rx")[0]
    assert "no sample in the last minute" in row(text, "quiet")


def test_jobs_show_their_figures_against_what_they_hold() -> None:
    frame = TopFrame(at=NOW, server="s", nodes=[],
                     jobs=[job(7, cpu_percent=150.0, gpus=1), job(8, cpu_percent=None)])
    text = text_of(frame, keys=True)
    busy = row(text, "7 ")
    assert "train-7" in busy and "ada" in busy and "research" in busy and "RUNNING" in busy
    assert "2m05s" in busy and "████████░░  150% of 2" in busy and "3.0 GiB" in busy and "20.0 GiB" in busy
    unmeasured = row(text, "8 ")
    assert "train-8" in unmeasured and "GiB" not in unmeasured
    assert "2 jobs holding resources" in text and "(q quits)" in text and "no nodes" in text


def test_an_error_is_shown_over_the_last_frame() -> None:
    frame = TopFrame(at=NOW, server="s", nodes=[node("cpu-1")], jobs=[job(7, cpu_percent=10.0)])
    text = text_of(frame, error="cannot reach the mlyard server")
    assert "not refreshed: cannot reach the mlyard server" in text and "cpu-1" in text


def test_bars_and_byte_pairs() -> None:
    assert bar(0, 4).plain == "░░░░" and bar(100, 4).plain == "████" and bar(250, 4).plain == "████"
    assert bar(None, 4).plain == "░░░░" and bar(50, 4).plain == "██░░"
    assert bytes_pair(512, 1024) == "0.5/1.0 KiB" and bytes_pair(3, 10) == "3/10 B"


def test_json_has_nodes_and_jobs() -> None:
    frame = TopFrame(at=NOW, server="s", nodes=[node("gpu-1", gpus=1)], jobs=[job(7, cpu_percent=99.0)])
    data = frame.model_dump(mode="json")
    assert data["nodes"][0]["usage"]["gpus"][0]["utilization_percent"] == 87.0
    assert data["jobs"][0]["cpu_percent"] == 99.0 and data["jobs"][0]["user"] == "ada"


def test_an_unreachable_server_is_one_line_and_a_failure(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLYARD_")}
    env.update(MLYARD_HOME=str(tmp_path), MLYARD_URL=f"http://127.0.0.1:{free_port()}")
    for arguments in (["top", "--once"], ["top", "--once", "-o", "json"], ["top"]):
        result = subprocess.run([MLYARD, *arguments], env=env, capture_output=True, text=True, timeout=60,
                                stdin=subprocess.DEVNULL, check=False)
        assert result.returncode == 1, result
        assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "cannot reach the mlyard server" in result.stderr and "Traceback" not in result.stderr
    misuse = subprocess.run([MLYARD, "top", "-o", "json"], env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert misuse.returncode == 2 and "--once" in misuse.stderr

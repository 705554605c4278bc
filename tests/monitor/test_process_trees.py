"""Process-tree figures from real processes: a busy loop shows a core, a sleeping process next
to nothing, a tree counts its descendants (also those that left for a session of their own),
and a pid that is no longer the recorded process is left out; a tree's TCP connections are its
descendants' too."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from conftest import favour

from mlyard.monitor import ProcessTrees, Root, Sampler
from mlyard.monitor.processes import tree_connections

BUSY = "while True: pass"
IDLE = "import time; time.sleep(600)"
# A parent that sleeps while its child, in a session of its own as torchrun's workers are, spins.
PARENT_OF_BUSY = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'while True: pass'], "
                  "start_new_session=True); time.sleep(600)")
WINDOW = 2.0


@pytest.fixture
def spawn() -> Iterator:
    started: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        started.append(process)
        favour(process.pid)
        return process

    yield start
    for process in started:
        try:
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
        except psutil.Error:
            pass
        process.kill()
        process.wait()


def two_measurements(trees: ProcessTrees, roots: dict) -> dict:
    trees.measure(roots)
    time.sleep(WINDOW)
    return trees.measure(roots)


def test_a_busy_loop_shows_a_core_and_a_sleeping_process_almost_nothing(spawn) -> None:
    busy, idle = spawn(BUSY), spawn(IDLE)
    time.sleep(0.3)  # both past their start-up
    figures = two_measurements(ProcessTrees(), {"busy": Root(busy.pid), "idle": Root(idle.pid)})
    assert figures["busy"].cpu_percent >= 80, figures
    assert figures["idle"].cpu_percent <= 10, figures
    assert figures["busy"].rss_bytes > 1 << 20 and figures["idle"].rss_bytes > 1 << 20
    assert figures["busy"].processes == figures["idle"].processes == 1
    assert figures["busy"].gpu_memory_bytes == 0


def test_a_tree_counts_descendants_in_sessions_of_their_own(spawn) -> None:
    parent = spawn(PARENT_OF_BUSY)
    assert wait_for_children(parent.pid, 1)
    for child in psutil.Process(parent.pid).children():
        favour(child.pid)
    figures = two_measurements(ProcessTrees(), {"job": Root(parent.pid, psutil.Process(parent.pid).create_time())})
    assert figures["job"].processes == 2
    assert figures["job"].cpu_percent >= 80, figures


def test_a_new_process_is_measured_over_its_life_so_far(spawn) -> None:
    busy = spawn(BUSY)
    time.sleep(1.0)
    figures = ProcessTrees().measure({"busy": Root(busy.pid)})  # a first look, no earlier measurement
    assert figures["busy"].cpu_percent >= 50, figures


def test_a_pid_that_is_not_the_recorded_process_or_is_gone_is_left_out(spawn) -> None:
    idle = spawn(IDLE)
    started = psutil.Process(idle.pid).create_time()
    gone = spawn("pass")
    gone.wait()
    figures = ProcessTrees().measure({
        "recorded": Root(idle.pid, started), "reused": Root(idle.pid, started - 100), "gone": Root(gone.pid),
    })
    assert set(figures) == {"recorded"}


def test_a_sample_holds_the_node_figures(spawn) -> None:
    sampler = Sampler()
    try:
        busy = spawn(BUSY)
        time.sleep(1.0)
        sample = sampler.sample({"busy": Root(busy.pid)})
    finally:
        sampler.close()
    node = sample.node
    assert abs(sample.at - time.time()) < 5
    assert len(node.cpu_per_core) == psutil.cpu_count()
    assert 0 < node.cpu_percent <= 100  # the busy loop keeps at least part of a core busy
    assert len(node.load_average) == 3
    assert 0 < node.memory_used_bytes < node.memory_total_bytes == psutil.virtual_memory().total
    for rate in (node.disk_read_bytes_per_second, node.disk_write_bytes_per_second,
                 node.net_rx_bytes_per_second, node.net_tx_bytes_per_second):
        assert rate >= 0
    assert sample.trees["busy"].cpu_percent > 0
    inventory = sampler.inventory()
    assert inventory["cpu_count"] == psutil.cpu_count() and inventory["cpu_model"]
    assert inventory["memory_bytes"] == psutil.virtual_memory().total


def wait_for_children(pid: int, count: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(psutil.Process(pid).children(recursive=True)) >= count:
            time.sleep(0.3)  # the child past its interpreter's start-up
            return True
        time.sleep(0.05)
    return False


def test_sampling_costs_little(spawn) -> None:
    """A generous bound for any test machine; bench/monitor_overhead.py measures the target."""
    roots = {index: Root(spawn(IDLE).pid) for index in range(10)}
    sampler = Sampler()
    try:
        sampler.sample(roots)
        began = time.thread_time()
        for _ in range(20):
            sampler.sample(roots)
        per_sample = (time.thread_time() - began) / 20
    finally:
        sampler.close()
    assert per_sample < 0.05, f"{per_sample * 1000:.1f} ms of CPU per sample"
    assert os.getpid() not in roots


def test_a_trees_connections_include_its_descendants_and_a_stranger_has_none(spawn) -> None:
    def reaches(connections: list | None, port: int) -> bool:
        return any(c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr[1] == port for c in connections or [])

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        # The connection is the grandchild's, in a session of its own, as a torchrun worker's would be.
        parent = spawn("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
                       f"'import socket, time; s = socket.create_connection((\"127.0.0.1\", {port})); "
                       "time.sleep(600)'], start_new_session=True); time.sleep(600)")
        accepted, _ = listener.accept()
        with accepted:
            found = tree_connections(Root(parent.pid))
            assert found is not None and reaches(found, port), found
            assert tree_connections(Root(spawn(IDLE).pid)) == []
            started = psutil.Process(parent.pid).create_time()
            assert tree_connections(Root(parent.pid, started_at=started - 60)) is None  # a reused pid

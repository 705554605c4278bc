"""GPU figures through the real NVML: checked where a GPU is present, skipped elsewhere; and a
machine without NVML gives no GPU figures rather than an error."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mlyard.monitor import GpuReader, ProcessTrees, Root, Sampler


def gpu_count() -> int:
    reader = GpuReader()
    try:
        return len(reader.models)
    finally:
        reader.close()


HAS_GPU = gpu_count() > 0
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="no GPU is present (NVML found none)")


@pytest.mark.skipif(HAS_GPU, reason="a GPU is present: the NVML path is tested instead")
def test_without_a_gpu_there_are_no_gpu_figures_and_no_error() -> None:
    reader = GpuReader()
    try:
        assert reader.read() == ([], {})
        assert reader.models == []
    finally:
        reader.close()
    sampler = Sampler()
    try:
        assert sampler.sample().gpus == []
        assert sampler.inventory()["gpu_count"] == 0
    finally:
        sampler.close()


@needs_gpu
def test_each_gpu_reports_utilization_memory_temperature_and_power() -> None:
    reader = GpuReader()
    try:
        figures, _ = reader.read()
    finally:
        reader.close()
    assert [gpu.index for gpu in figures] == list(range(len(figures)))
    for gpu in figures:
        assert gpu.model
        assert gpu.utilization_percent is None or 0 <= gpu.utilization_percent <= 100
        assert gpu.memory_total_bytes and 0 <= gpu.memory_used_bytes <= gpu.memory_total_bytes
        assert gpu.temperature_celsius is None or 0 < gpu.temperature_celsius < 150
        assert gpu.power_watts is None or gpu.power_watts >= 0


HOLD_GPU_MEMORY = """
import time, torch
block = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
print("ready", flush=True)
time.sleep(600)
"""


@needs_gpu
def test_gpu_memory_of_a_process_tree_comes_from_nvml() -> None:
    pytest.importorskip("torch")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_GPU_MEMORY], stdout=subprocess.PIPE, text=True)
    reader = GpuReader()
    try:
        assert holder.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        figures = {}
        while time.monotonic() < deadline:
            figures = ProcessTrees().measure({"job": Root(holder.pid)}, reader.read()[1])
            if figures.get("job") and figures["job"].gpu_memory_bytes:
                break
            time.sleep(0.5)
        assert figures["job"].gpu_memory_bytes >= 256 * 1024 * 1024, figures
    finally:
        reader.close()
        holder.kill()
        holder.wait()

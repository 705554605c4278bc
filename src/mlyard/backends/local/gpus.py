"""GPUs of this machine through NVML (nvidia-ml-py); none when NVML is absent."""

from __future__ import annotations

from mlyard.backends.base import GpuDescription


def local_gpus() -> tuple[GpuDescription, ...]:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: a CPU-only machine
        return ()
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
            found.append(GpuDescription(index=index, model=name if isinstance(name, str) else name.decode(), memory_bytes=int(memory)))
        return tuple(found)
    finally:
        pynvml.nvmlShutdown()

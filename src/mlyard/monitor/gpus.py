"""NVIDIA GPUs through NVML: utilization, memory, temperature, power, and which processes
hold memory. Without NVML (no driver, no library) there are simply no GPU figures."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mlyard.monitor")


@dataclass(frozen=True)
class GpuFigures:
    index: int
    model: str
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    temperature_celsius: float | None
    power_watts: float | None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else value.decode(errors="replace")


class GpuReader:
    """Holds NVML open (and its device handles) for its whole life: opening it costs far more
    than a sample. A figure a device does not support is None; a failing device is skipped."""

    def __init__(self) -> None:
        self.note: str | None = None
        """Why a machine whose NVML library is present gives no GPU figures (driver not loaded, …)."""
        self._nvml: Any = None
        self._devices: list[tuple[int, str, Any]] = []
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as error:  # noqa: BLE001 - any failure only means no GPU figures
            if type(error).__name__ not in ("NVMLError_LibraryNotFound", "ModuleNotFoundError"):
                self.note = f"no GPU figures: NVML failed to start ({error})"
            return
        self._nvml = pynvml
        try:
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                self._devices.append((index, _text(pynvml.nvmlDeviceGetName(handle)), handle))
        except pynvml.NVMLError as error:
            self.note = f"no GPU figures: NVML could not list the GPUs ({error})"
            self.close()

    @property
    def available(self) -> bool:
        return self._nvml is not None

    @property
    def models(self) -> list[str]:
        return [model for _, model, _ in self._devices]

    def _try(self, call: Any, *arguments: Any) -> Any:
        try:
            return call(*arguments)
        except self._nvml.NVMLError:
            return None

    def read(self) -> tuple[list[GpuFigures], dict[int, int]]:
        """Each GPU's figures, and the GPU memory each process (by pid) holds over all GPUs."""
        if self._nvml is None:
            return [], {}
        nvml = self._nvml
        figures, by_pid = [], {}
        for index, model, handle in self._devices:
            utilization = self._try(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = self._try(nvml.nvmlDeviceGetMemoryInfo, handle)
            temperature = self._try(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            power = self._try(nvml.nvmlDeviceGetPowerUsage, handle)  # milliwatts
            figures.append(GpuFigures(
                index=index, model=model,
                utilization_percent=float(utilization.gpu) if utilization is not None else None,
                memory_used_bytes=int(memory.used) if memory is not None else None,
                memory_total_bytes=int(memory.total) if memory is not None else None,
                temperature_celsius=float(temperature) if temperature is not None else None,
                power_watts=power / 1000 if power is not None else None,
            ))
            # Pids are those of NVML's pid namespace: inside a container they may not be ours.
            for process in self._try(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or ():
                if process.usedGpuMemory is not None:
                    by_pid[process.pid] = by_pid.get(process.pid, 0) + int(process.usedGpuMemory)
        return figures, by_pid

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                log.debug("NVML did not shut down cleanly", exc_info=True)
            self._nvml = None
            self._devices = []

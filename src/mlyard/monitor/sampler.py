"""One sample of a machine: the node's figures, its GPUs', and each replica's process tree."""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from mlyard.monitor.gpus import GpuFigures, GpuReader
from mlyard.monitor.node import NodeFigures, NodeReader, inventory
from mlyard.monitor.processes import ProcessTrees, Root, TreeFigures

Key = TypeVar("Key", bound=Hashable)


@dataclass(frozen=True)
class Sample(Generic[Key]):
    at: float
    node: NodeFigures
    gpus: list[GpuFigures]
    trees: dict[Key, TreeFigures] = field(default_factory=dict)


class Sampler:
    """Keeps its readers between samples: rates and CPU figures are deltas since the previous
    sample, and NVML is opened once. Close it to release NVML."""

    def __init__(self) -> None:
        self.node = NodeReader()
        self.gpus = GpuReader()
        self.trees = ProcessTrees()

    def sample(self, roots: Mapping[Key, Root] | None = None) -> Sample[Key]:
        at = time.time()
        node = self.node.read()
        gpus, gpu_memory = self.gpus.read()
        trees = self.trees.measure(roots, gpu_memory) if roots else {}
        return Sample(at=at, node=node, gpus=gpus, trees=trees)

    def inventory(self) -> dict[str, object]:
        """What the machine is: processor, cores, memory, GPUs, and why GPU figures are missing."""
        machine = inventory()
        models = self.gpus.models
        return {
            "cpu_model": machine.cpu_model, "cpu_count": machine.cpu_count, "physical_cores": machine.physical_cores,
            "memory_bytes": machine.memory_bytes, "gpu_count": len(models),
            "gpu_model": ", ".join(dict.fromkeys(models)) or None,
            "notes": [self.gpus.note] if self.gpus.note else [],
        }

    def close(self) -> None:
        self.gpus.close()

"""Measuring a machine and the process trees of its replicas: no database, no server.

`Sampler` (in `sampler.py`) puts the parts together: `node.py` for the whole machine with
psutil, `gpus.py` for NVIDIA GPUs through NVML, `processes.py` for the CPU, memory and GPU
memory of each replica's process tree. The server's sampling thread (`server/sampling.py`)
stores what it measures; a per-node agent could post the same figures.
"""

from mlyard.monitor.gpus import GpuFigures, GpuReader
from mlyard.monitor.node import NodeFigures, NodeReader, inventory
from mlyard.monitor.processes import ProcessTrees, Root, TreeFigures
from mlyard.monitor.sampler import Sample, Sampler

__all__ = [
    "GpuFigures",
    "GpuReader",
    "NodeFigures",
    "NodeReader",
    "ProcessTrees",
    "Root",
    "Sample",
    "Sampler",
    "TreeFigures",
    "inventory",
]

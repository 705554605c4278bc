"""How an elastic job's throughput grows with its replicas, and which job gains most from one
more replica of idle capacity (toward Pollux's goodput).

A job's curve is Amdahl's law with its serial fraction ``s`` (the share of a step that does not
shrink with more replicas: gradient exchange, input pipelines, the optimizer step): ``k``
replicas do ``1 / (s + (1 - s) / k)`` times the work of one. A job whose fraction is unknown
is taken to scale linearly (``s = 0``), which is what a scheduler that ignores scaling assumes.

A replica goes to the job it makes relatively the most faster (``relative_gain``): one more
replica shortens a job's remaining run time by that share, whatever its size, so a job on two
replicas gains more from a third than one on sixteen from a seventeenth, and a job that scales
badly gains less than one that scales well. Measured in replays, filling the job that adds the
most samples per second (absolute gain) lets long, well-scaling jobs take the idle GPUs from
short ones and raises the average completion time (`docs/simulator.md`, "Elastic jobs").
"""

from __future__ import annotations

import math


def speedup(replicas: int, serial_fraction: float | None) -> float:
    """The work per second of ``replicas`` replicas, in replicas' worth."""
    if replicas <= 0:
        return 0.0
    serial = serial_fraction or 0.0
    return 1.0 / (serial + (1.0 - serial) / replicas)


def relative_gain(replicas: int, serial_fraction: float | None) -> float:
    """How much faster one more replica makes a job that has ``replicas``: a share of its rate
    (without any, infinitely)."""
    if replicas <= 0:
        return math.inf
    return speedup(replicas + 1, serial_fraction) / speedup(replicas, serial_fraction) - 1.0

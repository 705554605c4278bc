"""Synthetic workloads for what no public trace records: elastic jobs and how they scale.

``pollux_like`` follows the shape of the workload Pollux was evaluated on (OSDI'21: 160 jobs
submitted over 8 hours to 64 GPUs, mostly small recommendation and image jobs, a tenth speech,
a few detection and ImageNet jobs). Pollux's own workload names applications whose run times
come from its testbed, which no file here holds, so the sizes, run times and scaling below are
this module's, drawn from these documented distributions:

| kind | share | GPUs asked | GPU-hours at that size | serial fraction |
| --- | ---: | --- | --- | ---: |
| recommendation | 45% | 1 | 0.1–0.5 | 0.30 |
| image (small) | 40% | 6, 8, 12 or 16 | 0.5–2 | 0.05 |
| speech | 10% | 6 or 8 | 2–10 | 0.15 |
| detection | 2% | 4 | 10–40 | 0.10 |
| image (large) | 3% | 24, 32 or 48 | 60–200 | 0.02 |

GPU-hours are drawn log-uniformly within their range; a job's run time at the size it asks for
is its GPU-hours over its GPUs. Arrivals are a Poisson process over the span. Each GPU is one
replica, so an elastic job (``elastic=True``: from one GPU up to what it asks) grows and shrinks
a GPU at a time, progressing as Amdahl's law with its serial fraction says
(``TraceJob.serial_fraction``).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .traces import TraceJob


@dataclass(frozen=True, slots=True)
class _Kind:
    name: str
    share: float
    gpus: tuple[int, ...]
    gpu_hours: tuple[float, float]
    serial_fraction: float


POLLUX_LIKE_KINDS = (
    _Kind("recommendation", 0.45, (1,), (0.1, 0.5), 0.30),
    _Kind("image-small", 0.40, (6, 8, 12, 16), (0.5, 2.0), 0.05),
    _Kind("speech", 0.10, (6, 8), (2.0, 10.0), 0.15),
    _Kind("detection", 0.02, (4,), (10.0, 40.0), 0.10),
    _Kind("image-large", 0.03, (24, 32, 48), (60.0, 200.0), 0.02),
)


def pollux_like(*, seed: int = 1, jobs: int = 160, hours: float = 8.0, elastic: bool = True) -> list[TraceJob]:
    """``jobs`` jobs over ``hours`` (see the module's text), sorted by submission; the same seed
    gives the same jobs, elastic or not."""
    rng = random.Random(seed)
    kinds = POLLUX_LIKE_KINDS
    weights = [kind.share for kind in kinds]
    arrivals = sorted(rng.uniform(0, hours * 3600) for _ in range(jobs))
    made = []
    for number, at in enumerate(arrivals, start=1):
        kind = rng.choices(kinds, weights)[0]
        gpus = rng.choice(kind.gpus)
        low, high = kind.gpu_hours
        gpu_hours = math.exp(rng.uniform(math.log(low), math.log(high)))
        made.append(TraceJob(number, at, gpu_hours * 3600 / gpus, gpus, kind.name,
                             min_replicas=1 if elastic and gpus > 1 else None,
                             serial_fraction=kind.serial_fraction if elastic else 0.0))
    return made

"""Loaders for public GPU-cluster job traces, each turned into a list of ``TraceJob``.

Every loader returns jobs sorted by ``(submitted_at, job_id)`` with the first
submission at 0, whatever order the file keeps, so the engine can walk arrivals
with a cursor instead of a heap. A malformed row stops the load with a
``TraceError`` naming the file, the 1-based line and the column: a replay that
quietly skipped rows would report numbers for a workload nobody asked for.

Formats (see ``shared/traces/*/README.md`` for the upstream schemas):

* ``philly``: Pollux's flattened Philly 2017 CSV. One row per job, unsorted.
  The tenant is the virtual cluster (``cluster``). Timestamps carry no zone and
  are read as plain wall-clock, so a DST change shifts arrivals by an hour.
* ``itp``: Microsoft ITP 2021 raw cluster files. No tenant column exists, so
  tenants are synthetic (see ``tenants``).
* ``openb``: Alibaba's 2023 pod list. Its only end time is ``deletion_time``:
  for pods still ``Running`` at the trace's end that is not a completion, but it is
  the only end the trace gives, so duration = deletion - creation for every pod.
  A fractional GPU (``gpu_milli < 1000``) counts as a whole one because mlyard does
  not share GPUs. QoS is the tenant and sets the priority (LS/Guaranteed over
  Burstable over BE).
"""

from __future__ import annotations

import csv
import math
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

FORMATS = ("philly", "itp", "openb")
NATURAL_TENANTS = {"philly": "vc", "itp": "4", "openb": "qos"}
"""What ``--tenants`` means when not given: the trace's own tenant column, or 4
synthetic tenants for ITP, which has none."""

OPENB_PRIORITY = {"LS": 2, "Guaranteed": 2, "Burstable": 1, "BE": 0}
_MIB = 1 << 20
_EPOCH = datetime(1970, 1, 1)


class TraceError(ValueError):
    """A trace file that cannot be read as the format it was said to be in."""


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace, in seconds from the trace's first submission.

    ``cpu`` and ``memory_bytes`` are 0 when the trace records GPUs only (the GPU
    is then the only resource that binds, as on the original clusters).
    """

    job_id: int
    submitted_at: float
    duration: float
    gpus: int
    tenant: str
    cpu: float = 0.0
    memory_bytes: int = 0
    gpu_models: tuple[str, ...] = ()
    priority: int = 0
    min_replicas: int | None = None
    """Elastic jobs only: the replicas it can start with. No public trace records
    elasticity, so the loaders never set it; synthetic workloads may."""
    serial_fraction: float = 0.0
    """Elastic jobs only: Amdahl's serial fraction of its steps (``scheduler.scaling``): holding
    k of its n replicas it progresses at speedup(k) / speedup(n) of its full rate. 0: linearly."""


@dataclass(frozen=True, slots=True)
class TraceNode:
    """One machine of a trace's own cluster description (openb node list)."""

    name: str
    cpu: float
    memory_bytes: int
    gpus: int
    gpu_model: str


class _Rows:
    """CSV rows as dicts of the required columns, with the position for error messages."""

    def __init__(self, path: Path, required: tuple[str, ...]) -> None:
        self.path = path
        self.required = required
        self.line = 0

    def fail(self, message: str) -> TraceError:
        return TraceError(f"{self.path.name} line {self.line}: {message}")

    def __iter__(self) -> Iterator[dict[str, str]]:
        try:
            handle = self.path.open(newline="", encoding="utf-8")
        except OSError as error:
            raise TraceError(f"cannot read trace {self.path}: {error.strerror}") from None
        with handle:
            reader = csv.reader(handle)
            try:
                header = next(reader, None)
                self.line = reader.line_num or 1
                if header is None:
                    raise self.fail("the file is empty; expected a header row")
                header = [column.strip() for column in header]
                missing = [column for column in self.required if column not in header]
                if missing:
                    raise self.fail(f"header lacks column {missing[0]!r} (expected {', '.join(self.required)})")
                index = [(column, header.index(column)) for column in self.required]
                for row in reader:
                    self.line = reader.line_num
                    if not row or (len(row) == 1 and not row[0].strip()):
                        continue  # blank lines (philly.csv ends with one) hold no job
                    if len(row) < len(header):
                        absent = next(column for column, at in index if at >= len(row))
                        raise self.fail(f"missing column {absent!r} (row has {len(row)} of {len(header)} fields)")
                    yield {column: row[at].strip() for column, at in index}
            except UnicodeDecodeError:
                raise self.fail("is not UTF-8 text") from None
            except csv.Error as error:
                raise self.fail(f"is not valid CSV: {error}") from None

    def number(self, row: dict[str, str], column: str) -> float:
        text = row[column]
        try:
            value = float(text)
        except ValueError:
            raise self.fail(f"{column} {text!r} is not a number") from None
        if not math.isfinite(value):
            raise self.fail(f"{column} {text!r} is not a finite number")
        if value < 0:
            raise self.fail(f"{column} {text} is negative")
        return value

    def count(self, row: dict[str, str], column: str) -> int:
        value = self.number(row, column)
        if value != int(value):
            raise self.fail(f"{column} {row[column]!r} is not a whole number")
        return int(value)

    def timestamp(self, row: dict[str, str], column: str) -> float:
        text = row[column]
        try:
            if len(text) != 19 or text[10] != " ":
                raise ValueError
            return (datetime.fromisoformat(text) - _EPOCH).total_seconds()
        except ValueError:
            raise self.fail(f"{column} {text!r} is not a YYYY-MM-DD HH:MM:SS time") from None


def tenant_namer(tenants: str, fmt: str) -> Callable[[str, str], str]:
    """Return ``name(key, natural)`` → tenant: the trace's own tenant, a synthetic one, or one for all.

    Synthetic tenants hash the job's own id (CRC-32) so the assignment is the same on
    every run and every machine, and independent of row order.
    """
    if tenants in ("vc", "qos"):
        if NATURAL_TENANTS.get(fmt) != tenants:
            raise TraceError(f"--tenants {tenants} needs a trace with that column; "
                             f"{fmt} traces take {NATURAL_TENANTS[fmt]!r}, a number or 'none'")
        return lambda key, natural: natural
    if tenants == "none":
        return lambda key, natural: "default"
    if tenants.isdigit() and int(tenants) > 0:
        count = int(tenants)
        width = len(str(count - 1))
        return lambda key, natural: f"tenant-{zlib.crc32(key.encode()) % count:0{width}d}"
    raise TraceError(f"--tenants must be vc, qos, a positive number or none, not {tenants!r}")


def load_trace(path: Path | str, fmt: str, *, tenants: str | None = None, limit: int | None = None) -> list[TraceJob]:
    """Read ``path`` as ``fmt``; return its jobs (the first ``limit`` by submission) in arrival order."""
    path = Path(path)
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise TraceError(f"trace file {path} does not exist" if not path.exists() else f"{path} is not a file")
    name = tenant_namer(tenants or NATURAL_TENANTS[fmt], fmt)
    raw = {"philly": _philly, "itp": _itp, "openb": _openb}[fmt](path, name)
    if not raw:
        raise TraceError(f"{path.name} holds no jobs")
    raw.sort(key=lambda job: (job.submitted_at, job.job_id))
    if limit is not None:
        raw = raw[:limit]
    origin = raw[0].submitted_at
    return [_shift(job, origin) for job in raw] if origin else raw


def _shift(job: TraceJob, origin: float) -> TraceJob:
    return replace(job, submitted_at=job.submitted_at - origin)


def _philly(path: Path, name: Callable[[str, str], str]) -> list[TraceJob]:
    rows = _Rows(path, ("timestamp", "duration", "num_gpus", "cluster"))
    jobs = []
    for number, row in enumerate(rows, start=1):
        cluster = row["cluster"]
        if not cluster:
            raise rows.fail("cluster is empty")
        jobs.append(TraceJob(number, rows.timestamp(row, "timestamp"), rows.number(row, "duration"),
                             rows.count(row, "num_gpus"), name(str(number), cluster)))
    return jobs


def _itp(path: Path, name: Callable[[str, str], str]) -> list[TraceJob]:
    rows = _Rows(path, ("job_id", "submission_time", "duration", "num_gpu"))
    jobs = []
    for number, row in enumerate(rows, start=1):
        jobs.append(TraceJob(number, rows.number(row, "submission_time"), rows.number(row, "duration"),
                             rows.count(row, "num_gpu"), name(row["job_id"], "")))
    return jobs


def _openb(path: Path, name: Callable[[str, str], str]) -> list[TraceJob]:
    rows = _Rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos",
                        "creation_time", "deletion_time"))
    jobs = []
    for number, row in enumerate(rows, start=1):
        qos = row["qos"]
        if qos not in OPENB_PRIORITY:
            raise rows.fail(f"qos {qos!r} is not one of {', '.join(OPENB_PRIORITY)}")
        created = rows.number(row, "creation_time")
        deleted = rows.number(row, "deletion_time")
        if deleted < created:
            raise rows.fail(f"deletion_time {row['deletion_time']} is before creation_time {row['creation_time']}")
        gpus = rows.count(row, "num_gpu")
        milli = rows.number(row, "gpu_milli")
        if gpus == 0 and milli > 0:
            gpus = 1  # a GPU share without a GPU count is still one (unshared) GPU here
        models = tuple(model for model in row["gpu_spec"].split("|") if model) if gpus else ()
        jobs.append(TraceJob(number, created, deleted - created, gpus, name(row["name"], qos),
                             cpu=rows.number(row, "cpu_milli") / 1000,
                             memory_bytes=int(rows.number(row, "memory_mib") * _MIB),
                             gpu_models=models, priority=OPENB_PRIORITY[qos]))
    return jobs


def load_openb_nodes(path: Path | str) -> list[TraceNode]:
    """Read an openb node list (``sn,cpu_milli,memory_mib,gpu,model``) in file order."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"node list {path} does not exist")
    rows = _Rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model"))
    nodes = []
    for row in rows:
        if not row["sn"]:
            raise rows.fail("sn is empty")
        nodes.append(TraceNode(row["sn"], rows.number(row, "cpu_milli") / 1000,
                               int(rows.number(row, "memory_mib") * _MIB), rows.count(row, "gpu"), row["model"]))
    if not nodes:
        raise TraceError(f"{path.name} lists no nodes")
    return nodes

"""Nodes as their backend reported them, with what active replicas hold on each."""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import select

from mlyard.api.nodes import GpuInfo, NodeInfo
from mlyard.backends.base import NodeDescription
from mlyard.server import auth
from mlyard.server.store.db import Database
from mlyard.server.store.rows import AttemptRow, NodeRow, ReplicaRow
from mlyard.server.services.resources import inventory_of, latest_usage


def record_nodes(database: Database, backend_name: str, nodes: Sequence[NodeDescription]) -> None:
    """Replaces this backend's node rows with what it reports now."""
    now = time.time()
    with database.transaction() as session:
        known = {row.name: row for row in session.scalars(select(NodeRow).where(NodeRow.backend == backend_name))}
        for node in nodes:
            row = known.pop(node.name, None) or NodeRow(name=node.name, backend=backend_name)
            row.address = node.address
            row.cpu_ids = list(node.cpu_ids)
            row.memory_bytes = node.memory_bytes
            row.gpus = [{"index": gpu.index, "model": gpu.model, "memory_bytes": gpu.memory_bytes} for gpu in node.gpus]
            row.labels = dict(node.labels)
            row.notes = list(node.notes)
            row.updated_at = now
            session.add(row)
        for gone in known.values():
            session.delete(gone)


def list_nodes(database: Database, principal: auth.Principal) -> list[NodeInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        holding = session.scalars(
            select(ReplicaRow).join(AttemptRow).where(AttemptRow.finished_at.is_(None))
        ).all()
        result = []
        for row in session.scalars(select(NodeRow).order_by(NodeRow.name)):
            mine = [replica for replica in holding if replica.node == row.name]
            result.append(
                NodeInfo(
                    name=row.name,
                    backend=row.backend,
                    address=row.address,
                    cpu_ids=list(row.cpu_ids),
                    memory_bytes=row.memory_bytes,
                    gpus=[GpuInfo(**gpu) for gpu in row.gpus],
                    labels=dict(row.labels),
                    notes=list(row.notes),
                    allocated_cpus=_cores_taken(mine),
                    allocated_memory_bytes=sum(replica.memory_bytes for replica in mine),
                    allocated_gpus=sum(len(replica.gpu_ids) for replica in mine),
                    updated_at=row.updated_at,
                    usage=latest_usage(session, row.name),
                    inventory=inventory_of(row),
                )
            )
        return result


def _cores_taken(replicas: list[ReplicaRow]) -> int:
    """Cores no whole-core request can have: replicas' own ones, and each core they share."""
    own = sum(len(replica.cpu_ids) for replica in replicas if not replica.cpu_millicores)
    return own + len({core for replica in replicas if replica.cpu_millicores for core in replica.cpu_ids})

from __future__ import annotations

from fastapi import APIRouter

from mlyard.api.errors import ErrorBody
from mlyard.api.nodes import NodeInfo
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import nodes

router = APIRouter(prefix="/nodes", tags=["nodes"])


@router.get("", response_model=list[NodeInfo], responses={401: {"model": ErrorBody}})
def list_nodes(database: DatabaseDependency, caller: PrincipalDependency) -> list[NodeInfo]:
    """Nodes with their capacity, what active replicas hold, and what they cannot enforce."""
    return nodes.list_nodes(database, caller)

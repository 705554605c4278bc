from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status

from mlyard.api.errors import ErrorBody
from mlyard.api.queues import QueueInfo, QueueSettings
from mlyard.server.routers.dependencies import (
    DatabaseDependency,
    PrincipalDependency,
    WakeDependency,
)
from mlyard.server.services import queues
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/queues", tags=["queues"])
QueueName = Annotated[str, Path(pattern=NAME_PATTERN, description="the queue's name")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 422: {"model": ErrorBody}}


@router.get("", response_model=list[QueueInfo], responses=ERRORS)
def list_queues(database: DatabaseDependency, caller: PrincipalDependency) -> list[QueueInfo]:
    """Every queue with its quota, borrowing limit, what its jobs hold, and why its queued jobs wait."""
    return queues.list_queues(database, caller)


@router.get("/{name}", response_model=QueueInfo, responses=ERRORS)
def get_queue(name: QueueName, database: DatabaseDependency, caller: PrincipalDependency) -> QueueInfo:
    return queues.get_queue(database, caller, name)


@router.put("/{name}", response_model=QueueInfo, responses=ERRORS)
def set_queue(name: QueueName, settings: QueueSettings, database: DatabaseDependency, caller: PrincipalDependency,
              wake: WakeDependency) -> QueueInfo:
    """Creates the queue or changes the fields given (administrators only); fields left out
    keep their value, an explicit null clears one (no quota, or no borrowing limit)."""
    return queues.set_queue(database, caller, name, settings, wake=wake)


@router.delete("/{name}", status_code=status.HTTP_204_NO_CONTENT, responses={**ERRORS, 409: {"model": ErrorBody}})
def delete_queue(name: QueueName, database: DatabaseDependency, caller: PrincipalDependency,
                 wake: WakeDependency) -> None:
    """Deletes a queue without unfinished jobs (administrators only); `default` always stays."""
    queues.delete_queue(database, caller, name, wake=wake)

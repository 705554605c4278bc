from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from mlyard.api.errors import ErrorBody
from mlyard.api.audit import DEFAULT_PAGE, MAX_PAGE, AuditPage
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services import audit

router = APIRouter(tags=["audit"])
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 422: {"model": ErrorBody}}
# Bounded so an absurd moment or id is a 422 rather than an overflow in the database.
Moment = Annotated[float | None, Query(ge=0, le=253402300799, description="UTC seconds since the epoch")]


@router.get("/audit", response_model=AuditPage, responses=ERRORS)
def list_audit_events(
    database: DatabaseDependency,
    caller: PrincipalDependency,
    since: Moment = None,
    until: Moment = None,
    actor: Annotated[str | None, Query(max_length=160, description="only this user's (or job's) requests")] = None,
    route: Annotated[str | None, Query(max_length=255, description="only routes or paths containing this")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="at most this many events")] = DEFAULT_PAGE,
    before_id: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="only events older than this one "
                                           "(the previous page's next_before_id)")] = None,
) -> AuditPage:
    """Requests that changed something or tried to (POST, PUT, PATCH, DELETE to the API and the
    web pages): who, what, when, from where, and the answer's status. Administrators only;
    newest first."""
    return audit.list_events(database, caller, since=since, until=until, actor=actor, route=route, limit=limit,
                             before_id=before_id)

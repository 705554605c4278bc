"""What routers take from the application: the database, the controller, the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mlyard.server import auth
from mlyard.server.store.db import Database

bearer = HTTPBearer(auto_error=False, description="an mlyard API token")
API_PREFIX = "/api/v1"
"""Where `app.py` mounts the routers; a route's template may or may not carry it."""


# The dependencies that only look something up are `async`: FastAPI runs a plain `def` one on a
# worker thread, and that hop costs a request more than the lookup.
async def database(request: Request) -> Database:
    return request.app.state.database


async def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> auth.Principal:
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else request.headers.get("authorization")
    state = request.app.state
    # A caller seen a moment ago is known without the database, and without a worker thread.
    principal = auth.remembered(state.principals, header) or await run_in_threadpool(
        auth.authenticate, state.database, header, principals=state.principals)
    request.state.principal = principal  # the audit log's actor (server/audit.py)
    route = getattr(request.scope.get("route"), "path", "").removeprefix(API_PREFIX)
    auth.admit_route(principal, request.method, route, request.path_params.get("job_id"))
    return principal


async def wake_controller(request: Request):
    return request.app.state.controller.wake


async def image_check(request: Request):
    return request.app.state.backend.check_image


async def secret_box(request: Request):
    """What seals a submission's `env_secrets` (`job_secrets.box_at`, opened at the start)."""
    return request.app.state.secrets


DatabaseDependency = Annotated[Database, Depends(database)]
PrincipalDependency = Annotated[auth.Principal, Depends(principal)]
WakeDependency = Annotated[object, Depends(wake_controller)]
ImageCheckDependency = Annotated[object, Depends(image_check)]
SecretsDependency = Annotated[object, Depends(secret_box)]

"""What routers take from the application: the database, the controller, the caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from mlyard.server import auth
from mlyard.server.store.db import Database

bearer = HTTPBearer(auto_error=False, description="an mlyard API token")


def database(request: Request) -> Database:
    return request.app.state.database


def principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> auth.Principal:
    header = f"{credentials.scheme} {credentials.credentials}" if credentials else request.headers.get("authorization")
    principal = auth.authenticate(request.app.state.database, header)
    request.state.principal = principal  # the audit log's actor (server/audit.py)
    return principal


def wake_controller(request: Request):
    return request.app.state.controller.wake


def image_check(request: Request):
    return request.app.state.backend.check_image


DatabaseDependency = Annotated[Database, Depends(database)]
PrincipalDependency = Annotated[auth.Principal, Depends(principal)]
WakeDependency = Annotated[object, Depends(wake_controller)]
ImageCheckDependency = Annotated[object, Depends(image_check)]

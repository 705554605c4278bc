"""The FastAPI application. Errors become HTTP answers here, and only here."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from mlyard import __version__, web
from mlyard.api.errors import ErrorBody, FieldError, field_errors, summarize
from mlyard.api.health import Health
from mlyard.backends.base import Backend
from mlyard.errors import MlyardError, TooManyRequests
from mlyard.server import heap, job_secrets
from mlyard.server.auth_cache import Principals
from mlyard.server.http import body_limit, failures, telemetry
from mlyard.server.http.allowed_hosts import AllowedHosts, default_hosts, parse_hosts
from mlyard.server.http.security_headers import SecurityHeaders
from mlyard.server.http.shutdown import ShutdownGuard, Stopping
from mlyard.server.http.audit import AuditRecorder
from mlyard.server.control.controller import Controller
from mlyard.server.control.supervisor import Supervisor
from mlyard.server.control.leadership import Leadership, lease_for
from mlyard.server.control.process import ControllerProcess
from mlyard.server.http.login_throttle import LoginThrottle
from mlyard.server.routers import (
    accounts,
    audit,
    blobs,
    dataset_checks,
    datasets,
    environments,
    jobs,
    labeling,
    metrics,
    models,
    resources,
    nodes,
    projects,
    queues,
    snapshots,
    usage,
    volumes,
)
from mlyard.server.opening import open_server
from mlyard.server.settings import ServerSettings

API_PREFIX = "/api/v1"
log = logging.getLogger("mlyard.server")


async def _validation_error(_request: Request, error: RequestValidationError) -> JSONResponse:
    details = field_errors(error.errors())
    body = ErrorBody(error="invalid_request", message=f"invalid request: {summarize(details)}", details=details)
    return JSONResponse(status_code=422, content=body.model_dump())


async def _http_error(request: Request, error: StarletteHTTPException) -> Response:
    # FastAPI answers 400 when a body cannot be decoded at all (not UTF-8, say); the API says so
    # as it says every other unreadable input: 422 with the field.
    if error.status_code == 400 and request.url.path.startswith(API_PREFIX):
        detail = FieldError(field="body", message="cannot be read as JSON (is it UTF-8?)")
        body = ErrorBody(error="invalid_request", message="invalid request: body: cannot be read as JSON (is it UTF-8?)",
                         details=[detail])
        return JSONResponse(status_code=422, content=body.model_dump())
    return await http_exception_handler(request, error)


async def _mlyard_error(_request: Request, error: MlyardError) -> JSONResponse:
    details = [FieldError(field=error.field, message=error.message)] if error.field else []
    body = ErrorBody(error=error.code, message=error.message, details=details)
    headers = {"WWW-Authenticate": "Bearer"} if error.http_status == 401 else None
    if isinstance(error, TooManyRequests):
        headers = {"Retry-After": str(error.retry_after)}
    return JSONResponse(status_code=error.http_status, content=body.model_dump(), headers=headers)


async def _infrastructure_error(request: Request, error: Exception) -> JSONResponse:
    translated = failures.as_user_error(error)
    if translated is None:
        raise error
    log.warning("%s %s: %s", request.method, request.url.path, translated.message)
    return await _mlyard_error(request, translated)


def _leadership(settings: ServerSettings, database, blobs, backend: Backend, observe_cycle) -> Leadership:
    """The controller in a thread of this process, while it leads. A controller stops for good,
    so each time this server becomes the leader gets a new one (with the workers that follow
    leadership: `control/supervisor.py`)."""
    return Leadership(lease_for(database.url), lambda: Supervisor(Controller(
        database=database, backend=backend, settings=settings, blobs=blobs, observe_cycle=observe_cycle),
        backend=backend, settings=settings))


def create_app(settings: ServerSettings, *, backend: Backend | None = None, settle_heap: bool = False,
               controller_process: bool = False) -> FastAPI:
    """The server's application; the lifespan migrates the database and runs the controller
    while this server leads the servers sharing its database (`leadership.py`): in a thread of
    this process, or with `controller_process` in a child process (`control/process.py`), as
    the server process wants. `settle_heap`: what lives once it has started is frozen out of
    garbage collections (`heap.py`), as the server process wants and a test process with many
    apps does not."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        database, blobs, chosen = open_server(settings, backend)
        observe_cycle = app.state.telemetry.observe_scheduler_cycle
        leadership = (ControllerProcess(settings.host, settings.port, observe_cycle) if controller_process
                      else _leadership(settings, database, blobs, chosen, observe_cycle))
        # Routers only wake the controller: leadership forwards that while leading.
        app.state.database, app.state.blobs, app.state.controller = database, blobs, leadership
        app.state.settings, app.state.leadership = settings, leadership
        app.state.backend = chosen  # submissions ask it about images (`Backend.check_image`)
        app.state.secrets = job_secrets.box_at(settings.secret_key_path)  # created at the first start
        leadership.start()
        log.info("mlyard %s serving %s with the %s backend (controller: %s)", __version__, settings.url,
                 chosen.name, leadership.role)
        if settle_heap:
            heap.settle("the server once started")
        try:
            yield
        finally:
            stopping.begin()
            await stopping.drained(timeout=2.0)  # the 503s of requests cut off by the stop go out first
            leadership.stop()
            if chosen is not backend:
                chosen.close()
            database.close()

    app = FastAPI(
        title="mlyard",
        version=__version__,
        description="Queue, gang-schedule and run deep-learning training jobs.",
        lifespan=lifespan,
        openapi_url=f"{API_PREFIX}/openapi.json",
        docs_url=None,  # served from vendored files by web/api_docs.py
        redoc_url=None,
        # FastAPI's own OpenTelemetry asks the global providers on every request whether anyone
        # listens; mlyard's metrics are Prometheus' (`http/telemetry.py`).
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
    )
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(MlyardError, _mlyard_error)
    app.add_exception_handler(OperationalError, _infrastructure_error)
    app.add_exception_handler(OSError, _infrastructure_error)
    body_limit.install(app, settings.max_request_bytes,
                       exempt=[("PUT", f"{API_PREFIX}/snapshots/"), ("PUT", f"{API_PREFIX}/blobs/")])
    telemetry.install(app)  # after: its timer wraps the limit and so sees its 413s
    app.add_middleware(web.CrossSiteRefusal)  # inside the audit log, which records its refusals
    app.add_middleware(AuditRecorder)
    app.state.login_throttle = LoginThrottle()
    app.state.principals = Principals()

    @app.get(f"{API_PREFIX}/health", response_model=Health, tags=["health"])
    def health(request: Request) -> Health:
        """Answers without a token: for probes and for `mlyard server start` to wait on."""
        leadership = request.app.state.leadership
        return Health(status="ok", version=__version__, controller=leadership.role,
                      adopted=getattr(leadership.controller, "adopted", None))

    for router in (jobs.router, metrics.router, resources.router, nodes.router, queues.router, snapshots.router,
                   usage.router, accounts.router, audit.router, projects.router, environments.router,
                   datasets.router, dataset_checks.router, blobs.router, volumes.router, labeling.router,
                   models.router):
        app.include_router(router, prefix=API_PREFIX)
    web.install(app)
    stopping = Stopping()
    app.add_middleware(ShutdownGuard, stopping=stopping)
    app.add_middleware(SecurityHeaders)
    # Outermost: a request for another host name reaches nothing, not even the health check.
    app.add_middleware(AllowedHosts, hosts=parse_hosts(settings.allowed_hosts) if settings.allowed_hosts
                       else default_hosts(settings.host, settings.job_api_url))
    return app

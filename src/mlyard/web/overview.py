"""The overview: the cluster's utilization over a chosen window, jobs per status, the queues'
usage against their quotas, and the latest status changes. Each part refreshes itself: the
charts fetch their JSON, the rest are fragments htmx polls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from mlyard.api.errors import ErrorBody
from mlyard.errors import Forbidden, MlyardError
from mlyard.server import auth
from mlyard.server.services import queues
from mlyard.server.services import overview
from mlyard.web.charts import chart_response
from mlyard.web.templating import page
from mlyard.web.session import PagePrincipal

router = APIRouter(include_in_schema=False)

WindowKey = Annotated[str, Query(alias="window")]


def _error(request: Request, error: MlyardError, principal: auth.Principal | None = None) -> Response:
    """The error page; with the caller's principal for whole pages, so their navigation stays."""
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                nav="overview")


def _json_error(error: MlyardError) -> JSONResponse:
    body = ErrorBody(error=error.code, message=error.message)
    return JSONResponse(body.model_dump(), status_code=error.http_status, headers={"Cache-Control": "no-store"})


def _queues(request: Request, principal: auth.Principal, cluster: overview.Capacity) -> list[tuple] | None:
    """None for a caller who may not see the queues (a job's token): the rest of the page still serves it."""
    try:
        listing = queues.list_queues(request.app.state.database, principal)
    except Forbidden:
        return None
    return [(queue, overview.queue_bars(queue, cluster)) for queue in listing]


@router.get("/overview")
def overview_page(request: Request, principal: PagePrincipal, window: WindowKey = overview.DEFAULT_WINDOW
                  ) -> Response:
    database = request.app.state.database
    try:
        selected = overview.parse_window(window)
        cluster = overview.capacity(database)
        context = {
            "counts": overview.job_counts(database, principal),
            "events": overview.recent_events(database, principal),
            "queues": _queues(request, principal, cluster),
        }
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "overview.html", nav="overview", principal=principal, window=selected,
                windows=list(overview.WINDOWS.values()), cluster=cluster, **context)


@router.get("/overview/jobs")
def overview_jobs(request: Request, principal: PagePrincipal) -> Response:
    try:
        counts = overview.job_counts(request.app.state.database, principal)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "overview_jobs.html", counts=counts)


@router.get("/overview/queues")
def overview_queues(request: Request, principal: PagePrincipal) -> Response:
    try:
        listing = _queues(request, principal, overview.capacity(request.app.state.database))
    except MlyardError as error:
        return _error(request, error)
    return page(request, "overview_queues.html", queues=listing)


@router.get("/overview/events")
def overview_events(request: Request, principal: PagePrincipal) -> Response:
    try:
        events = overview.recent_events(request.app.state.database, principal)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "overview_events.html", events=events)


def _utilization(request: Request, principal: auth.Principal, window: str) -> overview.Utilization:
    selected = overview.parse_window(window)
    result, _ = overview.utilization(request.app.state.database, principal, selected)
    return result


@router.get("/overview/charts/utilization.json")
def utilization_chart(request: Request, principal: PagePrincipal,
                      window: WindowKey = overview.DEFAULT_WINDOW) -> Response:
    """CPU and memory of all nodes together, in percent."""
    try:
        result = _utilization(request, principal, window)
    except MlyardError as error:
        return _json_error(error)
    return chart_response(result.times, {"CPU": result.cpu, "Memory": result.memory})


@router.get("/overview/charts/gpu.json")
def gpu_chart(request: Request, principal: PagePrincipal, window: WindowKey = overview.DEFAULT_WINDOW) -> Response:
    """All GPUs together: busy time and memory in use, in percent."""
    try:
        result = _utilization(request, principal, window)
    except MlyardError as error:
        return _json_error(error)
    return chart_response(result.times, {"GPU utilization": result.gpu, "GPU memory": result.gpu_memory})

"""The queues: each queue's project, weight, quota and borrowing limit per resource, what its
running jobs hold against them, and the jobs it keeps waiting with the scheduler's reasons.

Read-only: administrators change queues with `mlyard queues set` (the API's `PUT /queues/{name}`),
which the page says rather than offering a form only some of its readers could use."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from mlyard.api.queues import QueueInfo
from mlyard.errors import MlyardError
from mlyard.server import auth
from mlyard.server.services import queues
from mlyard.server.services import overview
from mlyard.web.templating import page
from mlyard.web.session import PagePrincipal

router = APIRouter(include_in_schema=False)

def _error(request: Request, error: MlyardError, principal: auth.Principal | None = None) -> Response:
    """The error page; with the caller's principal for whole pages, so their navigation stays."""
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                nav="queues")


def _with_bars(request: Request, listing: list[QueueInfo]) -> list[tuple[QueueInfo, list[overview.Bar]]]:
    cluster = overview.capacity(request.app.state.database)
    return [(queue, overview.queue_bars(queue, cluster)) for queue in listing]


def _all(request: Request, principal: auth.Principal) -> list[tuple[QueueInfo, list[overview.Bar]]]:
    return _with_bars(request, queues.list_queues(request.app.state.database, principal))


def _one(request: Request, principal: auth.Principal, name: str) -> tuple[QueueInfo, list[overview.Bar]]:
    return _with_bars(request, [queues.get_queue(request.app.state.database, principal, name)])[0]


@router.get("/queues")
def queues_page(request: Request, principal: PagePrincipal) -> Response:
    try:
        listing = _all(request, principal)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "queues.html", nav="queues", principal=principal, queues=listing)


# An underscore cannot start a queue's name, so this path never hides a queue's page.
@router.get("/queues/_list")
def queues_list(request: Request, principal: PagePrincipal) -> Response:
    """Every queue's card, which the queues page polls."""
    try:
        listing = _all(request, principal)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "queues_list.html", queues=listing)


@router.get("/queues/{name}")
def queue_page(request: Request, principal: PagePrincipal, name: str) -> Response:
    try:
        queue, bars = _one(request, principal, name)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "queues_one.html", nav="queues", principal=principal, queue=queue, bars=bars,
                single=True)


@router.get("/queues/{name}/live")
def queue_live(request: Request, principal: PagePrincipal, name: str) -> Response:
    """One queue's card, which its page polls."""
    try:
        queue, bars = _one(request, principal, name)
    except MlyardError as error:
        return _error(request, error)
    return page(request, "queues_card.html", queue=queue, bars=bars, single=True)

"""The web UI: server-rendered pages (Jinja2 templates, htmx for the live parts) at `/`.

Pages call the same services as the API with the principal of the session kept in the login
cookie, so they can show and do exactly what its user may through the API.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response

from mlyard.web import (
    api_docs,
    data,
    data_checks,
    data_files,
    job_charts,
    labeling,
    labeling_work,
    logstream,
    nodes,
    overview,
    pages,
    queues,
    session,
    submit,
    volumes,
)
from mlyard.web.cross_site import CrossSiteRefusal
from mlyard.web.templating import STATIC_DIRECTORY, page

__all__ = ["CrossSiteRefusal", "install"]


async def _refused(request: Request, refusal: session.PageRefused) -> Response:
    return page(request, "error.html", status_code=refusal.error.http_status, error=refusal.error)


def install(app: FastAPI) -> None:
    app.add_exception_handler(session.PageRefused, _refused)
    app.include_router(session.router)
    for module in (pages, logstream, job_charts, overview, submit, nodes, queues, data, data_files, data_checks,
                   labeling, labeling_work, volumes, api_docs):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIRECTORY), name="static")

"""The web UI: server-rendered pages (Jinja2 templates, htmx for the live parts) at `/`.

Pages call the same services as the API with the principal of the token kept in the login
cookie, so they can show and do exactly what that token may through the API.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from mlyard.web import logstream, pages, session
from mlyard.web.render import STATIC_DIRECTORY


def install(app: FastAPI) -> None:
    app.include_router(session.router)
    app.include_router(pages.router)
    app.include_router(logstream.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIRECTORY), name="static")

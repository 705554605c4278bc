"""`/api/v1/docs`: Swagger UI for the API's OpenAPI document, from the vendored
`swagger-ui-dist` files (web/static/vendor/), so it works offline and under the server's
Content-Security-Policy; `static/api_docs.js` starts it, as no script may be inline."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from mlyard.web.templating import page

DOCS_PATH = "/api/v1/docs"
OPENAPI_PATH = "/api/v1/openapi.json"

router = APIRouter(include_in_schema=False)


@router.get(DOCS_PATH)
def api_docs(request: Request) -> Response:
    return page(request, "api_docs.html", openapi_url=OPENAPI_PATH)

"""What the API returns about the audit log: requests that changed something, or tried to."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

MAX_PAGE = 1000
DEFAULT_PAGE = 100


class AuditEvent(BaseModel):
    id: int
    at: float = Field(description="when the answer was produced, UTC seconds since the epoch")
    actor: str = Field(description="the user or job token that made the request; 'anonymous' without valid "
                                   "credentials")
    method: str
    route: str = Field(description="the route's template, e.g. /api/v1/jobs/{job_id}/cancel; the path itself "
                                   "when no route matched")
    target: str | None = Field(default=None, description="the path as requested, with its ids")
    status: int = Field(description="the HTTP status of the answer")
    address: str | None = Field(default=None, description="the client's address")
    details: dict[str, Any] | None = None


class AuditPage(BaseModel):
    """Newest first. `next_before_id` asks for the page after this one (null: this was the last)."""

    events: list[AuditEvent]
    next_before_id: int | None = None

"""The Volumes page (`/volumes`): the volumes of the caller's projects, each with its quota,
what it held when last measured as a bar against that quota, how the storage holds it to the
quota, who made it and the unfinished jobs that mount it.

Read-only, like the queues page: volumes are made and removed with `mlyard volumes`, and what
the page lists is `services.volumes.list_volumes` for the session's principal, so it shows
exactly the volumes the API would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from mlyard.api.volumes import VolumeInfo
from mlyard.errors import MlyardError
from mlyard.server import auth
from mlyard.server.services import volumes
from mlyard.spec import format_bytes
from mlyard.web.session import PagePrincipal
from mlyard.web.templating import page

router = APIRouter(include_in_schema=False)

NEAR_QUOTA = 0.9
"""From this share of its quota a volume's bar warns: the next measurement may find it over."""
MEASURED_BY_MLYARD = "measured by mlyard"


@dataclass(frozen=True)
class Usage:
    """A volume's bar: `state` is over, near, within or unmeasured (its CSS class)."""

    state: str
    width_percent: float
    """The fill, capped at the bar's end; the summary keeps the true share."""
    summary: str


def usage(volume: VolumeInfo) -> Usage:
    quota = format_bytes(volume.size_bytes)
    if volume.used_bytes is None:
        return Usage(state="unmeasured", width_percent=0.0, summary=f"not measured yet, of {quota}")
    share = volume.used_bytes / max(volume.size_bytes, 1)
    summary = f"{format_bytes(volume.used_bytes)} of {quota} ({share:.0%})"
    # The service's flag, not the share, decides "over": it is what refuses new mounts.
    if volume.over_quota:
        return Usage(state="over", width_percent=100.0, summary=summary)
    state = "near" if share >= NEAR_QUOTA else "within"
    return Usage(state=state, width_percent=round(min(100.0, 100 * share), 1), summary=summary)


def _error(request: Request, error: MlyardError, principal: auth.Principal) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                nav="volumes")


@router.get("/volumes")
def volumes_page(request: Request, principal: PagePrincipal,
                 project: Annotated[str, Query(max_length=63)] = "") -> Response:
    """Every volume the caller sees, or one project's (`?project=`)."""
    project = project.strip()
    try:
        listing = volumes.list_volumes(request.app.state.database, principal)
    except MlyardError as error:
        return _error(request, error, principal)
    # Filtered here rather than by the service, so the project choice lists every project that has volumes.
    projects = sorted({volume.project for volume in listing} | ({project} if project else set()))
    shown = [(volume, usage(volume)) for volume in listing if not project or volume.project == project]
    return page(request, "volumes.html", nav="volumes", principal=principal, volumes=shown, project=project,
                projects=projects, size=format_bytes, measured_by_mlyard=MEASURED_BY_MLYARD)

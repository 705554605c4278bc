"""Templates and the filters they use to show times, durations and statuses."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from mlyard import __version__
from mlyard.spec import JobStatus

PACKAGE_DIRECTORY = Path(__file__).resolve().parent
STATIC_DIRECTORY = PACKAGE_DIRECTORY / "static"


def _vendor_versions() -> dict[str, str]:
    """For cache-busting asset URLs; a broken checkout must not keep the API from starting."""
    try:
        return json.loads((STATIC_DIRECTORY / "vendor" / "versions.json").read_text())
    except (OSError, ValueError):
        return {}


VENDOR_VERSIONS = _vendor_versions()

# Colour families for statuses; the stylesheet defines one class per family.
STATUS_TONES = {
    JobStatus.QUEUED: "waiting",
    JobStatus.SCHEDULED: "starting",
    JobStatus.STARTING: "starting",
    JobStatus.RUNNING: "running",
    JobStatus.RESTARTING: "warning",
    JobStatus.PREEMPTED: "warning",
    JobStatus.SUCCEEDED: "success",
    JobStatus.FAILED: "failure",
    JobStatus.CANCELLED: "ended",
}


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def relative(at: float | None, now: float | None = None) -> str:
    """'3m ago'; the page's script keeps it current between refreshes."""
    if at is None:
        return "–"
    delta = (time.time() if now is None else now) - at
    if abs(delta) < 5:
        return "just now"
    return f"{duration(abs(delta))} ago" if delta > 0 else f"in {duration(-delta)}"


def iso(at: float | None) -> str:
    return "" if at is None else datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def absolute(at: float | None) -> str:
    return "–" if at is None else datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def tone(status: JobStatus | str) -> str:
    return STATUS_TONES.get(JobStatus(status), "ended")


def memory(size: int | None) -> str:
    if not size:
        return "–"
    for unit, scale in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g}{unit}"
    return f"{size}B"


templates = Jinja2Templates(directory=PACKAGE_DIRECTORY / "templates")
templates.env.filters.update(duration=duration, relative=relative, iso=iso, absolute=absolute, tone=tone,
                             memory=memory)
# new_key: an idempotency key per rendered form, so submitting it twice creates one job.
templates.env.globals.update(version=__version__, vendor=VENDOR_VERSIONS, new_key=lambda: uuid.uuid4().hex)


def page(request: Request, name: str, status_code: int = 200, **context: object) -> Response:
    return templates.TemplateResponse(request, name, context, status_code=status_code)

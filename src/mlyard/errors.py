"""Typed errors. The server maps them to HTTP answers in one place (`server.app`)."""

from __future__ import annotations


class MlyardError(Exception):
    """An error a user can act on; `str()` is one clear line."""

    http_status = 400
    code = "bad_request"

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class NotFound(MlyardError):
    http_status = 404
    code = "not_found"


class Unauthorized(MlyardError):
    http_status = 401
    code = "unauthorized"


class Forbidden(MlyardError):
    http_status = 403
    code = "forbidden"


class Conflict(MlyardError):
    http_status = 409
    code = "conflict"


class InvalidRequest(MlyardError):
    """Input that is well formed but names something that does not fit (e.g. an unknown queue)."""

    http_status = 422
    code = "invalid_request"


class Unschedulable(MlyardError):
    """The job can never run on this cluster, whatever else is running."""

    http_status = 422
    code = "unschedulable"


class TooManyRequests(MlyardError):
    """Refused for now (failed logins); `retry_after` says in how many seconds to try again."""

    http_status = 429
    code = "too_many_requests"

    def __init__(self, message: str, *, retry_after: int, field: str | None = None):
        super().__init__(message, field=field)
        self.retry_after = retry_after


class InvalidTransition(MlyardError):
    """A status change that the job lifecycle does not allow: a bug, never user input."""

    http_status = 500
    code = "invalid_transition"


class StorageFull(MlyardError):
    """The server's disk (or its database's) has no room left; nothing was half-written."""

    http_status = 507
    code = "storage_full"


class Unavailable(MlyardError):
    """The database cannot be reached or is busy; the request may be retried."""

    http_status = 503
    code = "unavailable"


class PayloadTooLarge(MlyardError):
    http_status = 413
    code = "payload_too_large"

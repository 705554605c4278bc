"""Failures of the machine under the server (a full disk, an unreachable database) as errors a
person can act on. The transaction that hit them was rolled back, so nothing is half-written."""

from __future__ import annotations

import errno

from sqlalchemy.exc import DBAPIError, OperationalError

from mlyard.errors import MlyardError, StorageFull, Unavailable

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# SQLite says "database or disk is full"; PostgreSQL's class 53 is "insufficient resources"
# (53100 disk_full).
_FULL_MESSAGES = ("disk is full", "no space left on device", "could not extend file")
_DISK_FULL_SQLSTATE = "53100"


def _sqlstate(error: DBAPIError) -> str | None:
    return getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)


def is_storage_full(error: BaseException) -> bool:
    if isinstance(error, OSError):
        return error.errno in _FULL_ERRNOS
    if isinstance(error, DBAPIError):
        text = str(error.orig).lower()
        return _sqlstate(error) == _DISK_FULL_SQLSTATE or any(message in text for message in _FULL_MESSAGES)
    return False


def as_user_error(error: BaseException) -> MlyardError | None:
    """The error to answer with, or None when `error` is a bug (a 500)."""
    if is_storage_full(error):
        return StorageFull("the server's disk is full: nothing was stored; free space under MLYARD_HOME "
                           "(or the database's disk) and retry")
    if isinstance(error, OperationalError):
        return Unavailable(f"the database is unavailable ({str(error.orig).splitlines()[0]}); retry shortly")
    return None

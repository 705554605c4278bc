"""How the API answers an error: the body, and each field's message with its dotted path.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field


class FieldError(BaseModel):
    field: str = Field(description="dotted path of the offending field, e.g. roles.0.replicas")
    message: str


def field_errors(errors: Iterable[Mapping[str, Any]]) -> list[FieldError]:
    """Pydantic's errors as dotted field paths (request sections such as `body` left out)."""
    result = []
    for error in errors:
        parts = [str(part) for part in error.get("loc", ())]
        if len(parts) > 1 and parts[0] == "header":  # as people write them: headers.Idempotency-Key
            parts = ["headers", "-".join(word.capitalize() for word in parts[1].split("-")), *parts[2:]]
        elif len(parts) > 1 and parts[0] in ("body", "query", "path"):
            parts = parts[1:]
        result.append(FieldError(field=".".join(parts) or "(root)", message=str(error.get("msg", "invalid"))))
    return result


def summarize(details: Iterable[FieldError], limit: int = 5) -> str:
    shown = list(details)
    text = "; ".join(f"{detail.field}: {detail.message}" for detail in shown[:limit])
    return text + (f"; and {len(shown) - limit} more" if len(shown) > limit else "")


class ErrorBody(BaseModel):
    error: str = Field(description="a stable code: not_found, unauthorized, invalid_spec, …")
    message: str
    details: list[FieldError] = Field(default_factory=list)

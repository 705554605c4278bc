"""What every part of the job specification shares: quantities (memory, durations), names, and
the strict model the parts are built on."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000, "kb": 1000, "ki": 1024, "kib": 1024,
    "m": 1000**2, "mb": 1000**2, "mi": 1024**2, "mib": 1024**2,
    "g": 1000**3, "gb": 1000**3, "gi": 1024**3, "gib": 1024**3,
    "t": 1000**4, "tb": 1000**4, "ti": 1024**4, "tib": 1024**4,
}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_DURATION_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_ZERO_DURATION = re.compile(r"^\s*0+(\.0*)?\s*[smhd]?\s*$")
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
MAX_ENV_SECRETS = 64
MAX_SECRET_BYTES = 4096
"""The longest value of an `env_secrets` variable, as submitted."""
MAX_STORED_SECRET = 8192
"""The longest value the spec holds: stored, a secret is its encrypted form, a third longer."""


def parse_memory(value: int | float | str) -> int:
    """Bytes from an int (bytes) or a quantity such as "512Mi", "2Gi", "1.5GB" or "4g"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("memory must be a number of bytes or a quantity such as 2Gi")  # noqa: TRY004 - pydantic reports ValueError
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    else:
        match = _QUANTITY.match(value)
        if not match or match.group(2).lower() not in _MEMORY_UNITS:
            raise ValueError(f"cannot read memory quantity {value!r}; write e.g. 512Mi, 2Gi or 4GB")
        number, unit = float(match.group(1)), match.group(2).lower()
    result = int(number * _MEMORY_UNITS[unit])
    if result <= 0:
        raise ValueError("memory must be greater than zero")
    return result


def parse_duration(value: int | float | str) -> float:
    """Seconds from a number (seconds) or a string such as "90s", "10m", "2h", "1d"."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("a duration is a number of seconds or a string such as 10m")  # noqa: TRY004 - pydantic reports ValueError
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"cannot read duration {value!r}; write e.g. 90s, 10m or 2h")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError("a duration must be greater than zero")
    return seconds


def format_bytes(value: int) -> str:
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


class _Strict(BaseModel):
    # Built on first use, not at import: a CLI command that never validates a spec starts sooner.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


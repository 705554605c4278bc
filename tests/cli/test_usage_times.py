"""The times `mlyard usage --since/--until` accepts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mlyard.cli.submission import UsageError
from mlyard.cli.usage import hours, parse_moment

NOW = datetime(2026, 11, 8, 12, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("text", "expected"), [
    ("7d", NOW - 7 * 86400),
    ("12h", NOW - 12 * 3600),
    (" 30m ", NOW - 1800),
    ("1.5h", NOW - 5400),
    ("2w", NOW - 14 * 86400),
    ("now", NOW),
    ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC).timestamp()),
    ("2026-11-01T06:30", datetime(2026, 11, 1, 6, 30, tzinfo=UTC).timestamp()),
    ("2026-11-01T06:30+02:00", datetime(2026, 11, 1, 4, 30, tzinfo=UTC).timestamp()),
])
def test_relative_and_absolute_times(text: str, expected: float) -> None:
    assert parse_moment(text, "--since", NOW) == expected


@pytest.mark.parametrize("text", ["", "yesterday", "7", "-7d", "7x", "2026-13-01", "99999999999d"])
def test_what_cannot_be_read_is_a_usage_error_naming_the_option(text: str) -> None:
    with pytest.raises(UsageError, match="^--since: "):
        parse_moment(text, "--since", NOW)


def test_hours_show_small_amounts_rather_than_zero() -> None:
    assert (hours(0), hours(1234.5), hours(0.0006)) == ("0.00", "1,234.50", "0.0006")

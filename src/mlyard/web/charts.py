"""The JSON that static/charts.js draws: shared time stamps and one list of values per line."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from fastapi.responses import JSONResponse


def _finite(value: float | None) -> float | None:
    # JSON has no NaN or infinity; a gap in the line is honest, a zero would not be.
    return value if value is not None and math.isfinite(value) else None


def chart_payload(times: Sequence[float], lines: Mapping[str, Iterable[float | None]], *,
                  final: bool = False) -> dict:
    """`lines` maps a label to values aligned with `times`; `final` tells the page to stop polling."""
    series = []
    for label, values in lines.items():
        values = [_finite(value) for value in values]
        if len(values) != len(times):
            raise ValueError(f"line {label!r} has {len(values)} values for {len(times)} times")
        series.append({"label": label, "values": values})
    return {"x": list(times), "series": series, "final": final}


def chart_response(times: Sequence[float], lines: Mapping[str, Iterable[float | None]], *,
                   final: bool = False) -> JSONResponse:
    return JSONResponse(chart_payload(times, lines, final=final), headers={"Cache-Control": "no-store"})

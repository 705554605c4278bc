"""What jobs report as training metrics, and what the API returns of them.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


METRIC_NAME = r"^[A-Za-z_][A-Za-z0-9_./-]{0,127}$"


MAX_METRICS_PER_REPORT = 256


MAX_STEP = 2**53


METRICS_PAGE_SIZE = 10_000


class MetricsReport(BaseModel):
    """The body of `POST /jobs/{id}/metrics`: the values of one training step."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, le=MAX_STEP, description="the training step (or epoch) the values belong to")
    metrics: dict[Annotated[str, Field(pattern=METRIC_NAME)], Annotated[float, Field(allow_inf_nan=False)]] = Field(
        min_length=1, max_length=MAX_METRICS_PER_REPORT,
        description="name → finite number, e.g. {\"loss\": 0.31, \"accuracy\": 0.9}",
    )
    rank: int = Field(default=0, ge=0, le=1_000_000, description="the replica's rank that reports")


class MetricPoint(BaseModel):
    id: int
    attempt: int
    rank: int
    step: int
    name: str
    value: float
    at: float


class MetricsPage(BaseModel):
    points: list[MetricPoint]
    next_after: int = Field(description="ask again with `after` set to this for the points stored since")

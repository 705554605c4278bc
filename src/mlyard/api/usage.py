"""What the API returns about GPU-hours and CPU-hours used.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class UsageAmount(BaseModel):
    gpu_hours: float = Field(description="GPUs held × hours")
    cpu_hours: float = Field(description="CPU cores held × hours")


class UsageDay(UsageAmount):
    day: str = Field(description="a UTC day, YYYY-MM-DD")


class UsageRow(UsageAmount):
    key: str = Field(description="the user's or the project's name")
    jobs: int = Field(description="jobs that held resources in the window")
    days: list[UsageDay] = Field(description="the row's usage per UTC day, oldest first; days without usage left out")


class UsageReport(BaseModel):
    """What jobs held between `since` and `until`: attempts from their launch to their end (now
    for a running one) × the GPUs and cores of their replicas, split at UTC midnight."""

    since: float
    until: float
    by: Literal["user", "project"]
    everyone: bool = Field(description="false: only the caller's own jobs are counted (callers who are not admins)")
    rows: list[UsageRow] = Field(description="largest GPU-hours first, then CPU-hours")
    days: list[UsageDay] = Field(description="all rows together per UTC day, oldest first")
    total: UsageAmount

"""What the API returns about uploaded code snapshots.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from pydantic import BaseModel


class SnapshotInfo(BaseModel):
    digest: str
    size: int

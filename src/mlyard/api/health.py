"""The health check's answer.

Times are UTC seconds since the epoch.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Health(BaseModel):
    status: str
    version: str
    controller: Literal["leader", "standby"] = Field(
        # The default is what a server from before leadership always was: its own controller.
        default="leader",
        description="whether this server runs the controller; of the servers sharing a database one "
        "leads, the others stand by to take over",
    )
    adopted: int | None = Field(
        default=None,
        description="replicas the leading controller found running when it started (left by an earlier server); "
        "null while it has not looked yet, and on a standby",
    )

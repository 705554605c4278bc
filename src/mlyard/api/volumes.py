"""What the API takes and returns about volumes: a project's named, persistent, read-write
directories with a size quota, which jobs mount (`volumes:` in the spec). Times are UTC seconds
since the epoch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlyard.spec import NAME_PATTERN, parse_memory

MAX_VOLUME_BYTES = 1024**5
"""1 PiB: a size beyond it is a typo."""


class VolumeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="lowercase letters, digits and dashes")
    project: str = Field(default="default", pattern=NAME_PATTERN)
    size: int | str = Field(description="its quota: bytes, or a quantity such as 50Gi")
    description: str = Field(default="", max_length=10_000)

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: object) -> int:
        size = parse_memory(value)  # type: ignore[arg-type] - it names what is wrong with anything else
        if size > MAX_VOLUME_BYTES:
            raise ValueError("a volume holds at most 1 PiB")
        return size

    @property
    def size_bytes(self) -> int:
        return int(self.size)


class VolumeInfo(BaseModel):
    project: str
    name: str
    description: str
    size_bytes: int
    """The quota: what the project's storage limit counts for it."""
    used_bytes: int | None
    """What it holds, as last measured; None until measured, or where the server cannot measure it."""
    measured_at: float | None
    over_quota: bool
    """Measured above its size: new jobs cannot mount it."""
    enforcement: str | None
    """How the storage itself holds it to its size, where it does; None: measured only."""
    created_by: str | None
    created_at: float
    mounted_by: list[int] = Field(default_factory=list)
    """The unfinished jobs that mount it (removing it waits for them)."""

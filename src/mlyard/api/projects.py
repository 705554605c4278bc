"""What the API takes and returns about projects, their members and their limits."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlyard.spec import NAME_PATTERN

RoleName = Literal["viewer", "member", "maintainer"]


class ProjectLimits(BaseModel):
    """Null: no limit. GPU, CPU and memory count what the project's running jobs hold."""

    model_config = ConfigDict(extra="forbid")

    gpu: float | None = Field(default=None, ge=0, le=1e6)
    cpu: float | None = Field(default=None, ge=0, le=1e7)
    memory: int | None = Field(default=None, ge=0, le=2**62, description="bytes")
    running_jobs: int | None = Field(default=None, ge=0, le=10**6)
    storage_bytes: int | None = Field(default=None, ge=0, le=2**62,
                                      description="bytes of the code snapshots and dataset files the project "
                                                  "keeps, each blob counted once")


class ProjectMember(BaseModel):
    user: str
    role: RoleName


class ProjectInfo(BaseModel):
    name: str
    description: str | None
    limits: ProjectLimits
    storage_used_bytes: int = Field(default=0, description="code snapshots and dataset files the project keeps, each "
                                                           "blob once, against limits.storage_bytes")
    your_role: RoleName | None = Field(description="the caller's role; null for an administrator who is no member")
    members: list[ProjectMember]
    created_at: float


class NewProject(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="lowercase letters, digits and dashes")
    description: str | None = Field(default=None, max_length=2000)
    limits: ProjectLimits = Field(default_factory=ProjectLimits)


class ProjectChange(BaseModel):
    """Fields left out keep their value."""

    model_config = ConfigDict(extra="forbid")

    description: str | None = Field(default=None, max_length=2000)
    limits: ProjectLimits | None = None


class Membership(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: RoleName


class StoredSnapshot(BaseModel):
    digest: str
    size: int = Field(description="bytes")
    jobs: int = Field(description="the project's jobs that ran this code")
    unfinished_jobs: int = Field(description="of them, those not yet ended: the snapshot cannot be released")
    first_used_at: float
    last_used_at: float


class StoredDataset(BaseModel):
    name: str
    versions: int
    bytes: int = Field(description="its distinct blobs, all versions: what it keeps for the project (a blob it "
                                   "shares with another dataset or a snapshot of the project counts once in used_bytes)")


class StoredVolume(BaseModel):
    name: str
    size_bytes: int
    """Its quota: what the project's limit counts."""
    used_bytes: int | None
    """What it holds, as last measured."""


class ProjectStorage(BaseModel):
    """What a project keeps against its storage limit: code snapshots (newest use first),
    datasets and models, each blob counted once however many of them hold it."""

    project: str
    used_bytes: int = Field(description="every blob the project keeps, once: at most snapshots_bytes + datasets_bytes "
                                        "+ models_bytes + volumes_bytes, less where they share bytes")
    limit_bytes: int | None
    snapshots_bytes: int = Field(default=0, description="the code snapshots it keeps")
    datasets_bytes: int = Field(default=0, description="the distinct blobs of its datasets' versions")
    volumes_bytes: int = Field(default=0, description="its volumes' quotas")
    models_bytes: int = Field(default=0, description="the distinct blobs of its models' versions")
    snapshots: list[StoredSnapshot]
    datasets: list[StoredDataset] = Field(default_factory=list)
    volumes: list[StoredVolume] = Field(default_factory=list)

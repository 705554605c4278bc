"""What the API takes and returns about datasets: a project's named collections of files, kept
as immutable versions (`v1`, `v2`, …) over the content-addressed store, and aliases that name
versions and move.

A version is made from a manifest: a JSON file (uploaded as a blob like the files it lists)
of `{"files": [{"path": …, "sha256": …, "size": …}, …]}`. Times are UTC seconds since the epoch.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlyard.spec import NAME_PATTERN

DIGEST_PATTERN = r"^[0-9a-f]{64}$"
VERSION_PATTERN = r"^v[1-9][0-9]{0,8}$"
ALIAS_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
"""An alias starts with a letter, so it is never read as a version (`v2`) or a number."""
TAG_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
MAX_FILES = 200_000
"""Files in one version; a manifest of that many is about 25 MB."""
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
MAX_PATH_LENGTH = 1024
MAX_DIGESTS_ASKED = 5_000
"""Digests in one `POST /blobs:missing`; a client asks in pieces."""
DEFAULT_FILES_PAGE = 1_000
MAX_FILES_PAGE = 10_000
LATEST = "latest"
"""The alias every new version takes."""
Visibility = Literal["project", "catalog"]
_VERSION = re.compile(VERSION_PATTERN)


def version_name(number: int) -> str:
    return f"v{number}"


def version_number(name: str) -> int | None:
    """The number of `vN`; None for anything else (an alias)."""
    return int(name[1:]) if _VERSION.fullmatch(name) else None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetRequest(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="lowercase letters, digits and dashes")
    project: str = Field(default="default", pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=100_000, description="Markdown")
    licence: str | None = Field(default=None, max_length=128)
    tags: list[Annotated[str, Field(pattern=TAG_PATTERN)]] = Field(default_factory=list, max_length=32)
    visibility: Visibility = Field(
        default="project", description="project: its members see it; catalog: anyone sees its card")


class DatasetInfo(BaseModel):
    id: int
    project: str
    name: str
    owner: str | None
    """None: registered data nobody has claimed yet."""
    description: str
    licence: str | None
    tags: list[str]
    visibility: Visibility
    created_at: float
    updated_at: float
    versions: int
    aliases: dict[str, str] = Field(default_factory=dict)
    """Alias → the version it names (`{"latest": "v3"}`)."""
    readable: bool = True
    """Whether the caller may read its files (a catalog card may be seen without)."""


class VersionRequest(_Strict):
    manifest: str = Field(pattern=DIGEST_PATTERN, description="the sha256 of the manifest blob")
    parent: str | None = Field(default=None, description="vN or an alias; by default the version `latest` names")
    message: str = Field(default="", max_length=10_000)


class VersionInfo(BaseModel):
    project: str
    dataset: str
    version: str
    parent: str | None
    message: str
    created_by: str | None
    created_at: float
    file_count: int
    total_bytes: int
    statistics: dict
    source_job: int | None
    aliases: list[str] = Field(default_factory=list)


class VersionCreated(BaseModel):
    version: VersionInfo
    created: bool
    """False when the files are those of the parent: no version was made."""


class VersionFile(BaseModel):
    path: str
    sha256: str
    size: int
    media_type: str | None


class VersionFiles(BaseModel):
    version: str
    files: list[VersionFile]
    next_after: str | None
    """Pass as `after` for the next page; None on the last."""


class ChangedFile(BaseModel):
    path: str
    before: VersionFile
    after: VersionFile


class VersionDiff(BaseModel):
    before: str
    after: str
    added: list[VersionFile]
    removed: list[VersionFile]
    changed: list[ChangedFile]


class AliasRequest(_Strict):
    version: str = Field(pattern=VERSION_PATTERN)


class AliasMove(BaseModel):
    alias: str
    before: str | None
    after: str | None
    moved_by: str
    at: float


class AliasInfo(BaseModel):
    alias: str
    version: str
    moves: list[AliasMove]


class MissingBlobsRequest(_Strict):
    digests: list[Annotated[str, Field(pattern=DIGEST_PATTERN)]] = Field(max_length=MAX_DIGESTS_ASKED)


class MissingBlobs(BaseModel):
    missing: list[str]
    """The digests to upload (`PUT /blobs/{digest}`) before a manifest may name them."""


class BlobInfo(BaseModel):
    digest: str
    size: int

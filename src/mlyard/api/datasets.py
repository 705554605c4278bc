"""What the API takes and returns about datasets: a project's named collections of files, kept
as immutable versions (`v1`, `v2`, …) over the content-addressed store, and aliases that name
versions and move.

A version is made from a manifest: a JSON file (uploaded as a blob like the files it lists)
of `{"files": [{"path": …, "sha256": …, "size": …}, …]}`. Times are UTC seconds since the epoch.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from mlyard.spec import ALIAS_PATTERN, DIGEST_PATTERN, NAME_PATTERN, VERSION_PATTERN  # noqa: F401 - named here too
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


def version_fingerprint(files: Iterable[tuple[str, str]]) -> str:
    """A version's fingerprint: the sha256 of its sorted (path, sha256) pairs, equal for versions
    with the same files. A client that computes it for a directory knows, before sending
    anything, whether pushing it would make a version."""
    hasher = hashlib.sha256()
    for path, digest in sorted(files):
        hasher.update(f"{path}\x00{digest}\n".encode())
    return hasher.hexdigest()


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
    fingerprint: str = Field(default="", description="the sha256 of its sorted (path, sha256) pairs "
                                                     "(`version_fingerprint`)")
    aliases: list[str] = Field(default_factory=list)
    read_by: list[int] = Field(
        default_factory=list, description="the newest jobs (up to 100) that read this version and the caller may "
        "see; only in a single version's answer")


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


# ---------------------------------------------------------------- sharing, claiming, registering
RequestStatus = Literal["pending", "granted", "refused"]
ClaimStatus = Literal["pending", "approved", "refused"]


class GrantInfo(BaseModel):
    """Project `project` reads the dataset's files."""

    project: str
    right: Literal["read"] = "read"
    granted_by: str
    granted_at: float


class AccessRequestCreate(_Strict):
    project: str | None = Field(default=None, pattern=NAME_PATTERN, description=(
        "the project that would read it (one the caller is a member of); by default the caller's only one"))
    message: str = Field(default="", max_length=10_000, description="why")


class Answer(_Strict):
    message: str = Field(default="", max_length=10_000, description="why (to a refusal)")


class AccessRequestInfo(BaseModel):
    id: int
    dataset_project: str
    dataset: str
    project: str
    """The project that would read it."""
    requested_by: str
    message: str
    status: RequestStatus
    created_at: float
    answered_by: str | None
    answered_at: float | None
    answer: str


class RegisterRequest(_Strict):
    path: str = Field(min_length=1, max_length=4096, pattern=r"^/[^\x00]*$",
                      description="an absolute directory on the server, under one of MLYARD_DATA_ROOTS")
    name: str = Field(pattern=NAME_PATTERN)
    project: str = Field(default="default", pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=100_000)
    visibility: Visibility = Field(default="catalog", description="catalog by default, so users find it to claim")


class ClaimCreate(_Strict):
    project: str = Field(pattern=NAME_PATTERN, description="the caller's project it would move to")
    message: str = Field(default="", max_length=10_000)


class TransferCreate(_Strict):
    to_project: str = Field(pattern=NAME_PATTERN)
    to_user: str | None = Field(default=None, min_length=1, max_length=128,
                                description="its new owner, a member of to_project; by default the caller")
    message: str = Field(default="", max_length=10_000)


class ClaimInfo(BaseModel):
    id: int
    kind: Literal["claim", "transfer"]
    dataset_project: str
    """Where the dataset is now (where it moved, once approved)."""
    dataset: str
    to_project: str
    to_user: str
    requested_by: str
    message: str
    status: ClaimStatus
    created_at: float
    answered_by: str | None
    answered_at: float | None
    answer: str


class PackedBlobs(BaseModel):
    """The members of a pack (`PUT /blobs/pack`) now stored, in the pack's order."""

    blobs: list[BlobInfo]

"""The storage a job reads and writes beside its code: dataset versions it reads, datasets it
writes, and project volumes it mounts."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from mlyard.spec.base import NAME_PATTERN, _Strict

VERSION_PATTERN = r"^v[1-9][0-9]{0,8}$"
ALIAS_PATTERN = r"^[a-z][a-z0-9-]{0,62}$"
"""An alias starts with a letter, so it is never read as a version (`v2`) or a number."""
DIGEST_PATTERN = r"^[0-9a-f]{64}$"
MAX_DATASET_INPUTS = 32
_DATASET_PATH_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def dataset_variable(name: str) -> str:
    """The variable that holds an input's directory: `MLYARD_DATASET_` and the name upper-cased,
    dashes as underscores."""
    return "MLYARD_DATASET_" + name.upper().replace("-", "_")


def plain_path(value: str | None) -> str | None:
    if value is None:
        return None
    parts = value.strip("/").split("/") if not value.startswith("/") else []
    # Plain names only: no `..`, no dot-files that could shadow the code's own (.git), no escapes.
    if not parts or not all(_DATASET_PATH_PART.match(part) for part in parts):
        raise ValueError(f"{value!r} is not a relative path of plain names (letters, digits, . _ -) such as "
                         "data/digits")
    return "/".join(parts)


class DatasetInput(_Strict):
    """A dataset version the job reads, shown to every replica as a read-only directory."""

    name: str = Field(pattern=NAME_PATTERN, description="the dataset")
    project: str | None = Field(
        default=None, pattern=NAME_PATTERN, description="the dataset's project (default: the job's)")
    version: str = Field(
        default="latest", pattern=f"^({VERSION_PATTERN[1:-1]}|{ALIAS_PATTERN[1:-1]})$",
        description="a version (v2) or an alias (latest, production); the server resolves an alias at "
        "submission and stores the version, so a restart or a resubmission reads the same files")
    path: str | None = Field(
        default=None, max_length=255,
        description="where the replicas see it, relative to their working directory (default: data/NAME)")
    fingerprint: str | None = Field(
        default=None, pattern=DIGEST_PATTERN,
        description="set by the server at submission: the version's fingerprint (a sha256 of its paths and "
        "their digests), which a resubmission must find again")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return plain_path(value)

    @property
    def directory(self) -> str:
        return self.path or f"data/{self.name}"


MAX_DATASET_OUTPUTS = 8


class DatasetOutput(_Strict):
    """A dataset the job writes: once it succeeds, what it left in MLYARD_OUTPUT_DIR (or its
    `path` there) becomes the dataset's next version, with the job as its source."""

    dataset: str = Field(pattern=NAME_PATTERN, description="the dataset (made in its project if missing)")
    project: str | None = Field(default=None, pattern=NAME_PATTERN,
                                description="the dataset's project (default: the job's)")
    path: str | None = Field(
        default=None, max_length=255,
        description="the folder of MLYARD_OUTPUT_DIR that holds the version (default: all of it; required "
        "when the job writes several datasets)")
    message: str = Field(default="", max_length=1000, description="the version's message")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        return plain_path(value)


def check_dataset_outputs(outputs: list[DatasetOutput]) -> None:
    keys = [(item.project, item.dataset) for item in outputs]
    if repeated := sorted({item.dataset for item in outputs if keys.count((item.project, item.dataset)) > 1}):
        raise ValueError(f"outputs: {', '.join(repeated)} written twice; a job makes one version of each")
    if len(outputs) > 1:
        if any(item.path is None for item in outputs):
            raise ValueError("outputs: a job that writes several datasets names each one's folder (path)")
        paths = sorted(item.path or "" for item in outputs)
        for first, second in zip(paths, paths[1:], strict=False):
            if second == first or second.startswith(first + "/"):
                raise ValueError(f"outputs: path {second!r} lies in {first!r}; give each output its own folder")


def check_dataset_inputs(inputs: list[DatasetInput]) -> None:
    names = [item.name for item in inputs]
    if repeated := sorted({name for name in names if names.count(name) > 1}):
        raise ValueError(f"datasets: {', '.join(repeated)} named twice; each input has its own "
                         f"{dataset_variable(repeated[0])}")
    paths = sorted(item.directory for item in inputs)
    for first, second in zip(paths, paths[1:], strict=False):
        if second == first or second.startswith(first + "/"):
            raise ValueError(f"datasets: path {second!r} lies in {first!r}; give each input its own directory")



MAX_VOLUMES = 16
_VOLUME_MOUNT_POINT = re.compile(r"^/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}){0,15}$")
# Mount points a container cannot give up: a volume there would hide or replace the image's system.
_SYSTEM_DIRECTORIES = frozenset({"bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "proc", "run", "sbin", "sys",
                                 "usr", "var"})


def volume_variable(name: str) -> str:
    """The variable that holds a volume's directory as its replicas see it."""
    return "MLYARD_VOLUME_" + name.upper().replace("-", "_")


class VolumeInput(_Strict):
    """A volume of a project that every replica of the job reads and writes."""

    name: str = Field(pattern=NAME_PATTERN, description="the volume (`mlyard volumes create`)")
    project: str | None = Field(default=None, pattern=NAME_PATTERN,
                                description="the volume's project (default: the job's)")
    path: str | None = Field(
        default=None, max_length=1024,
        description="where the replicas see it: an absolute path such as /scratch (containers and pods), or "
        "a path relative to their working directory (default: volumes/NAME)")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is None or not value.startswith("/"):
            return plain_path(value)
        trimmed = value.rstrip("/")
        if not _VOLUME_MOUNT_POINT.match(trimmed) or trimmed.split("/")[1] in _SYSTEM_DIRECTORIES:
            raise ValueError(f"{value!r} is not a mount point of plain names outside the system's directories, "
                             "such as /scratch or /data/shared")
        return trimmed

    @property
    def directory(self) -> str:
        return self.path or f"volumes/{self.name}"

    @property
    def absolute(self) -> bool:
        return self.directory.startswith("/")


def check_volumes(volumes: list[VolumeInput], inputs: list[DatasetInput]) -> None:
    keys = [(item.project, item.name) for item in volumes]
    if repeated := sorted({item.name for item in volumes if keys.count((item.project, item.name)) > 1}):
        raise ValueError(f"volumes: {', '.join(repeated)} mounted twice")
    variables = [volume_variable(item.name) for item in volumes]
    if clash := sorted({name for name in variables if variables.count(name) > 1}):
        raise ValueError(f"volumes: two volumes of one name would both be {clash[0]}; mount one of them")
    paths = sorted([*(item.directory for item in volumes), *(item.directory for item in inputs)])
    for first, second in zip(paths, paths[1:], strict=False):
        if second == first or second.startswith(first.rstrip("/") + "/"):
            raise ValueError(f"volumes: path {second!r} lies in {first!r}; give each volume and dataset its own "
                             "directory")

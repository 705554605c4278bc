"""What the API takes and returns about the model registry: a project's models, their
immutable versions (`v1`, `v2`, …: files over the content-addressed store, a format, metrics and
lineage) and aliases (`production`, `staging`) that name versions and move.

A version is made from a manifest uploaded as a blob (as a dataset version is; `api.datasets`
describes it), or from the files a job left in its checkpoint directory. A model version is
named `NAME:vN` or `NAME@alias` (`PROJECT/NAME…` for another project). Times are UTC seconds
since the epoch.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlyard.api.datasets import DIGEST_PATTERN, MAX_PATH_LENGTH, NAME_PATTERN, TAG_PATTERN

FORMATS = ("safetensors", "pytorch-state-dict", "torchscript", "onnx", "keras", "tf-savedmodel", "other")
Format = Literal["safetensors", "pytorch-state-dict", "torchscript", "onnx", "keras", "tf-savedmodel", "other"]
TASKS = ("image-classification", "text-classification", "object-detection", "image-segmentation",
         "token-classification", "question-answering", "text-generation", "translation", "summarization",
         "speech-recognition", "regression", "tabular-classification", "reinforcement-learning")
"""The vocabulary a task is suggested from; any other short text is taken as it is."""
TASK_PATTERN = r"^[a-z0-9][a-z0-9 ._-]{0,62}$"
METRIC_PATTERN = r"^[A-Za-z0-9_./:-]{1,128}$"
MAX_METRICS = 256
MAX_SIGNATURE_BYTES = 64 * 1024
"""A signature's JSON, as stored."""
MAX_MODEL_FILES = 10_000
"""Files in one model version (weights, config, tokenizer, label map, …)."""
LATEST = "latest"
"""The alias every new version takes."""
REFERENCE_PATTERN = r"^(v[1-9][0-9]{0,8}|[a-z][a-z0-9-]{0,62})$"
PARENT_PATTERN = (r"^(([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?/)?[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?[:@])?"
                  r"(v[1-9][0-9]{0,8}|[a-z][a-z0-9-]{0,62})$")
_PARENT = re.compile(PARENT_PATTERN)


def split_reference(reference: str, project: str, name: str) -> tuple[str, str, str]:
    """(project, model, version or alias) of `[[PROJECT/]NAME:]vN` or `[[PROJECT/]NAME@]ALIAS`,
    the missing parts taken from `project` and `name`."""
    if not _PARENT.fullmatch(reference):
        raise ValueError(f"{reference!r} is not [PROJECT/]NAME:vN, [PROJECT/]NAME@ALIAS, vN or an alias")
    head, separator, version = reference.rpartition(":") if ":" in reference else reference.rpartition("@")
    if not separator:
        return project, name, version
    if "/" in head:
        project, _, head = head.partition("/")
    return project, head, version


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRequest(_Strict):
    name: str = Field(pattern=NAME_PATTERN, description="lowercase letters, digits and dashes")
    project: str = Field(default="default", pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=100_000, description="Markdown")
    tags: list[Annotated[str, Field(pattern=TAG_PATTERN)]] = Field(default_factory=list, max_length=32)
    task: str = Field(default="", max_length=63, description="what it solves: " + ", ".join(TASKS) + ", or other "
                      "short text")

    @field_validator("task")
    @classmethod
    def _task(cls, value: str) -> str:
        if value and not re.fullmatch(TASK_PATTERN, value):
            raise ValueError("a task is lowercase letters, digits, spaces, dots, dashes and underscores")
        return value


class ModelInfo(BaseModel):
    id: int
    project: str
    name: str
    owner: str | None
    description: str
    tags: list[str]
    task: str
    created_at: float
    updated_at: float
    versions: int
    aliases: dict[str, str] = Field(default_factory=dict)
    """Alias → the version it names (`{"latest": "v3", "production": "v2"}`)."""


Metrics = Annotated[dict[Annotated[str, Field(pattern=METRIC_PATTERN)], Annotated[float, Field(allow_inf_nan=False)]],
                    Field(max_length=MAX_METRICS)]


class ModelVersionRequest(_Strict):
    """Either `manifest` (files already uploaded as blobs, as a dataset push) or `job` (the files
    the job left in its checkpoint directory, `path` under it: a file or a folder)."""

    manifest: str | None = Field(default=None, pattern=DIGEST_PATTERN, description="the sha256 of the manifest blob")
    job: int | None = Field(default=None, ge=1, le=2**63 - 1, description="the job whose checkpoint files to take")
    path: str | None = Field(default=None, min_length=1, max_length=MAX_PATH_LENGTH, pattern=r"^[^\x00\\]*$",
                             description="with `job`: a file or folder under its checkpoint directory (default: "
                             "all of it)")
    format: Format | None = Field(default=None, description="by default guessed from the files' names")
    framework_version: str = Field(default="", max_length=64, pattern=r"^[^\x00]*$", description="e.g. torch 2.5.1")
    signature: dict | None = Field(default=None, description=f"inputs and outputs, JSON of at most "
                                   f"{MAX_SIGNATURE_BYTES >> 10} KiB")
    metrics: Metrics = Field(default_factory=dict, description="name → number; with `job`, added to (and over) "
                             "the last value of each metric the job reported")
    parent: str | None = Field(default=None, pattern=PARENT_PATTERN, description="the version it was fine-tuned "
                               "from: [PROJECT/]NAME:vN, [PROJECT/]NAME@ALIAS, or vN of this model")
    message: str = Field(default="", max_length=10_000)

    @field_validator("signature")
    @classmethod
    def _bounded(cls, value: dict | None) -> dict | None:
        if value is not None and len(json.dumps(value, separators=(",", ":"))) > MAX_SIGNATURE_BYTES:
            raise ValueError(f"the signature is over {MAX_SIGNATURE_BYTES >> 10} KiB as JSON")
        return value


class DatasetRead(BaseModel):
    project: str
    dataset: str
    version: str


class Lineage(BaseModel):
    job: int | None = None
    """The job that produced it."""
    attempt: int | None = None
    snapshot: str | None = None
    """That job's code snapshot (sha256)."""
    datasets: list[DatasetRead] = Field(default_factory=list)
    """The dataset versions that job read."""
    parent: str | None = None
    """The version it was fine-tuned from: PROJECT/NAME:vN."""


class ModelVersionInfo(BaseModel):
    project: str
    model: str
    version: str
    format: Format
    framework_version: str
    signature: dict | None
    metrics: dict[str, float]
    message: str
    created_by: str | None
    created_at: float
    file_count: int
    total_bytes: int
    statistics: dict
    """Files by media type; safetensors headers (tensors, dtypes, parameter counts) and JSON
    configs as read, never any file loaded."""
    fingerprint: str
    lineage: Lineage
    aliases: list[str] = Field(default_factory=list)
    children: list[str] = Field(default_factory=list, description="versions fine-tuned from it (PROJECT/NAME:vN); "
                                "only in a single version's answer")


class ModelVersionCreated(BaseModel):
    version: ModelVersionInfo
    created: bool
    """False when a pushed manifest holds the files of the version `latest` names and nothing else
    is said (no metrics, parent, signature or format): no version was made."""

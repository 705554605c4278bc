"""What the API takes and returns about cleaning reports of dataset versions (`mlyard datasets
check`, made by a job over the version's files) and cleaning (`mlyard datasets clean`: a child
version without the files a report found wrong). Times are UTC seconds since the epoch."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlyard.spec import ALIAS_PATTERN, NAME_PATTERN, VERSION_PATTERN
from mlyard.spec.storage import plain_path

DropKind = Literal["duplicates", "near-duplicates", "corrupt", "wrong-extension", "leaks", "conflicts",
                   "label-issues"]
"""What `clean` drops: the copies of exact duplicates (the first of each group stays), of near
duplicates (likewise), undecodable and empty files, files whose content is not what their
extension says, the held-out side (test, val, …) of each leak, every file of a label conflict,
and the files cleanlab flags."""
DROP_KINDS: tuple[str, ...] = DropKind.__args__
MAX_CHOSEN_PATHS = 10_000
MAX_DISTANCE = 32


class PredictionsRef(BaseModel):
    """A CSV of out-of-sample predicted probabilities (a `path` column, one column per class) in a
    dataset version: pushed, or written by the job that made them (its `outputs:`)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str = Field(pattern=NAME_PATTERN)
    project: str | None = Field(default=None, pattern=NAME_PATTERN, description="default: the checked dataset's")
    version: str = Field(default="latest", pattern=f"^({VERSION_PATTERN[1:-1]}|{ALIAS_PATTERN[1:-1]})$")
    path: str = Field(max_length=255, description="the CSV's path in that version")

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return plain_path(value) or ""


class CheckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    distance: int = Field(default=6, ge=0, le=MAX_DISTANCE,
                          description="near duplicates: perceptual hashes (64 bits) at most this many bits apart")
    predictions: PredictionsRef | None = Field(
        default=None, description="with labels: cleanlab ranks likely label errors from these probabilities")


class CleanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    drop: list[DropKind] = Field(default_factory=list, max_length=len(DROP_KINDS),
                                 description="kinds of problem whose files are dropped, every group of each")
    paths: list[Annotated[str, Field(min_length=1, max_length=1024)]] = Field(
        default_factory=list, max_length=MAX_CHOSEN_PATHS,
        description="files chosen one by one from the report's groups (any file the report names, the first of a "
                    "group of duplicates too), dropped besides the kinds")
    keep: Literal["first"] = Field(default="first", description="which file of a group of duplicates stays: the "
                                                                 "first by path")
    message: str = Field(default="", max_length=1000, description="the new version's message (default: what was "
                                                                  "dropped)")

    @model_validator(mode="after")
    def _something(self) -> CleanRequest:
        if not self.drop and not self.paths:
            raise ValueError(f"drop: name a kind to drop ({', '.join(DROP_KINDS)}) or choose files (paths)")
        return self


class CheckInfo(BaseModel):
    id: int
    project: str
    dataset: str
    version: str
    job: int
    state: Literal["running", "done", "failed"]
    distance: int
    created_by: str | None
    created_at: float
    finished_at: float | None
    message: str
    summary: dict[str, Any] | None = None
    """The report's counts, once it is done."""


class CheckReport(CheckInfo):
    report: dict[str, Any] | None = None

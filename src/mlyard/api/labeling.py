"""What the API takes and returns about labeling tasks: a task on a dataset version with a label
schema, its annotators and reviewers, its items, and each annotator's labels of each item.
Boxes are in pixels of the image, (x, y) its top-left corner. Times are UTC seconds since the epoch."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mlyard.spec import ALIAS_PATTERN, NAME_PATTERN, VERSION_PATTERN

TaskKind = Literal["classification", "multilabel", "boxes", "text"]
"""classification: one class per image; multilabel: any number; boxes: boxes with a class each;
text: one class per .txt file or per line of a .jsonl file."""
AnnotationStatus = Literal["draft", "submitted", "accepted", "rejected"]
MAX_CLASSES = 500
MAX_BOXES = 500
MAX_ITEMS = 200_000
MAX_LINES_PER_FILE = 100_000
MAX_MEMBERS = 200
Label = Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[^\x00-\x1f]+$")]
UserName = Annotated[str, Field(min_length=1, max_length=128)]
PrefillFormat = Literal["imagefolder", "csv", "coco", "yolo", "voc", "label-studio"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Prefill(_Strict):
    """Labels the version already carries, read at creation as each item's initial state."""

    format: PrefillFormat
    path: str | None = Field(default=None, min_length=1, max_length=1024,
                             description="the label file of the version (csv, coco, label-studio); found by name "
                                         "where omitted")


class TaskRequest(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    project: str = Field(default="default", pattern=NAME_PATTERN, description="the dataset's project: the task's")
    dataset: str = Field(pattern=NAME_PATTERN)
    version: str = Field(default="latest", pattern=f"^({VERSION_PATTERN[1:-1]}|{ALIAS_PATTERN[1:-1]})$",
                         description="pinned at creation: an alias is resolved to its version")
    kind: TaskKind
    classes: list[Label] = Field(min_length=1, max_length=MAX_CLASSES)
    annotators: list[UserName] = Field(min_length=1, max_length=MAX_MEMBERS,
                                       description="members of the project who label")
    reviewers: list[UserName] = Field(default_factory=list, max_length=MAX_MEMBERS,
                                      description="members who accept or reject; none: no review step")
    annotators_per_item: int = Field(default=1, ge=1, le=10)
    instructions: str = Field(default="", max_length=20_000, description="Markdown")
    prefill: Prefill | None = None

    @model_validator(mode="after")
    def _distinct(self) -> TaskRequest:
        if len(set(self.classes)) != len(self.classes):
            raise ValueError("classes: each class is named once")
        if self.annotators_per_item > len(set(self.annotators)):
            raise ValueError("annotators_per_item: more than the task's annotators")
        return self


class TaskInfo(BaseModel):
    id: int
    project: str
    name: str
    dataset: str
    version: str
    kind: TaskKind
    classes: list[str]
    annotators: list[str]
    reviewers: list[str]
    annotators_per_item: int
    instructions: str
    created_by: str | None
    created_at: float
    items: int
    done: int
    """Items with as many submitted (or accepted) annotations as the task asks."""
    mine: int | None = None
    """Items the caller has labeled, when they annotate it."""
    prefilled: int = 0
    """Items holding a pre-fill (`TaskRequest.prefill`)."""


class Box(_Strict):
    label: Label
    x: float = Field(ge=0)
    y: float = Field(ge=0)
    width: float = Field(gt=0)
    height: float = Field(gt=0)


class AnnotationRequest(_Strict):
    labels: list[Label] = Field(default_factory=list, max_length=MAX_CLASSES)
    boxes: list[Box] = Field(default_factory=list, max_length=MAX_BOXES)
    status: Literal["draft", "submitted"] = Field(
        default="submitted", description="draft: saved as it is made, not yet counted as done")


class AnnotationInfo(BaseModel):
    user: str
    labels: list[str]
    boxes: list[Box]
    status: AnnotationStatus
    updated_at: float
    comment: str
    reviewed_by: str | None = None


class ItemPrefill(BaseModel):
    """An item's labels as the task's import found them: what an annotator starts from."""

    labels: list[str]
    boxes: list[Box]


class ItemInfo(BaseModel):
    id: int
    position: int
    path: str
    line: int | None
    annotations: list[AnnotationInfo]
    """The caller's own; a reviewer or maintainer sees everyone's."""
    prefill: ItemPrefill | None = None
    """None where the task's import had nothing for the item (or the task has no import)."""


class ItemPage(BaseModel):
    items: list[ItemInfo]
    next_after: int | None


class ReviewRequest(_Strict):
    annotator: UserName
    accept: bool
    comment: str = Field(default="", max_length=5_000)


class ExportRequest(_Strict):
    format: Literal["imagefolder", "csv", "coco", "yolo", "voc"] = Field(
        description="imagefolder or csv for classification (csv for multilabel and text), coco, yolo or voc for "
                    "boxes")
    message: str = Field(default="", max_length=1000, description="the new version's message")


class TaskAgreement(BaseModel):
    """How far the task's annotators agree, over their submitted and accepted annotations
    (`mlyard.annotation.agreement`); a figure that cannot be computed is None, `note` says why."""

    annotators: list[str]
    items_compared: int
    """Items two annotators or more labeled."""
    percent: float | None
    """The mean share of agreeing pairs of annotators per item (0 to 1)."""
    kappa: float | None
    kappa_kind: Literal["cohen", "fleiss"] | None
    """Cohen's for two annotators, Fleiss' for more."""
    per_class: dict[str, float]
    """Specific agreement per class."""
    per_annotator: dict[str, float | None]
    """Each annotator's share of agreement with the strict majority of the other annotators of
    each item (with two annotators, the other's labels); None where never compared."""
    note: str | None = None

"""A set of annotations of a dataset version's files, whatever format it came from or goes to.

Boxes are in pixels of the image as stored, `x, y` the top-left corner, `width, height` positive:
COCO's convention. Formats that write other conventions (YOLO's normalized centres, VOC's
1-based corners, Label Studio's percentages) convert on the way in and out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["classification", "boxes", "text"]
KINDS: tuple[Kind, ...] = ("classification", "boxes", "text")


class FormatError(ValueError):
    """A label file (or a set of annotations to write) that the format cannot hold: one line
    naming the file and what is wrong with it."""

    def __init__(self, path: str | None, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


@dataclass(frozen=True)
class Box:
    label: str
    x: float
    y: float
    width: float
    height: float

    @property
    def right(self) -> float:
        return self.x + self.width

    @property
    def bottom(self) -> float:
        return self.y + self.height


@dataclass(frozen=True)
class ItemLabels:
    """What one file is labelled with. An item with no label and no box was looked at and found
    to hold nothing (a COCO image without annotations, an empty YOLO file); a file with no item
    was not labelled at all."""

    path: str
    labels: tuple[str, ...] = ()
    boxes: tuple[Box, ...] = ()
    text_label: str | None = None


@dataclass
class Annotations:
    kind: Kind
    classes: tuple[str, ...] = ()
    items: dict[str, ItemLabels] = field(default_factory=dict)
    # (width, height) in pixels, from the label files where they say it, else from the caller.
    image_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"an annotation kind is one of {', '.join(KINDS)}: {self.kind!r}")

    def used_classes(self) -> tuple[str, ...]:
        """The declared classes, then any label of an item or box that they do not name, sorted."""
        declared = set(self.classes)
        extra = {label for item in self.items.values() for label in item.labels} | {
            box.label for item in self.items.values() for box in item.boxes}
        return self.classes + tuple(sorted(extra - declared))

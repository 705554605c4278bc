"""Pre-filling a labeling task from the labels its version already carries, in one of the formats
of `mlyard.annotation.formats`: each item the labels name gets them as its initial state, which
an annotator confirms or changes, and which an export takes where no annotation is final.

Reading happens when the task is made, before its transaction: the label files are the pusher's,
read as data with every read bounded (a file at `MAX_LABEL_FILE_BYTES`, all of them together at
`MAX_PREFILL_BYTES`). What the labels cannot mean for the task (a format error, a class the task
does not have, boxes on a task of classes or the reverse) refuses the task, naming `prefill`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from mlyard.annotation.formats import FORMATS
from mlyard.annotation.model import Annotations, FormatError, ItemLabels
from mlyard.api.labeling import MAX_BOXES, TaskRequest
from mlyard.cleaning.labels import MAX_LABEL_FILE_BYTES, is_image
from mlyard.errors import InvalidRequest
from mlyard.server.services.datasets import manifests
from mlyard.storage import BlobStore

MAX_PREFILL_BYTES = 256 * 1024 * 1024
ONE_FILE_FORMATS = ("csv", "coco", "label-studio")
BOX_FORMATS = ("coco", "yolo", "voc", "label-studio")
"""The formats kept in one file, which `Prefill.path` may name; the others find theirs by layout."""
SHOWN = 20


def _refused(message: str) -> InvalidRequest:
    return InvalidRequest(message, field="prefill")


class _Reader:
    """`read_bytes` for the formats: a version's file by path, at most one byte past the
    per-file limit (so the format says the file is too large), all reads together bounded."""

    def __init__(self, store: BlobStore, by_path: dict[str, tuple[str, int]]) -> None:
        self.store = store
        self.by_path = by_path
        self.left = MAX_PREFILL_BYTES

    def __call__(self, path: str) -> bytes | None:
        found = self.by_path.get(path)
        if found is None:
            return None
        digest, size = found
        if min(size, MAX_LABEL_FILE_BYTES + 1) > self.left:
            raise FormatError(path, f"the label files of one task are read up to {MAX_PREFILL_BYTES >> 20} MiB "
                                    "in all, and this one passes it")
        try:
            with open(self.store.path_for(digest), "rb") as handle:
                content = handle.read(MAX_LABEL_FILE_BYTES + 1)
        except OSError:
            return None
        self.left -= len(content)
        return content


def read_prefill(store: BlobStore, request: TaskRequest, files: list[tuple[str, str, int, str | None]],
                 items: list[tuple[str, int | None]]) -> dict[str, dict[str, Any]]:
    """`{item path: {"labels": [...], "boxes": [{label, x, y, width, height}]}}` for each item
    the import labels (`request.prefill`); reads blobs, so it runs outside any transaction."""
    prefill = request.prefill
    if prefill is None or not items:  # no items: the task is refused for that, naming its kind
        return {}
    by_path = {path: (digest, size) for path, digest, size, _ in files}
    options: dict[str, Any] = {}
    if prefill.path is not None:
        if prefill.format not in ONE_FILE_FORMATS:
            raise _refused(f"{prefill.format} labels are found by their layout: name a file only for "
                           f"{', '.join(ONE_FILE_FORMATS)}")
        if prefill.path not in by_path:
            raise _refused(f"{prefill.path!r:.200} is not a file of the version")
        options["path"] = prefill.path
    if prefill.format in BOX_FORMATS:
        # Measured, not taken from the file: YOLO's coordinates are fractions of each image's size,
        # and Label Studio's percentages need one where its results do not state it.
        options["image_sizes"] = _image_sizes(store, files)
    try:
        annotations = FORMATS[prefill.format].read(sorted(by_path), _Reader(store, by_path), **options)
    except FormatError as error:
        raise _refused(f"the version's labels cannot be read as {prefill.format}: {error}") from None
    return checked(request, annotations, {path for path, line in items if line is None},
                   options.get("image_sizes", {}))


def _image_sizes(store: BlobStore, files: list[tuple[str, str, int, str | None]]) -> dict[str, tuple[int, int]]:
    sizes = {}
    for path, digest, _, _ in files:
        if is_image(path) and (header := manifests.image_header(store.path_for(digest))) is not None:
            sizes[path] = (header[1], header[2])
    return sizes


def checked(request: TaskRequest, annotations: Annotations, item_paths: set[str],
            measured: dict[str, tuple[int, int]] | None = None) -> dict[str, dict[str, Any]]:
    """The pre-fills of the task's items, once they fit its kind and classes and their boxes lie
    inside the images as measured (a label file's stated size is not trusted)."""
    layout = request.prefill.format if request.prefill else "the import"
    if annotations.kind == "text":
        raise _refused(f"the {layout} labels are free text; a {request.kind} task takes classes")
    found = {path: item for path, item in sorted(annotations.items.items()) if path in item_paths}
    if not found:
        raise _refused(f"the {layout} labels name none of the task's {len(item_paths):,} items")
    for path, item in found.items():
        problem = _misfit(request.kind, item) or _outside(item, (measured or {}).get(path))
        if problem:
            raise _refused(f"{path}: {problem}")
    classes = set(request.classes)
    unknown = sorted({label for item in found.values() for label in item.labels + tuple(box.label
                                                                                       for box in item.boxes)}
                     - classes)
    if unknown:
        more = f" and {len(unknown) - SHOWN:,} more" if len(unknown) > SHOWN else ""
        raise _refused(f"the {layout} labels use classes the task does not have: {', '.join(unknown[:SHOWN])}{more}")
    return {path: {"labels": list(item.labels), "boxes": [asdict(box) for box in item.boxes]}
            for path, item in found.items()}


def _outside(item: ItemLabels, size: tuple[int, int] | None) -> str | None:
    if size is None:
        return None
    for box in item.boxes:
        if box.x + box.width > size[0] + 0.5 or box.y + box.height > size[1] + 0.5:
            return (f"a {box.label} box ({box.x:g}, {box.y:g}, {box.width:g} × {box.height:g}) passes the edge of the "
                    f"image, which is {size[0]} × {size[1]} pixels")
    return None


def _misfit(kind: str, item: ItemLabels) -> str | None:
    if kind == "boxes":
        return "holds labels of the whole image; a boxes task takes boxes" if item.labels else (
            f"holds {len(item.boxes):,} boxes, over {MAX_BOXES}" if len(item.boxes) > MAX_BOXES else None)
    if item.boxes:
        return f"holds boxes; a {kind} task takes classes"
    if kind != "multilabel" and len(item.labels) > 1:
        return f"holds {len(item.labels)} labels; a {kind} item takes one class"
    return None

"""Exporting a labeling task: a child version of the task's dataset version holding its files and
their labels in a standard layout (`mlyard.annotation.formats`).

An item's labels are those of its accepted annotations where the task has reviewers, else of
its submitted ones; with several annotators, the most given class (ties: the first class of the
task) or, for boxes, the first annotator's; an item with none of them exports its pre-fill, so a
task imported and exported untouched gives back its labels. Image folders relocate the version's own images
under their class (no byte copied); the other layouts add their label files, stored as blobs,
beside the parent's files. The version records the task, its annotators and their agreement in
its statistics (`labeling`) and says so in its message. `label_studio_json` gives the same labels
as Label Studio's JSON export, as a download rather than a version.
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
from collections import Counter
from typing import Any

from sqlalchemy import select

from mlyard.annotation.formats import FORMATS, label_studio
from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels
from mlyard.api.datasets import VersionCreated
from mlyard.api.labeling import ExportRequest
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.services.datasets import access, manifests, versions
from mlyard.server.services.datasets.registration import forget
from mlyard.server.services.labeling.agreement import agreement_of
from mlyard.server.services.labeling.tasks import visible
from mlyard.server.store.dataset_rows import DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.server.store.labeling_rows import AnnotationRow, LabelingItemRow, LabelingTaskRow
from mlyard.storage import BlobStore

LAYOUTS = {"classification": ("imagefolder", "csv"), "multilabel": ("csv",), "boxes": ("coco", "yolo", "voc"),
           "text": ("csv",)}
MAX_DOWNLOAD_BOXES = 1_000_000


def _final(task: LabelingTaskRow, rows: list[AnnotationRow]) -> ItemLabels | None:
    wanted = ("accepted",) if task.review else ("submitted", "accepted")
    kept = sorted((row for row in rows if row.status in wanted), key=lambda row: row.user.name)
    if not kept:
        return None
    path = kept[0].item_path
    if task.kind == "boxes":
        return ItemLabels(path=path, boxes=tuple(Box(**box) for box in kept[0].boxes))
    if task.kind == "multilabel":
        return ItemLabels(path=path, labels=tuple(sorted({label for row in kept for label in row.labels})))
    votes = Counter(label for row in kept for label in row.labels[:1])
    order = {name: index for index, name in enumerate(task.classes)}
    chosen = min(votes, key=lambda label: (-votes[label], order.get(label, len(order))))
    return ItemLabels(path=path, labels=(chosen,))


def final_labels(session, task: LabelingTaskRow) -> tuple[Annotations, list[str], int]:
    """The task's labels as an export takes them: each item's final annotations (see above), else
    its pre-fill; with the annotators who gave them and how many items came from pre-fills."""
    rows: dict[int, list[AnnotationRow]] = {}
    query = (select(AnnotationRow, LabelingItemRow.path).join(LabelingItemRow, LabelingItemRow.id == AnnotationRow.item_id)
             .where(AnnotationRow.task_id == task.id, LabelingItemRow.line.is_(None)))
    for row, path in session.execute(query):
        row.item_path = path
        rows.setdefault(row.item_id, []).append(row)
    items = {found.path: found for found in (_final(task, listed) for listed in rows.values()) if found is not None}
    annotators = sorted({row.user.name for listed in rows.values() for row in listed})
    prefilled = 0
    for path, filled in session.execute(select(LabelingItemRow.path, LabelingItemRow.prefill).where(
            LabelingItemRow.task_id == task.id, LabelingItemRow.line.is_(None),
            LabelingItemRow.prefill.is_not(None))):
        if path not in items:
            items[path] = ItemLabels(path=path, labels=tuple(filled["labels"]),
                                     boxes=tuple(Box(**box) for box in filled["boxes"]))
            prefilled += 1
    # A text task's items carry classes, as classification's do: `text` is the formats' free text.
    kind = "boxes" if task.kind == "boxes" else "classification"
    return Annotations(kind=kind, classes=tuple(task.classes), items=dict(sorted(items.items()))), annotators, prefilled


def _version_files(session, version_id: int) -> list[tuple[str, str, int, str | None]]:
    return [tuple(row) for row in session.execute(
        select(DatasetFileRow.path, DatasetFileRow.digest, DatasetFileRow.size, DatasetFileRow.media_type)
        .where(DatasetFileRow.version_id == version_id).order_by(DatasetFileRow.path))]


def _nothing(task: LabelingTaskRow) -> InvalidRequest:
    return InvalidRequest(f"labeling task {task.id} has no {'accepted' if task.review else 'submitted'} annotation "
                          "and no pre-fill to export", field="task_id")


def export_task(database: Database, store: BlobStore, principal: auth.Principal, task_id: int,
                request: ExportRequest) -> VersionCreated:
    """The child version (members of the project who see the task: its people and managers)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.reading() as session:
        task, _ = visible(session, principal, task_id)
        auth.require_role(principal, task.project, auth.Role.MEMBER, f"export labeling task {task_id}")
        if request.format not in LAYOUTS[task.kind]:
            raise InvalidRequest(f"a {task.kind} task exports as {' or '.join(LAYOUTS[task.kind])}", field="format")
        parent = session.get(DatasetVersionRow, task.version_id)
        dataset = session.get(DatasetRow, parent.dataset_id)
        files = _version_files(session, parent.id)
        annotations, annotators, prefilled = final_labels(session, task)
        if not annotations.items:
            raise _nothing(task)
        agreement = agreement_of(session, task).model_dump()
        names = (task.project, task.name, dataset.project, dataset.name, parent.id, task.classes)
    entries = _entries(store, request.format, annotations, files)
    figures = manifests.statistics(entries, store.path_for)
    figures["labeling"] = {"task": task_id, "name": f"{names[0]}/{names[1]}", "format": request.format,
                           "annotators": annotators, "items": len(annotations.items), "prefilled": prefilled,
                           "agreement": agreement}
    by = f" by {', '.join(annotators)}" if annotators else ""
    message = request.message or (f"labels of task {names[0]}/{names[1]} as {request.format}: "
                                  f"{len(annotations.items):,} items{by}"
                                  + (f", {prefilled:,} as pre-filled" if prefilled else ""))
    try:
        with database.transaction() as session:
            dataset = access.writable(session, principal, names[2], names[3])
            parent = session.get(DatasetVersionRow, names[4])
            row = versions.add_version(session, store, dataset, number=versions.next_number(session, dataset),
                                       parent=parent, message=message, entries=entries, figures=figures,
                                       created_by=principal.user_id, by=principal.name)
            return VersionCreated(version=versions.info(session, dataset, row), created=True)
    except BaseException:  # the label files stored for it alone go (the project's storage limit, say)
        forget(database, store, [entry.digest for entry in entries if entry.media_type is None
                                 or not entry.media_type.startswith("image/")])
        raise


def label_studio_json(database: Database, store: BlobStore, principal: auth.Principal,
                      task_id: int) -> list[dict[str, Any]]:
    """The task's labels (as an export takes them, pre-fills included) as Label Studio's JSON
    export, a task per item; as for an export, members of the project who see the task."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        task, _ = visible(session, principal, task_id)
        auth.require_role(principal, task.project, auth.Role.MEMBER, f"download labeling task {task_id}")
        annotations, _, _ = final_labels(session, task)
        if not annotations.items:
            raise _nothing(task)
        files = _version_files(session, task.version_id)
    boxes = sum(len(item.boxes) for item in annotations.items.values())
    if boxes > MAX_DOWNLOAD_BOXES:
        raise InvalidRequest(f"{boxes:,} boxes; a download holds at most {MAX_DOWNLOAD_BOXES:,}: export the task "
                             "as a version instead", field="task_id")
    _measure(store, annotations, {path: digest for path, digest, _, _ in files})
    try:
        written = label_studio.write(annotations, [path for path, _, _, _ in files])
    except FormatError as error:
        raise InvalidRequest(f"cannot write as Label Studio: {error}", field="task_id") from None
    return json.loads(written[label_studio.OUTPUT])


def _measure(store: BlobStore, annotations: Annotations, digests: dict[str, str]) -> None:
    """Pixel sizes of the images with boxes, from their headers: YOLO's fractions, COCO's images
    and Label Studio's percentages need them."""
    if annotations.kind != "boxes":
        return
    for path in annotations.items:
        header = manifests.image_header(store.path_for(digests[path])) if path in digests else None
        if header is not None:
            annotations.image_sizes[path] = (header[1], header[2])


def _entries(store: BlobStore, layout: str, annotations: Annotations, files) -> list[manifests.Entry]:
    by_path = {path: (digest, size, media) for path, digest, size, media in files}
    writer = FORMATS[layout]
    _measure(store, annotations, {path: digest for path, (digest, _, _) in by_path.items()})
    try:
        written: dict[str, Any] = writer.write(annotations, sorted(by_path))
    except FormatError as error:
        raise InvalidRequest(f"cannot export as {layout}: {error}", field="format") from None
    if layout == "imagefolder":  # a relocation of the version's own files
        listed = {new: by_path[source] for new, source in written.items()}
    else:
        listed = dict(by_path)
        for path, content in written.items():
            digest, size = store.put_stream(iter([content]), expected_digest=hashlib.sha256(content).hexdigest(),
                                            max_bytes=len(content) + 1)
            listed[path] = (digest, size, None)
    return [manifests.Entry(path=path, digest=digest, size=size,
                            media_type=media if media is not None else mimetypes.guess_type(path)[0])
            for path, (digest, size, media) in sorted(listed.items())]

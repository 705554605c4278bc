"""Exporting a labeling task: a child version of the task's dataset version holding its files and
their labels in a standard layout (`mlyard.annotation.formats`).

An item's labels are those of its accepted annotations where the task has reviewers, else of
its submitted ones; with several annotators, the most given class (ties: the first class of the
task) or, for boxes, the first annotator's. Image folders relocate the version's own images
under their class (no byte copied); the other layouts add their label files, stored as blobs,
beside the parent's files. The version records the task, its annotators and their agreement in
its statistics (`labeling`) and says so in its message.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections import Counter
from typing import Any

from sqlalchemy import select

from mlyard.annotation.formats import FORMATS
from mlyard.annotation.model import Annotations, Box, FormatError, ItemLabels
from mlyard.api.datasets import VersionCreated
from mlyard.api.labeling import ExportRequest
from mlyard.errors import InvalidRequest
from mlyard.server import auth
from mlyard.server.services.datasets import access, manifests, versions
from mlyard.server.services.datasets.registration import forget
from mlyard.server.services.labeling.tasks import visible
from mlyard.server.store.dataset_rows import DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.server.store.labeling_rows import AnnotationRow, LabelingItemRow, LabelingTaskRow
from mlyard.storage import BlobStore

LAYOUTS = {"classification": ("imagefolder", "csv"), "multilabel": ("csv",), "boxes": ("coco", "yolo", "voc"),
           "text": ("csv",)}


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


def _annotations(session, task: LabelingTaskRow) -> tuple[Annotations, list[str]]:
    rows: dict[int, list[AnnotationRow]] = {}
    query = (select(AnnotationRow, LabelingItemRow.path).join(LabelingItemRow, LabelingItemRow.id == AnnotationRow.item_id)
             .where(AnnotationRow.task_id == task.id, LabelingItemRow.line.is_(None)))
    for row, path in session.execute(query):
        row.item_path = path
        rows.setdefault(row.item_id, []).append(row)
    items = {found.path: found for found in (_final(task, listed) for listed in rows.values()) if found is not None}
    annotators = sorted({row.user.name for listed in rows.values() for row in listed})
    kind = "boxes" if task.kind == "boxes" else "text" if task.kind == "text" else "classification"
    return Annotations(kind=kind, classes=tuple(task.classes), items=items), annotators


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
        files = session.execute(select(DatasetFileRow.path, DatasetFileRow.digest, DatasetFileRow.size,
                                       DatasetFileRow.media_type).where(DatasetFileRow.version_id == parent.id)
                                .order_by(DatasetFileRow.path)).all()
        annotations, annotators = _annotations(session, task)
        if not annotations.items:
            raise InvalidRequest(f"labeling task {task_id} has no {'accepted' if task.review else 'submitted'} "
                                 "annotation to export", field="task_id")
        names = (task.project, task.name, dataset.project, dataset.name, parent.id, task.classes)
    entries = _entries(store, request.format, annotations, files)
    figures = manifests.statistics(entries, store.path_for)
    figures["labeling"] = {"task": task_id, "name": f"{names[0]}/{names[1]}", "format": request.format,
                           "annotators": annotators, "items": len(annotations.items)}
    message = request.message or (f"labels of task {names[0]}/{names[1]} as {request.format}: "
                                  f"{len(annotations.items):,} items by {', '.join(annotators)}")
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


def _entries(store: BlobStore, layout: str, annotations: Annotations, files) -> list[manifests.Entry]:
    by_path = {path: (digest, size, media) for path, digest, size, media in files}
    writer = FORMATS[layout]
    if annotations.kind == "boxes":  # pixel sizes, from the images' headers: YOLO's fractions, COCO's images
        for path in annotations.items:
            header = manifests.image_header(store.path_for(by_path[path][0])) if path in by_path else None
            if header is not None:
                annotations.image_sizes[path] = (header[1], header[2])
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

"""A labeling task's items and annotations: paging the items, the next one to label, saving an
annotation as it is made, and reviewing.

An annotator sees and saves only their own annotations; reviewers and managers (see `tasks.py`)
see everyone's. An item is done once it holds `annotators_per_item` submitted or accepted
annotations. The next item for an annotator is the first of theirs a reviewer rejected, else the
first they have not submitted that still needs an annotator, in the task's order.
"""

from __future__ import annotations

import time

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mlyard.api.labeling import (
    AnnotationInfo,
    AnnotationRequest,
    Box,
    ItemInfo,
    ItemPage,
    ItemPrefill,
    ReviewRequest,
)
from mlyard.errors import Conflict, Forbidden, InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services.labeling.tasks import DONE_STATUSES, may_manage, visible
from mlyard.server.store.db import Database
from mlyard.server.store.labeling_rows import AnnotationRow, LabelingItemRow, LabelingTaskRow
from mlyard.server.store.rows import UserRow

DEFAULT_PAGE = 100
MAX_PAGE = 1_000


def _annotation(row: AnnotationRow, reviewers: dict[int, str]) -> AnnotationInfo:
    return AnnotationInfo(user=row.user.name, labels=list(row.labels), boxes=[Box(**box) for box in row.boxes],
                          status=row.status, updated_at=row.updated_at, comment=row.comment,
                          reviewed_by=reviewers.get(row.reviewed_by) if row.reviewed_by else None)


def _items(session: Session, principal: auth.Principal, task: LabelingTaskRow, items: list[LabelingItemRow],
           everyone: bool) -> list[ItemInfo]:
    query = select(AnnotationRow).where(AnnotationRow.item_id.in_([item.id for item in items]))
    if not everyone:
        query = query.where(AnnotationRow.user_id == principal.user_id)
    annotations: dict[int, list[AnnotationRow]] = {}
    for row in session.scalars(query.order_by(AnnotationRow.id)):
        annotations.setdefault(row.item_id, []).append(row)
    reviewer_ids = {row.reviewed_by for rows in annotations.values() for row in rows if row.reviewed_by}
    reviewers = dict(session.execute(select(UserRow.id, UserRow.name).where(UserRow.id.in_(reviewer_ids))).all())
    return [ItemInfo(id=item.id, position=item.position, path=item.path, line=item.line,
                     annotations=[_annotation(row, reviewers) for row in annotations.get(item.id, [])],
                     prefill=None if item.prefill is None else ItemPrefill(
                         labels=list(item.prefill["labels"]), boxes=[Box(**box) for box in item.prefill["boxes"]]))
            for item in items]


def list_items(database: Database, principal: auth.Principal, task_id: int, *, after: int | None = None,
               limit: int = DEFAULT_PAGE, mine_only: bool = False, status: str | None = None) -> ItemPage:
    """The task's items in order, from the position after `after`, with the annotations the caller
    may see (`mine_only`: their own, as an annotator's page wants even where they also review);
    `status`: only items holding an annotation in that state (a review page's `submitted`)."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        task, roles = visible(session, principal, task_id)
        query = select(LabelingItemRow).where(LabelingItemRow.task_id == task.id)
        if after is not None:
            query = query.where(LabelingItemRow.position > after)
        if status is not None:
            query = query.where(LabelingItemRow.id.in_(select(AnnotationRow.item_id).where(
                AnnotationRow.task_id == task.id, AnnotationRow.status == status)))
        items = list(session.scalars(query.order_by(LabelingItemRow.position).limit(limit + 1)))
        more = len(items) > limit
        items = items[:limit]
        everyone = not mine_only and ("reviewer" in roles or may_manage(principal, task))
        return ItemPage(items=_items(session, principal, task, items, everyone),
                        next_after=items[-1].position if more else None)


def next_item(database: Database, principal: auth.Principal, task_id: int) -> ItemInfo | None:
    """What the annotator labels next; None when nothing is left for them."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        task, roles = visible(session, principal, task_id)
        if "annotator" not in roles:
            raise Forbidden(f"{principal.name} does not annotate labeling task {task_id}", field="task_id")
        rejected = session.scalar(
            select(LabelingItemRow).join(AnnotationRow, AnnotationRow.item_id == LabelingItemRow.id)
            .where(AnnotationRow.task_id == task.id, AnnotationRow.user_id == principal.user_id,
                   AnnotationRow.status == "rejected").order_by(LabelingItemRow.position).limit(1))
        item = rejected if rejected is not None else session.scalar(_open_for(task, principal).limit(1))
        return _items(session, principal, task, [item], everyone=False)[0] if item is not None else None


def _open_for(task: LabelingTaskRow, principal: auth.Principal):
    """The items the annotator has not submitted that still want an annotator, in order."""
    theirs = select(AnnotationRow.item_id).where(AnnotationRow.task_id == task.id,
                                                 AnnotationRow.user_id == principal.user_id,
                                                 AnnotationRow.status != "draft")
    full = (select(AnnotationRow.item_id).where(AnnotationRow.task_id == task.id,
                                                AnnotationRow.status.in_(DONE_STATUSES))
            .group_by(AnnotationRow.item_id).having(func.count() >= task.annotators_per_item))
    return (select(LabelingItemRow).where(LabelingItemRow.task_id == task.id, LabelingItemRow.id.not_in(theirs),
                                          LabelingItemRow.id.not_in(full))
            .order_by(LabelingItemRow.position))


def _check(task: LabelingTaskRow, request: AnnotationRequest) -> None:
    classes = set(task.classes)
    unknown = sorted({label for label in request.labels if label not in classes}
                     | {box.label for box in request.boxes if box.label not in classes})
    if unknown:
        raise InvalidRequest(f"{', '.join(unknown)}: not a class of the task ({', '.join(task.classes)})",
                             field="labels")
    if task.kind in ("classification", "text") and request.status == "submitted" and len(request.labels) != 1:
        raise InvalidRequest(f"a {task.kind} item takes one class", field="labels")
    if task.kind != "boxes" and request.boxes:
        raise InvalidRequest(f"a {task.kind} task takes no boxes", field="boxes")


def save_annotation(database: Database, principal: auth.Principal, task_id: int, item_id: int,
                    request: AnnotationRequest) -> AnnotationInfo:
    """The caller's annotation of the item, made or replaced; an accepted one is final."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        task, roles = visible(session, principal, task_id)
        if "annotator" not in roles:
            raise Forbidden(f"{principal.name} does not annotate labeling task {task_id}", field="task_id")
        item = session.get(LabelingItemRow, item_id)
        if item is None or item.task_id != task.id:
            raise NotFound(f"labeling task {task_id} has no item {item_id}", field="item_id")
        _check(task, request)
        row = session.scalar(select(AnnotationRow).where(AnnotationRow.item_id == item.id,
                                                         AnnotationRow.user_id == principal.user_id)
                             .with_for_update(of=AnnotationRow))
        if row is not None and row.status == "accepted":
            raise Conflict("a reviewer accepted this annotation; it is final", field="item_id")
        if row is None:
            row = AnnotationRow(task_id=task.id, item_id=item.id, user_id=principal.user_id, comment="")
            session.add(row)
        row.labels, row.boxes = list(request.labels), [box.model_dump() for box in request.boxes]
        row.status, row.updated_at = request.status, time.time()
        session.flush()
        session.refresh(row)
        return _annotation(row, {})


def review(database: Database, principal: auth.Principal, task_id: int, item_id: int,
           request: ReviewRequest) -> AnnotationInfo:
    """Accepts an annotator's submitted annotation, or rejects it back to them with a comment."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        task, roles = visible(session, principal, task_id)
        if "reviewer" not in roles and not may_manage(principal, task):
            raise Forbidden(f"{principal.name} does not review labeling task {task_id}", field="task_id")
        row = session.scalar(select(AnnotationRow).join(UserRow, UserRow.id == AnnotationRow.user_id)
                             .where(AnnotationRow.task_id == task.id, AnnotationRow.item_id == item_id,
                                    UserRow.name == request.annotator).with_for_update(of=AnnotationRow))
        if row is None or row.status == "draft":
            raise NotFound(f"{request.annotator} has submitted no annotation of item {item_id}", field="annotator")
        if not request.accept and not request.comment.strip():
            raise InvalidRequest("a rejection says what to change", field="comment")
        row.status = "accepted" if request.accept else "rejected"
        row.comment, row.reviewed_by, row.reviewed_at = request.comment, principal.user_id, time.time()
        session.flush()
        return _annotation(row, {principal.user_id: principal.name})

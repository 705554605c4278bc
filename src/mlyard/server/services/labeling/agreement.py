"""How far a labeling task's annotators agree: `mlyard.annotation.agreement`'s measures over
their submitted and accepted annotations (drafts and rejected ones are not their answer).

An item's category is its class (classification, text), or its set of classes taken as one
category (multilabel). Boxes are not compared: their figures are None, with a note.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.annotation.agreement import (
    AgreementError,
    class_agreement,
    cohen_kappa,
    fleiss_kappa,
    majority_agreement,
    percent_agreement,
)
from mlyard.api.labeling import TaskAgreement
from mlyard.server import auth
from mlyard.server.services.labeling.tasks import DONE_STATUSES, visible
from mlyard.server.store.db import Database
from mlyard.server.store.labeling_rows import AnnotationRow, LabelingTaskRow
from mlyard.server.store.rows import UserRow


def task_agreement(database: Database, principal: auth.Principal, task_id: int) -> TaskAgreement:
    """The task's agreement figures (whoever sees the task)."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        task, _ = visible(session, principal, task_id)
        return agreement_of(session, task)


def agreement_of(session: Session, task: LabelingTaskRow) -> TaskAgreement:
    query = (select(AnnotationRow.item_id, UserRow.name, AnnotationRow.labels)
             .join(UserRow, UserRow.id == AnnotationRow.user_id)
             .where(AnnotationRow.task_id == task.id, AnnotationRow.status.in_(DONE_STATUSES)))
    annotators: set[str] = set()
    ratings: dict[str, dict[str, str]] = {}
    for item_id, user, labels in session.execute(query):
        annotators.add(user)
        if labels and task.kind != "boxes":
            category = ";".join(sorted(labels)) if task.kind == "multilabel" else labels[0]
            ratings.setdefault(str(item_id), {})[user] = category
    compared = sum(1 for by_annotator in ratings.values() if len(by_annotator) >= 2)
    if task.kind == "boxes":
        return TaskAgreement(annotators=sorted(annotators), items_compared=0, percent=None, kappa=None,
                             kappa_kind=None, per_class={}, per_annotator={name: None for name in sorted(annotators)},
                             note="agreement is measured on classes, not on boxes")
    rated = {name for by_annotator in ratings.values() for name in by_annotator}
    kind = "cohen" if len(rated) == 2 else "fleiss" if len(rated) > 2 else None
    notes = []
    try:
        kappa = cohen_kappa(ratings) if kind == "cohen" else fleiss_kappa(ratings) if kind else None
    except AgreementError as error:  # scikit-learn missing: the other figures stand
        kappa, kind = None, None
        notes.append(str(error))
    if task.kind == "multilabel":
        notes.append("an item's set of classes is compared as one category")
    if not compared:
        notes.append("no item has two annotators' labels yet")
    per_annotator = majority_agreement(ratings)
    return TaskAgreement(annotators=sorted(annotators), items_compared=compared, percent=percent_agreement(ratings),
                         kappa=kappa, kappa_kind=kind, per_class=class_agreement(ratings),
                         per_annotator={name: per_annotator.get(name) for name in sorted(annotators)},
                         note="; ".join(notes) or None)

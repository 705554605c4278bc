"""Labeling tasks: made on a dataset version by a member of the dataset's project, worked on by
annotators and reviewers who are members of it too.

Who sees a task: whoever made it, the project's maintainers and administrators (all of the
project's tasks), and its annotators and reviewers (theirs only); a viewer of the project, or a
member it was not given to, is told none exists. The items are fixed when the task is made: the
version's images for image tasks, its .txt files and the lines of its .jsonl files for text.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from mlyard.api.datasets import version_name
from mlyard.api.labeling import MAX_ITEMS, MAX_LINES_PER_FILE, TaskInfo, TaskRequest
from mlyard.errors import Conflict, InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services.datasets import access, aliases
from mlyard.server.services.labeling import prefill
from mlyard.server.store.dataset_rows import DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.server.store.labeling_rows import AnnotationRow, LabelingItemRow, LabelingMemberRow, LabelingTaskRow
from mlyard.server.store.rows import ProjectMemberRow, UserRow
from mlyard.storage import BlobStore

MAX_JSONL_BYTES = 64 * 1024 * 1024
DONE_STATUSES = ("submitted", "accepted")
CHUNK = 500
"""Tasks whose figures one round of grouped queries gathers (an IN list's length)."""


def _missing(task_id: int) -> NotFound:
    return NotFound(f"labeling task {task_id} does not exist (or is not yours to see)", field="task_id")


def may_manage(principal: auth.Principal, task: LabelingTaskRow) -> bool:
    role = principal.role_in(task.project)
    return principal.job_id is None and (task.created_by == principal.user_id and role is not None
                                         or role is not None and role >= auth.Role.MAINTAINER)


def roles_of(session: Session, principal: auth.Principal, task_id: int) -> set[str]:
    if principal.user_id is None or principal.job_id is not None:
        return set()
    return set(session.scalars(select(LabelingMemberRow.role).where(
        LabelingMemberRow.task_id == task_id, LabelingMemberRow.user_id == principal.user_id)))


def visible(session: Session, principal: auth.Principal, task_id: int) -> tuple[LabelingTaskRow, set[str]]:
    """The task and the caller's roles in it, if the caller may see it."""
    task = session.get(LabelingTaskRow, task_id)
    if task is None:
        raise _missing(task_id)
    roles = roles_of(session, principal, task_id)
    if not roles and not may_manage(principal, task):
        raise _missing(task_id)
    return task, roles


def info(session: Session, principal: auth.Principal, task: LabelingTaskRow) -> TaskInfo:
    return infos(session, principal, [task])[0]


def infos(session: Session, principal: auth.Principal, tasks: list[LabelingTaskRow]) -> list[TaskInfo]:
    """Each task's TaskInfo, from a few grouped queries per `CHUNK` tasks (not several per task)."""
    found: list[TaskInfo] = []
    for start in range(0, len(tasks), CHUNK):
        found += _infos(session, principal, tasks[start:start + CHUNK])
    return found


def _counted(session: Session, query) -> dict[int, int]:
    return {task_id: count for task_id, count in session.execute(query)}


def _infos(session: Session, principal: auth.Principal, tasks: list[LabelingTaskRow]) -> list[TaskInfo]:
    ids = [task.id for task in tasks]
    versions = {version_id: (number, name) for version_id, number, name in session.execute(
        select(DatasetVersionRow.id, DatasetVersionRow.number, DatasetRow.name)
        .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
        .where(DatasetVersionRow.id.in_({task.version_id for task in tasks})))}
    members: dict[int, list[tuple[str, str]]] = {}
    for task_id, name, role in session.execute(
            select(LabelingMemberRow.task_id, UserRow.name, LabelingMemberRow.role)
            .join(UserRow, UserRow.id == LabelingMemberRow.user_id)
            .where(LabelingMemberRow.task_id.in_(ids)).order_by(UserRow.name)):
        members.setdefault(task_id, []).append((name, role))
    # count(prefill) counts the items whose pre-fill is not NULL: both figures from one scan.
    counts = {task_id: (items, filled) for task_id, items, filled in session.execute(
        select(LabelingItemRow.task_id, func.count(), func.count(LabelingItemRow.prefill))
        .where(LabelingItemRow.task_id.in_(ids)).group_by(LabelingItemRow.task_id))}
    finished = (select(AnnotationRow.task_id)
                .join(LabelingTaskRow, LabelingTaskRow.id == AnnotationRow.task_id)
                .where(AnnotationRow.task_id.in_(ids), AnnotationRow.status.in_(DONE_STATUSES))
                .group_by(AnnotationRow.task_id, AnnotationRow.item_id, LabelingTaskRow.annotators_per_item)
                .having(func.count() >= LabelingTaskRow.annotators_per_item).subquery())
    done = _counted(session, select(finished.c.task_id, func.count()).group_by(finished.c.task_id))
    mine = _counted(session, select(AnnotationRow.task_id, func.count())
                    .where(AnnotationRow.task_id.in_(ids), AnnotationRow.user_id == principal.user_id,
                           AnnotationRow.status != "draft").group_by(AnnotationRow.task_id))
    found = []
    for task in tasks:
        people = members.get(task.id, [])
        number, dataset = versions[task.version_id]
        annotates = any(role == "annotator" and name == principal.name for name, role in people)
        found.append(TaskInfo(
            id=task.id, project=task.project, name=task.name, dataset=dataset, version=version_name(number),
            kind=task.kind, classes=list(task.classes),
            annotators=[name for name, role in people if role == "annotator"],
            reviewers=[name for name, role in people if role == "reviewer"],
            annotators_per_item=task.annotators_per_item, instructions=task.instructions,
            created_by=task.creator.name if task.creator else None, created_at=task.created_at,
            items=counts.get(task.id, (0, 0))[0], done=done.get(task.id, 0),
            mine=mine.get(task.id, 0) if annotates else None, prefilled=counts.get(task.id, (0, 0))[1]))
    return found


def _member_ids(session: Session, project: str, names: Iterable[str], field: str) -> dict[str, int]:
    """Users by name who are members (and up) of the project: a viewer cannot annotate."""
    wanted = sorted(set(names))
    found = dict(session.execute(
        select(UserRow.name, UserRow.id).join(ProjectMemberRow, ProjectMemberRow.user_id == UserRow.id)
        .where(UserRow.name.in_(wanted), ProjectMemberRow.project == project,
               ProjectMemberRow.role.in_([role.label for role in auth.Role if role >= auth.Role.MEMBER]))).all())
    if missing := [name for name in wanted if name not in found]:
        raise InvalidRequest(f"{', '.join(missing)}: not a member of project {project!r}; labeling needs the member "
                             "role or above", field=field)
    return found


def _files(session: Session, version_id: int) -> list[tuple[str, str, int, str | None]]:
    return [tuple(row) for row in session.execute(
        select(DatasetFileRow.path, DatasetFileRow.digest, DatasetFileRow.size, DatasetFileRow.media_type)
        .where(DatasetFileRow.version_id == version_id).order_by(DatasetFileRow.path))]


def _items(store: BlobStore, kind: str, files: list[tuple[str, str, int, str | None]]) -> list[tuple[str, int | None]]:
    """The items of a task of `kind` over the version's files; reads .jsonl files, so it runs
    outside any transaction."""
    if kind != "text":
        return [(path, None) for path, _, _, media in files if (media or "").startswith("image/")]
    items: list[tuple[str, int | None]] = []
    for path, digest, size, _ in files:
        lower = path.lower()
        if lower.endswith(".txt"):
            items.append((path, None))
        elif lower.endswith(".jsonl") and size <= MAX_JSONL_BYTES:
            with open(store.path_for(digest), "rb") as handle:
                count = sum(1 for line in handle if line.strip())
            items += [(path, line) for line in range(min(count, MAX_LINES_PER_FILE))]
    return items


def create_task(database: Database, store: BlobStore, principal: auth.Principal, request: TaskRequest) -> TaskInfo:
    auth.authorize(principal, auth.Action.WRITE)
    with database.reading() as session:
        dataset = access.readable(session, principal, request.project, request.dataset)
        auth.require_role(principal, request.project, auth.Role.MEMBER,
                          f"make labeling tasks in project {request.project!r}")
        version = aliases.resolve(session, dataset, request.version)
        version_id, number = version.id, version.number
        files = _files(session, version_id)
    items = _items(store, request.kind, files)
    prefills = prefill.read_prefill(store, request, files, items) if request.prefill is not None else {}
    try:
        with database.transaction() as session:
            version = session.get(DatasetVersionRow, version_id)
            if version is None:
                raise NotFound(f"{request.dataset}:{version_name(number)} was removed meanwhile", field="version")
            if session.scalar(select(LabelingTaskRow.id).where(LabelingTaskRow.project == request.project,
                                                               LabelingTaskRow.name == request.name)):
                raise Conflict(f"labeling task {request.project}/{request.name} exists", field="name")
            annotators = _member_ids(session, request.project, request.annotators, "annotators")
            reviewers = _member_ids(session, request.project, request.reviewers, "reviewers")
            if not items:
                raise InvalidRequest(f"{request.dataset}:{version_name(version.number)} holds nothing to label as "
                                     f"{request.kind} ({'.txt or .jsonl files' if request.kind == 'text' else 'images'})",
                                     field="kind")
            if len(items) > MAX_ITEMS:
                raise InvalidRequest(f"{len(items):,} items; a task holds at most {MAX_ITEMS:,}", field="dataset")
            task = LabelingTaskRow(project=request.project, name=request.name, version_id=version.id,
                                   kind=request.kind, classes=list(request.classes),
                                   annotators_per_item=request.annotators_per_item, review=bool(reviewers),
                                   instructions=request.instructions, created_by=principal.user_id,
                                   created_at=time.time())
            session.add(task)
            session.flush()
            session.add_all([LabelingMemberRow(task_id=task.id, user_id=user_id, role="annotator")
                             for user_id in annotators.values()]
                            + [LabelingMemberRow(task_id=task.id, user_id=user_id, role="reviewer")
                               for user_id in reviewers.values()])
            session.execute(LabelingItemRow.__table__.insert(), [
                {"task_id": task.id, "position": position, "path": path, "line": line,
                 "prefill": prefills.get(path) if line is None else None}
                for position, (path, line) in enumerate(items)])
            session.flush()
            return info(session, principal, task)
    except IntegrityError as error:
        raise Conflict(f"labeling task {request.project}/{request.name} exists", field="name") from error


def list_tasks(database: Database, principal: auth.Principal, *, project: str | None = None) -> list[TaskInfo]:
    """The tasks the caller works on, and those they manage."""
    auth.authorize(principal, auth.Action.READ)
    if principal.job_id is not None or principal.user_id is None:
        return []
    with database.reading() as session:
        query = select(LabelingTaskRow).order_by(LabelingTaskRow.project, LabelingTaskRow.name)
        if not principal.is_admin:
            managed = sorted(name for name, role in principal.roles.items() if role >= auth.Role.MAINTAINER)
            assigned = select(LabelingMemberRow.task_id).where(LabelingMemberRow.user_id == principal.user_id)
            query = query.where(or_(LabelingTaskRow.id.in_(assigned), LabelingTaskRow.project.in_(managed),
                                    LabelingTaskRow.created_by == principal.user_id))
        if project is not None:
            query = query.where(LabelingTaskRow.project == project)
        return infos(session, principal, list(session.scalars(query)))


def get_task(database: Database, principal: auth.Principal, task_id: int) -> TaskInfo:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        task, _ = visible(session, principal, task_id)
        return info(session, principal, task)

"""Labeling tasks, their items and annotations (`services/labeling/`)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status

from mlyard.api.errors import ErrorBody
from mlyard.api.datasets import VersionCreated
from mlyard.api.labeling import (
    AnnotationInfo,
    AnnotationRequest,
    ExportRequest,
    ItemInfo,
    ItemPage,
    ReviewRequest,
    TaskAgreement,
    TaskInfo,
    TaskRequest,
)
from mlyard.server.routers.dependencies import DatabaseDependency, PrincipalDependency
from mlyard.server.services.labeling import agreement, export, items, tasks
from mlyard.spec import NAME_PATTERN

router = APIRouter(prefix="/labeling", tags=["labeling"])
TaskId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the task's id")]
ItemId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the item's id")]
ERRORS = {401: {"model": ErrorBody}, 403: {"model": ErrorBody}, 404: {"model": ErrorBody}, 413: {"model": ErrorBody},
          422: {"model": ErrorBody}}
TASK = "/tasks/{task_id}"


@router.post("/tasks", response_model=TaskInfo, status_code=status.HTTP_201_CREATED,
             responses={**ERRORS, 409: {"model": ErrorBody}})
def create_task(request: TaskRequest, http: Request, database: DatabaseDependency,
                caller: PrincipalDependency) -> TaskInfo:
    """A labeling task on a dataset version (members of the dataset's project), its items fixed now."""
    return tasks.create_task(database, http.app.state.blobs, caller, request)


@router.get("/tasks", response_model=list[TaskInfo], responses=ERRORS)
def list_tasks(database: DatabaseDependency, caller: PrincipalDependency,
               project: Annotated[str | None, Query(pattern=NAME_PATTERN)] = None) -> list[TaskInfo]:
    """The tasks the caller annotates or reviews, and those they manage, with their progress."""
    return tasks.list_tasks(database, caller, project=project)


@router.get(TASK, response_model=TaskInfo, responses=ERRORS)
def get_task(task_id: TaskId, database: DatabaseDependency, caller: PrincipalDependency) -> TaskInfo:
    return tasks.get_task(database, caller, task_id)


@router.get(TASK + "/items", response_model=ItemPage, responses=ERRORS)
def list_items(task_id: TaskId, database: DatabaseDependency, caller: PrincipalDependency,
               after: Annotated[int | None, Query(ge=-1, le=2**31 - 1, description="the next_after of the previous "
                                                  "page")] = None,
               limit: Annotated[int, Query(ge=1, le=items.MAX_PAGE)] = items.DEFAULT_PAGE) -> ItemPage:
    return items.list_items(database, caller, task_id, after=after, limit=limit)


@router.get(TASK + "/next", response_model=ItemInfo, responses={**ERRORS, 204: {"description": "nothing left"}})
def next_item(task_id: TaskId, database: DatabaseDependency, caller: PrincipalDependency) -> ItemInfo | Response:
    """The item the caller labels next (a rejected one of theirs first); 204 when none is left."""
    found = items.next_item(database, caller, task_id)
    return found if found is not None else Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put(TASK + "/items/{item_id}/annotation", response_model=AnnotationInfo,
            responses={**ERRORS, 409: {"model": ErrorBody}})
def save_annotation(task_id: TaskId, item_id: ItemId, request: AnnotationRequest, database: DatabaseDependency,
                    caller: PrincipalDependency) -> AnnotationInfo:
    """The caller's labels of the item, saved as they are made (`draft`) or submitted."""
    return items.save_annotation(database, caller, task_id, item_id, request)


@router.post(TASK + "/items/{item_id}/review", response_model=AnnotationInfo, responses=ERRORS)
def review(task_id: TaskId, item_id: ItemId, request: ReviewRequest, database: DatabaseDependency,
           caller: PrincipalDependency) -> AnnotationInfo:
    """Accepts an annotator's annotation of the item, or rejects it back to them with a comment."""
    return items.review(database, caller, task_id, item_id, request)


@router.post(TASK + "/export", response_model=VersionCreated, status_code=status.HTTP_201_CREATED, responses=ERRORS)
def export_task(task_id: TaskId, request: ExportRequest, http: Request, database: DatabaseDependency,
                caller: PrincipalDependency) -> VersionCreated:
    """A child version of the task's dataset version with its labels in a standard layout."""
    return export.export_task(database, http.app.state.blobs, caller, task_id, request)


@router.get(TASK + "/agreement", response_model=TaskAgreement, responses=ERRORS)
def get_agreement(task_id: TaskId, database: DatabaseDependency, caller: PrincipalDependency) -> TaskAgreement:
    """How far the task's annotators agree, over their submitted and accepted annotations."""
    return agreement.task_agreement(database, caller, task_id)


@router.get(TASK + "/label-studio", response_class=Response, responses={
    **ERRORS, 200: {"description": "Label Studio's JSON export, a task per item",
                    "content": {"application/json": {"schema": {"type": "array", "items": {"type": "object"}}}}}})
def label_studio(task_id: TaskId, http: Request, database: DatabaseDependency, caller: PrincipalDependency) -> Response:
    """The task's labels (pre-fills included, as an export takes them) as a Label Studio JSON file."""
    tasks_json = export.label_studio_json(database, http.app.state.blobs, caller, task_id)
    return Response(content=json.dumps(tasks_json, ensure_ascii=False).encode(), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="labeling-task-{task_id}.label-studio.json"',
                             "Cache-Control": "no-store"})

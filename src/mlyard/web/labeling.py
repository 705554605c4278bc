"""The Labeling pages: the tasks the user works on or manages (`/labeling`) with a form that makes
one, and a task's page (`/labeling/{id}`) with its progress, its annotators' agreement, the
export to a child version and the Label Studio JSON download. Labeling itself and reviewing are
in `web/labeling_work.py`.

As everywhere in the web UI, reads and actions go through the service (`services.labeling`) with
the page's principal, so a page shows and does exactly what its user may; a link left out only
spares a refusal."""

from __future__ import annotations

import json
from typing import Annotated
from urllib.parse import parse_qs

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from pydantic import ValidationError
from starlette.responses import Response

from mlyard.api.labeling import ExportRequest, TaskInfo, TaskRequest
from mlyard.errors import InvalidRequest, MlyardError
from mlyard.server import auth
from mlyard.server.services.labeling import agreement, export, tasks
from mlyard.web.data import dataset_url, markdown
from mlyard.web.session import MAX_CHANGE_BYTES, MAX_FORM_BYTES, ChangingPrincipal, PagePrincipal
from mlyard.web.templating import page

router = APIRouter(include_in_schema=False)

TaskId = Annotated[int, Path(ge=1, le=2**31 - 1)]
"""The column's range: PostgreSQL refuses to compare an INTEGER with a larger number."""
KINDS = {"classification": "Image classification (one class)", "multilabel": "Image classification (several classes)",
         "boxes": "Bounding boxes", "text": "Text classification (.txt files, .jsonl lines)"}
FORMATS = {"imagefolder": "ImageFolder", "csv": "CSV", "coco": "COCO JSON", "yolo": "YOLO", "voc": "Pascal VOC"}


def task_url(task_id: int) -> str:
    return f"/labeling/{task_id}"


def _error(request: Request, error: MlyardError, principal: auth.Principal) -> Response:
    return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                nav="labeling")


def _fields(body: bytes, limit: int = MAX_FORM_BYTES) -> dict[str, list[str]]:
    """A form's fields; one larger than `limit` is refused rather than cut (its last field would
    be stored cut short)."""
    if len(body) > limit:
        raise InvalidRequest(f"the form is over {limit // 1024} KiB: shorten the instructions or the classes",
                             field="form")
    return parse_qs(body.decode("utf-8", errors="replace"))


def _names(text: str) -> list[str]:
    """A list typed as `a, b` or one per line."""
    return [part.strip() for line in text.splitlines() for part in line.split(",") if part.strip()]


def roles(task: TaskInfo, principal: auth.Principal) -> dict[str, bool]:
    """What the user does on the task, for links only (the service decides)."""
    role = principal.role_in(task.project)
    manages = principal.job_id is None and role is not None and (
        role >= auth.Role.MAINTAINER or task.created_by == principal.name)
    return {"annotates": principal.name in task.annotators,
            "reviews": principal.name in task.reviewers or manages,
            "exports": role is not None and role >= auth.Role.MEMBER and principal.job_id is None}


def percent(done: int, total: int) -> float:
    return round(100 * done / total, 1) if total else 0.0


@router.get("/labeling")
def tasks_page(request: Request, principal: PagePrincipal) -> Response:
    """The user's tasks with their progress, and the form that makes one."""
    try:
        listing = tasks.list_tasks(request.app.state.database, principal)
    except MlyardError as error:
        return _error(request, error, principal)
    projects = sorted(name for name, role in principal.roles.items() if role >= auth.Role.MEMBER)
    return page(request, "labeling.html", nav="labeling", principal=principal,
                tasks=[(task, roles(task, principal)) for task in listing], projects=projects, kinds=KINDS,
                percent=percent, form={}, problem=None)


def _task_request(fields: dict[str, list[str]]) -> TaskRequest:
    one = {key: values[0].strip() for key, values in fields.items() if values}
    data = {"name": one.get("name", ""), "project": one.get("project") or "default",
            "dataset": one.get("dataset", ""), "version": one.get("version") or "latest",
            "kind": one.get("kind", ""), "classes": _names(one.get("classes", "")),
            "annotators": _names(one.get("annotators", "")), "reviewers": _names(one.get("reviewers", "")),
            "annotators_per_item": one.get("annotators_per_item") or 1,
            "instructions": fields.get("instructions", [""])[0]}
    if one.get("prefill"):
        data["prefill"] = {"format": one["prefill"]}
    try:
        return TaskRequest.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "form"
        raise InvalidRequest(f"{where}: {first['msg']}", field=where) from None


@router.post("/labeling")
async def create_task(request: Request, principal: ChangingPrincipal) -> Response:
    """Makes a task from the form; on a refusal, the form again with what was typed and why.
    Making one reads files (a text task's .jsonl, pre-filled labels): in a thread, not the loop."""
    fields: dict[str, list[str]] = {}
    try:
        fields = _fields(await request.body(), MAX_CHANGE_BYTES)
        made = await run_in_threadpool(tasks.create_task, request.app.state.database, request.app.state.blobs,
                                       principal, _task_request(fields))
    except MlyardError as error:
        try:
            listing = await run_in_threadpool(tasks.list_tasks, request.app.state.database, principal)
        except MlyardError:
            listing = []
        projects = sorted(name for name, role in principal.roles.items() if role >= auth.Role.MEMBER)
        return page(request, "labeling.html", status_code=error.http_status, nav="labeling", principal=principal,
                    tasks=[(task, roles(task, principal)) for task in listing], projects=projects, kinds=KINDS,
                    percent=percent, form={key: values[0] for key, values in fields.items() if values},
                    problem=error)
    return RedirectResponse(task_url(made.id), status_code=status.HTTP_303_SEE_OTHER)


@router.get("/labeling/{task_id}")
def task_page(request: Request, principal: PagePrincipal, task_id: TaskId,
              notice: Annotated[str, Query(max_length=40)] = "") -> Response:
    """A task: progress, agreement, who works on it, export and download."""
    database = request.app.state.database
    try:
        task = tasks.get_task(database, principal, task_id)
        agreed = agreement.task_agreement(database, principal, task_id)
    except MlyardError as error:
        return _error(request, error, principal)
    return page(request, "labeling_task.html", nav="labeling", principal=principal, task=task, agreed=agreed,
                can=roles(task, principal), percent=percent, kinds=KINDS, instructions=markdown(task.instructions),
                formats=[(name, FORMATS[name]) for name in export.LAYOUTS[task.kind]],
                version_page=f"{dataset_url(task.project, task.dataset)}?version={task.version}",
                notice="Exported." if notice == "exported" else "")


@router.post("/labeling/{task_id}/export")
async def export_task(request: Request, principal: ChangingPrincipal, task_id: TaskId) -> Response:
    """A child version with the task's labels; lands on it. Export writes blobs and measures the
    version: in a thread, not the loop."""
    database = request.app.state.database
    try:
        fields = _fields(await request.body())
        wanted = ExportRequest(format=(fields.get("format") or [""])[0],
                               message=(fields.get("message") or [""])[0][:1000])
        made = await run_in_threadpool(export.export_task, database, request.app.state.blobs, principal, task_id,
                                       wanted)
        task = await run_in_threadpool(tasks.get_task, database, principal, task_id)
    except ValidationError:
        return _error(request, InvalidRequest("choose one of the formats listed", field="format"), principal)
    except MlyardError as error:
        return _error(request, error, principal)
    return RedirectResponse(f"{dataset_url(task.project, task.dataset)}?version={made.version.version}",
                            status_code=status.HTTP_303_SEE_OTHER)


@router.get("/labeling/{task_id}/label-studio.json")
def label_studio(request: Request, principal: PagePrincipal, task_id: TaskId) -> Response:
    """Label Studio's JSON export of the task's labels, as a download."""
    try:
        listing = export.label_studio_json(request.app.state.database, request.app.state.blobs, principal, task_id)
    except MlyardError as error:
        return _error(request, error, principal)
    return Response(json.dumps(listing, indent=1), media_type="application/json", headers={
        "Content-Disposition": f'attachment; filename="labeling-task-{task_id}-label-studio.json"',
        "Cache-Control": "no-store"})

"""Labeling and reviewing in the browser.

`/labeling/{id}/annotate` is a page that `static/labeling.js` drives through the small JSON
routes below: the next item to label, an item by its position (previous and next in order, and
the one after the current loaded ahead of time), and saving an annotation as it is made. Those
routes answer with the service's own models plus what the page needs to draw an item: where its
image is (the Data pages' thumbnail route, at the largest size: a PNG of the decoded image, never
the uploaded bytes), the image's size in pixels (boxes are stored in the original's pixels), or
its text (bounded). `/labeling/{id}/review` lists items with their annotations, each with Accept
and Reject (with a comment) for reviewers and the task's managers.

Errors of the JSON routes are JSON (`{"error", "field"}`) with the service's status, so the page
can say what went wrong where the user looks."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse
from pydantic import ValidationError
from starlette.responses import Response

from mlyard.api.labeling import AnnotationRequest, ItemInfo, ReviewRequest, TaskInfo
from mlyard.errors import Conflict, InvalidRequest, MlyardError, NotFound
from mlyard.server import auth
from mlyard.server.services.datasets import manifests, versions
from mlyard.server.services.labeling import items, tasks
from mlyard.web import data_thumbnails
from mlyard.web.data import dataset_url
from mlyard.web.labeling import TaskId, percent, roles, task_url
from mlyard.web.session import MAX_CHANGE_BYTES, ChangingPrincipal, PagePrincipal
from mlyard.web.templating import page

router = APIRouter(include_in_schema=False)

ItemId = Annotated[int, Path(ge=1, le=2**31 - 1)]
IMAGE_SIZE = 1024
"""The largest the thumbnail route makes: a laptop screen's labeling area."""
MAX_TEXT_CHARS = 20_000
"""Of a text item shown: enough to classify, bounded against a 64 MiB file."""
MAX_BODY_BYTES = 256 * 1024
"""An annotation: 500 boxes of a few dozen bytes each, with room."""
REVIEW_PAGE = 50
MAX_PARSED_LINE = 1024 * 1024
"""A .jsonl line longer than this is shown as its text, not parsed for its `text` field."""
EXCERPT_CHARS = 300
MAX_EXCERPT_FILE = 4 * 1024 * 1024
"""The review page reads a text item's file for its excerpt only up to this size."""


def _json_error(error: MlyardError) -> JSONResponse:
    return JSONResponse({"error": error.message, "field": error.field}, status_code=error.http_status,
                        headers={"Cache-Control": "no-store"})


def _image_size(request: Request, principal: auth.Principal, task: TaskInfo, path: str) -> tuple[int, int] | None:
    blob, _ = versions.file_blob(request.app.state.database, request.app.state.blobs, principal, task.project,
                                 task.dataset, task.version, path)
    header = manifests.image_header(blob)
    return (header[1], header[2]) if header else None


def _text(request: Request, principal: auth.Principal, task: TaskInfo, item: ItemInfo) -> str:
    """A .txt file's text, or the `text` of a .jsonl line (the whole line where it has none)."""
    blob, _ = versions.file_blob(request.app.state.database, request.app.state.blobs, principal, task.project,
                                 task.dataset, task.version, item.path)
    with open(blob, "rb") as handle:
        if item.line is None:
            return handle.read(MAX_TEXT_CHARS * 4).decode("utf-8", errors="replace")[:MAX_TEXT_CHARS]
        lines = (line for line in handle if line.strip())  # as the task counted them
        found = next((line for index, line in enumerate(lines) if index == item.line), b"")
    text = found.decode("utf-8", errors="replace")
    if len(found) > MAX_PARSED_LINE:
        return text[:MAX_TEXT_CHARS]
    try:
        value = json.loads(text)
    except ValueError:
        return text[:MAX_TEXT_CHARS]
    shown = value.get("text") if isinstance(value, dict) else None
    return (shown if isinstance(shown, str) else text)[:MAX_TEXT_CHARS]


def _drawn(request: Request, principal: auth.Principal, task: TaskInfo, item: ItemInfo) -> dict[str, Any]:
    """The item as the page draws it."""
    drawn = item.model_dump()
    if task.kind == "text":
        drawn["text"] = _text(request, principal, task, item)
        return drawn
    # As stored, not turned upright: boxes are measured in the stored pixels, as the export's formats want.
    query = urlencode({"path": item.path, "size": IMAGE_SIZE, "orient": "stored"})
    drawn["image"] = f"{dataset_url(task.project, task.dataset)}/{task.version}/thumbnail?{query}"
    if task.kind == "boxes":
        drawn["size"] = _image_size(request, principal, task, item.path)
    return drawn


def _progress(task: TaskInfo) -> dict[str, Any]:
    return {"items": task.items, "done": task.done, "mine": task.mine}


@router.get("/labeling/{task_id}/annotate")
def annotate_page(request: Request, principal: PagePrincipal, task_id: TaskId) -> Response:
    try:
        task = tasks.get_task(request.app.state.database, principal, task_id)
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                    nav="labeling")
    if not roles(task, principal)["annotates"]:
        return RedirectResponse(task_url(task_id), status_code=status.HTTP_303_SEE_OTHER)
    return page(request, "labeling_annotate.html", nav="labeling", principal=principal, task=task,
                setup=json.dumps({"task": task.id, "kind": task.kind, "classes": task.classes, "user": principal.name,
                                  "progress": _progress(task)}))


@router.get("/labeling/{task_id}/next.json")
def next_item(request: Request, principal: PagePrincipal, task_id: TaskId) -> Response:
    """The item to label next (a rejected one first), or `{"item": null}` when none is left."""
    database = request.app.state.database
    try:
        task = tasks.get_task(database, principal, task_id)
        found = items.next_item(database, principal, task_id)
        drawn = _drawn(request, principal, task, found) if found is not None else None
    except MlyardError as error:
        return _json_error(error)
    return JSONResponse({"item": drawn, "progress": _progress(task)}, headers={"Cache-Control": "no-store"})


@router.get("/labeling/{task_id}/at.json")
def item_at(request: Request, principal: PagePrincipal, task_id: TaskId,
            position: Annotated[int, Query(ge=0, le=2**31 - 2)]) -> Response:
    """The item at a position of the task's order, or `{"item": null}` past either end."""
    database = request.app.state.database
    try:
        task = tasks.get_task(database, principal, task_id)
        listed = items.list_items(database, principal, task_id, after=position - 1, limit=1, mine_only=True).items
        drawn = _drawn(request, principal, task, listed[0]) if listed and listed[0].position == position else None
    except MlyardError as error:
        return _json_error(error)
    return JSONResponse({"item": drawn}, headers={"Cache-Control": "no-store"})


@router.put("/labeling/{task_id}/items/{item_id}/annotation.json")
async def save(request: Request, principal: ChangingPrincipal, task_id: TaskId, item_id: ItemId,
               progress: Annotated[bool, Query()] = False) -> Response:
    """Saves the user's annotation of the item (a draft as it is made, or submitted); with
    `progress`, answers the task's progress too (a count over its annotations: not on every
    draft of a box being dragged)."""
    body = await request.body()
    try:
        if len(body) > MAX_BODY_BYTES:
            raise InvalidRequest(f"an annotation takes at most {MAX_BODY_BYTES // 1024} KiB", field="body")
        try:
            wanted = AnnotationRequest.model_validate_json(body)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "body"
            raise InvalidRequest(f"{where}: {first['msg']}", field=where) from None
        database = request.app.state.database
        saved = await run_in_threadpool(items.save_annotation, database, principal, task_id, item_id, wanted)
        task = await run_in_threadpool(tasks.get_task, database, principal, task_id) if progress else None
    except MlyardError as error:
        return _json_error(error)
    return JSONResponse({"annotation": saved.model_dump(), "progress": _progress(task) if task else None},
                        headers={"Cache-Control": "no-store"})


def _form(body: bytes) -> dict[str, str | list[str]]:
    if len(body) > MAX_CHANGE_BYTES:
        raise InvalidRequest(f"the form is over {MAX_CHANGE_BYTES // 1024} KiB", field="form")
    return parse_qs(body.decode("utf-8", errors="replace"))


def _excerpt(request: Request, principal: auth.Principal, task: TaskInfo, item: ItemInfo) -> str | None:
    """The start of a text item, where its file is small enough to read for a listing."""
    _, file = versions.file_blob(request.app.state.database, request.app.state.blobs, principal, task.project,
                                 task.dataset, task.version, item.path)
    return _text(request, principal, task, item)[:EXCERPT_CHARS] if file.size <= MAX_EXCERPT_FILE else None


def _shown(request: Request, principal: auth.Principal, task: TaskInfo, item: ItemInfo) -> dict[str, Any]:
    """What the review page draws of an item: a thumbnail (boxes over it, in the image's pixels) or text."""
    if task.kind == "text":
        return {"text": _excerpt(request, principal, task, item)}
    query = urlencode({"path": item.path, "size": data_thumbnails.SIZES[1], "orient": "stored"})
    shown: dict[str, Any] = {"image": f"{dataset_url(task.project, task.dataset)}/{task.version}/thumbnail?{query}"}
    if task.kind == "boxes":
        shown["size"] = _image_size(request, principal, task, item.path)
    return shown


@router.get("/labeling/{task_id}/review")
def review_page(request: Request, principal: PagePrincipal, task_id: TaskId,
                after: Annotated[int | None, Query(ge=-1, le=2**31 - 1)] = None,
                only: Annotated[str, Query(pattern="^(submitted|all)$")] = "submitted",
                notice: Annotated[str, Query(max_length=200)] = "") -> Response:
    """Items with annotations, a page at a time (only those waiting for review by default, found
    by the query, not filtered after paging), each annotation with Accept and Reject."""
    database = request.app.state.database
    try:
        task = tasks.get_task(database, principal, task_id)
        listed = items.list_items(database, principal, task_id, after=after, limit=REVIEW_PAGE,
                                  status="submitted" if only == "submitted" else None)
        shown = [item for item in listed.items if any(mark.status != "draft" for mark in item.annotations)]
        drawn = {item.id: _shown(request, principal, task, item) for item in shown}
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                    nav="labeling")
    return page(request, "labeling_review.html", nav="labeling", principal=principal, task=task, items=shown,
                drawn=drawn, next_after=listed.next_after, after=after, only=only, can=roles(task, principal),
                percent=percent, notice=notice if notice.startswith("Accepted ") else "")


def _back(task_id: int, fields: dict, anchor: str = "", **extra: str) -> RedirectResponse:
    """To the review page the form came from (its `after` and `only`)."""
    back = {key: fields[key][0] for key in ("after", "only") if fields.get(key) and fields[key][0]} | extra
    query = f"?{urlencode(back)}" if back else ""
    return RedirectResponse(f"{task_url(task_id)}/review{query}{anchor}", status_code=status.HTTP_303_SEE_OTHER)


def _accepted(value: str) -> tuple[int, ReviewRequest]:
    item_id, _, annotator = value.partition(":")
    try:
        if not item_id.isdigit() or int(item_id) > 2**31 - 1:
            raise ValueError(value)
        return int(item_id), ReviewRequest(annotator=annotator, accept=True)
    except (ValueError, ValidationError):
        raise InvalidRequest(f"{value[:80]!r} is not ITEM:ANNOTATOR", field="item") from None


@router.post("/labeling/{task_id}/review/accept")
async def accept_shown(request: Request, principal: ChangingPrincipal, task_id: TaskId) -> Response:
    """Accepts every submitted annotation the review page showed (`item` values `ID:ANNOTATOR`),
    each through the service as a single Accept would be. All values are checked before any is
    accepted; one that cannot be accepted any more (its annotator took it back meanwhile) is
    skipped and counted, not a reason to stop half-way."""
    try:
        fields = _form(await request.body())
        wanted = [_accepted(value) for value in fields.get("item", [])[:REVIEW_PAGE * 10]]
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                    nav="labeling")
    done = skipped = 0
    for item_id, decision in wanted:
        try:
            await run_in_threadpool(items.review, request.app.state.database, principal, task_id, item_id, decision)
            done += 1
        except (NotFound, Conflict):
            skipped += 1
        except MlyardError as error:  # not theirs to review: nothing else would be either
            return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                        nav="labeling")
    said = f"Accepted {done}" + (f"; {skipped} changed meanwhile and were left for another look" if skipped else "")
    return _back(task_id, fields, notice=said + ".")


@router.post("/labeling/{task_id}/items/{item_id}/review")
async def review(request: Request, principal: ChangingPrincipal, task_id: TaskId, item_id: ItemId) -> Response:
    """Accepts or rejects one annotator's annotation; back to the review page where it was."""
    try:
        fields = _form(await request.body())
        one = {key: values[0] for key, values in fields.items() if values}
        try:
            wanted = ReviewRequest(annotator=one.get("annotator", ""), accept=one.get("decision") == "accept",
                                   comment=one.get("comment", "").strip())
        except ValidationError as error:
            where = ".".join(str(part) for part in error.errors()[0]["loc"]) or "form"
            raise InvalidRequest(f"{where}: {error.errors()[0]['msg']}", field=where) from None
        await run_in_threadpool(items.review, request.app.state.database, principal, task_id, item_id, wanted)
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal,
                    nav="labeling")
    return _back(task_id, fields, f"#item-{item_id}")

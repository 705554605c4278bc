"""Submitting from the browser: a form for the common fields, a YAML editor checked against the
job spec as it is typed, resubmitting a job and cloning it into the editor.

Nothing reaches the database until the whole spec validates; the server-side checks of a
submission (queue, snapshot, whether the job can ever fit) run in the same transaction as the
insert, so a refused submission leaves nothing behind. Each rendered form carries an
idempotency key, so a double click or a reload of the answer does not submit twice.
"""

from __future__ import annotations

import uuid
from typing import Annotated
from urllib.parse import parse_qs

import yaml
from fastapi import APIRouter, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse
from pydantic import ValidationError
from starlette.responses import Response

from mlyard.api.errors import FieldError, field_errors
from mlyard.errors import MlyardError, PayloadTooLarge
from mlyard.server import auth
from mlyard.server.services import jobs, queues
from mlyard.spec import JobSpec
from mlyard.web.templating import page
from mlyard.web.session import ChangingPrincipal, PagePrincipal
from mlyard.web.spec_text import (
    FORM_FIELDS,
    form_field,
    form_spec,
    located_errors,
    spec_yaml,
)

router = APIRouter(include_in_schema=False)

MAX_FORM_BYTES = 256 * 1024
"""A spec is a few hundred bytes; anything near this is a paste gone wrong."""
FRAMEWORKS = ("none", "pytorch", "tensorflow")
MODES = ("form", "yaml")
JobId = Annotated[int, Path(ge=1, le=2**31 - 1)]
EXAMPLE_YAML = """\
name: my-job
command: python -c "print('hello')"
framework: none
roles:
  - name: worker
    replicas: 1
    resources:
      cpu: 1
      memory: 1Gi
      gpu: 0
"""


async def _fields(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise PayloadTooLarge(f"the form is {len(body)} bytes; at most {MAX_FORM_BYTES} are accepted")
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {name: values[0] for name, values in parsed.items()}


def _queue_names(request: Request, principal) -> list[str]:
    try:
        return [queue.name for queue in queues.list_queues(request.app.state.database, principal)]
    except MlyardError:
        return ["default"]


def _form(request: Request, principal, *, mode: str, fields: dict[str, str], errors: list[FieldError],
          message: str | None = None, status_code: int = 200, source: int | None = None) -> Response:
    names = _queue_names(request, principal)
    if fields.get("queue") and fields["queue"] not in names:
        names.append(fields["queue"])
    by_field = {error.field: error.message for error in errors if error.field in FORM_FIELDS.values()}
    # The projects this user may submit to; an administrator may name any (a new one is created).
    project_choices = None if principal.is_admin else sorted(
        name for name, role in principal.roles.items() if role >= auth.Role.MEMBER)
    return page(request, "submit.html", status_code=status_code, nav="submit", principal=principal, mode=mode,
                fields=fields, errors=errors, field_errors=by_field, message=message, queues=names,
                frameworks=FRAMEWORKS, source=source, key=fields.get("key") or uuid.uuid4().hex,
                project_choices=project_choices)


def _default_fields() -> dict[str, str]:
    return {"name": "", "command": "", "framework": "none", "replicas": "1", "cpu": "1", "memory": "1Gi",
            "gpu": "0", "queue": "default", "project": "default", "priority": "0", "max_runtime": "",
            "max_restarts": "0", "env": "", "yaml": EXAMPLE_YAML}


@router.get("/submit")
def submit_page(request: Request, principal: PagePrincipal, mode: str = "form",
                source: Annotated[int | None, Query(alias="from", ge=1, le=2**31 - 1)] = None) -> Response:
    fields = _default_fields()
    if source is not None:
        # Cloning: the job's spec, code snapshot included, in the editor, to change and submit.
        try:
            job = jobs.get_job(request.app.state.database, principal, source)
        except MlyardError as error:
            return page(request, "error.html", status_code=error.http_status, error=error, principal=principal)
        fields["yaml"] = spec_yaml(job.spec)
        mode = "yaml"
    return _form(request, principal, mode=mode if mode in MODES else "form", fields=fields, errors=[],
                 source=source)


def _validated(fields: dict[str, str], mode: str) -> tuple[JobSpec | None, list[FieldError]]:
    """The spec, or the errors that keep it from being one, each on the field (form) or with
    its line (YAML)."""
    if mode == "yaml":
        text = fields.get("yaml", "")
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            return None, [FieldError(field="yaml", message=f"{where}not valid YAML: {problem}")]
        if not isinstance(data, dict):
            return None, [FieldError(field="yaml", message="the spec must be a mapping of job fields "
                                                           "(name, command, roles, …)")]
    else:
        data = form_spec(fields)
    try:
        return JobSpec.model_validate(data), []
    except ValidationError as error:
        # "Value error, " is how pydantic introduces a validator's own sentence; the sentence says it all.
        found = [FieldError(field=item.field, message=item.message.removeprefix("Value error, "))
                 for item in field_errors(error.errors())]
        if mode == "yaml":
            return None, located_errors(found, fields.get("yaml", ""))
        return None, [FieldError(field=form_field(item.field), message=item.message) for item in found]


@router.post("/submit/check")
async def check(request: Request, principal: ChangingPrincipal) -> Response:
    """The errors of the spec typed so far, which the editor shows as you type."""
    fields = await _fields(request)
    mode = fields.get("mode", "yaml")
    _, errors = _validated(fields, mode if mode in MODES else "yaml")
    return page(request, "submit_errors.html", errors=errors, mode=mode)


@router.post("/submit")
async def submit(request: Request, principal: ChangingPrincipal) -> Response:
    try:
        fields = await _fields(request)
    except PayloadTooLarge as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal)
    mode = fields.get("mode", "form")
    mode = mode if mode in MODES else "form"
    spec, errors = _validated(fields, mode)
    if spec is None:
        return _form(request, principal, mode=mode, fields=fields, errors=errors,
                     status_code=status.HTTP_422_UNPROCESSABLE_ENTITY,
                     message="The job was not submitted: fix the fields marked below.")
    key = fields.get("key") or uuid.uuid4().hex
    try:
        submission = await run_in_threadpool(jobs.submit_with_key, request.app.state.database, principal, spec,
                                             key[:128], wake=request.app.state.controller.wake,
                                             check_image=request.app.state.backend.check_image,
                                             secrets=request.app.state.secrets)
    except MlyardError as error:
        field = form_field(error.field) if mode == "form" and error.field else error.field
        problem = FieldError(field=field or "(root)", message=error.message)
        return _form(request, principal, mode=mode, fields=fields, errors=[problem], status_code=error.http_status,
                     message=f"The job was not submitted: {error.message}")
    return RedirectResponse(f"/jobs/{submission.job.id}?notice=submitted", status_code=status.HTTP_303_SEE_OTHER)


@router.post("/jobs/{job_id}/resubmit")
async def resubmit(request: Request, principal: ChangingPrincipal, job_id: JobId) -> Response:
    """The same spec (its hidden values kept) and code snapshot again, as a new job."""
    fields = await _fields(request)
    database = request.app.state.database
    try:
        submission = await run_in_threadpool(jobs.resubmit, database, principal, job_id,
                                             (fields.get("key") or uuid.uuid4().hex)[:128],
                                             wake=request.app.state.controller.wake,
                                             check_image=request.app.state.backend.check_image)
    except MlyardError as error:
        return page(request, "error.html", status_code=error.http_status, error=error, principal=principal)
    return RedirectResponse(f"/jobs/{submission.job.id}?notice=resubmitted&from={job_id}",
                            status_code=status.HTTP_303_SEE_OTHER)

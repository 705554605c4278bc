"""Cleaning reports of dataset versions, and cleaning: a child version without what a report
found wrong.

A report is made by an ordinary job of the dataset's project (`python -m mlyard.cleaning` over
the version, mounted read-only at `data/`, and the predictions' version at `predictions/`), so
it queues under the project's quota like any job, and its progress is the job's log. The job
writes the report into its own checkpoint directory; the leader stores it with the version once
the job succeeds (`workers/dataset_checks.py`). The job's command is an argv list, never a
shell's: the datasets reach it as mounts, the distance as a number, a predictions path as one
argument.

Cleaning reads the newest finished report of the version and makes the child version from the
parent's own file rows (no upload, no byte copied), without the files the chosen kinds name.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.api.dataset_checks import DROP_KINDS, CheckInfo, CheckReport, CheckRequest, CleanRequest
from mlyard.api.datasets import VersionCreated, version_name
from mlyard.errors import Conflict, InvalidRequest, MlyardError, NotFound
from mlyard.server import auth
from mlyard.server.services import job_submission, jobs
from mlyard.server.services.datasets import access, aliases, manifests, versions
from mlyard.server.store.dataset_rows import DatasetCheckRow, DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.server.store.db import Database
from mlyard.spec import DatasetInput, JobSpec

REPORT_FILE = "cleaning-report.json"
"""Where the job writes its report, in its checkpoint directory (MLYARD_CHECKPOINT_DIR)."""
MAX_CHECKS_LISTED = 50


def _info(row: DatasetCheckRow, dataset: DatasetRow, version: DatasetVersionRow) -> CheckInfo:
    summary = row.summary
    return CheckInfo(id=row.id, project=dataset.project, dataset=dataset.name, version=version_name(version.number),
                     job=row.job_id, state=row.state, distance=row.distance,
                     created_by=row.creator.name if row.creator else None, created_at=row.created_at,
                     finished_at=row.finished_at, message=row.message,
                     summary=summary if isinstance(summary, dict) else None)


def _command(request: CheckRequest, same_version: bool) -> list[str]:
    """The job's argv: no shell, so a path given for the predictions is one argument, never code."""
    command = ["python", "-m", "mlyard.cleaning", "data", "--checkpoint-report", REPORT_FILE,
               "--distance", str(int(request.distance))]
    if request.predictions is not None:
        folder = "data" if same_version else "predictions"
        command += ["--predictions", f"{folder}/{request.predictions.path}"]
    return command


def _inputs(project: str, name: str, number: int, reference: str,
            request: CheckRequest) -> tuple[list[DatasetInput], bool]:
    """The job's dataset inputs: the version at data/, and the predictions' version at
    predictions/ (unless they are files of the checked version itself)."""
    inputs = [DatasetInput(name=name, project=project, version=version_name(number), path="data")]
    wanted = request.predictions
    if wanted is None:
        return inputs, False
    if (wanted.project or project, wanted.dataset) == (project, name):
        if wanted.version not in (version_name(number), reference):
            raise InvalidRequest("predictions from another version of the checked dataset cannot be mounted beside "
                                 "it; name that version's own file, or keep predictions in a dataset of their own",
                                 field="predictions.version")
        return inputs, True
    inputs.append(DatasetInput(name=wanted.dataset, project=wanted.project or project, version=wanted.version,
                               path="predictions"))
    return inputs, False


def start_check(database: Database, principal: auth.Principal, project: str, name: str, reference: str,
                request: CheckRequest, *, wake: Callable[[], None], check_image=None) -> CheckInfo:
    """Submits the job that makes the report (members of the dataset's project: the job is theirs;
    admission checks that they may read the predictions' dataset)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.reading() as session:
        dataset = access.readable(session, principal, project, name)
        auth.require_role(principal, project, auth.Role.MEMBER, f"check dataset {project}/{name}")
        number = aliases.resolve(session, dataset, reference).number
    inputs, same_version = _inputs(project, name, number, reference, request)
    try:
        spec = JobSpec(name=f"check-{name}"[:63].rstrip("-"), project=project,
                       command=_command(request, same_version), datasets=inputs)
    except ValidationError as error:  # two inputs of one name: the predictions' dataset shares the checked one's
        raise InvalidRequest(f"the predictions' dataset cannot be mounted beside {project}/{name}: "
                             f"{error.errors()[0]['msg']}", field="predictions.dataset") from None
    try:
        job = job_submission.submit(database, principal, spec, wake=wake, check_image=check_image)
    except MlyardError as error:
        if error.field and error.field.startswith("datasets.1"):  # the predictions' input, as the caller named it
            error.field = "predictions" + error.field.removeprefix("datasets.1").replace(".name", ".dataset")
        raise
    try:
        with database.transaction() as session:
            dataset = access.seen(session, principal, project, name)
            version = aliases.resolve(session, dataset, version_name(number))
            row = DatasetCheckRow(version_id=version.id, job_id=job.id, state="running", distance=request.distance,
                                  created_by=principal.user_id, created_at=time.time(), message="")
            session.add(row)
            session.flush()
            return _info(row, dataset, version)
    except BaseException:
        # Its report would have no row to go to: the job is not left to run for nothing.
        jobs.cancel(database, principal, job.id, wake=wake)
        raise


def list_checks(database: Database, principal: auth.Principal, project: str, name: str,
                reference: str) -> list[CheckInfo]:
    """The version's reports, newest first."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.readable(session, principal, project, name)
        version = aliases.resolve(session, dataset, reference)
        rows = session.scalars(select(DatasetCheckRow).where(DatasetCheckRow.version_id == version.id)
                               .order_by(DatasetCheckRow.id.desc()).limit(MAX_CHECKS_LISTED))
        return [_info(row, dataset, version) for row in rows]


def get_check(database: Database, principal: auth.Principal, check_id: int) -> CheckReport:
    """A report with its groups, for those who may read the version's files."""
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        row, dataset, version = _find(session, principal, check_id)
        return CheckReport(**_info(row, dataset, version).model_dump(), report=row.report)


def _find(session: Session, principal: auth.Principal,
          check_id: int) -> tuple[DatasetCheckRow, DatasetRow, DatasetVersionRow]:
    found = session.execute(
        select(DatasetCheckRow, DatasetVersionRow, DatasetRow)
        .join(DatasetVersionRow, DatasetVersionRow.id == DatasetCheckRow.version_id)
        .join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
        .where(DatasetCheckRow.id == check_id)).first()
    if found is None:
        raise NotFound(f"no cleaning report {check_id}", field="check_id")
    row, version, dataset = found
    try:
        access.readable(session, principal, dataset.project, dataset.name)
    except NotFound:
        raise NotFound(f"no cleaning report {check_id}", field="check_id") from None
    return row, dataset, version


def dropped_paths(report: dict[str, Any], kinds: Iterable[str]) -> dict[str, str]:
    """Path → why, for the files `clean` leaves out of the child."""
    dropped: dict[str, str] = {}

    def drop(paths: Iterable[object], why: str) -> None:
        for path in paths:
            if isinstance(path, str):
                dropped.setdefault(path, why)

    chosen = set(kinds)
    if "duplicates" in chosen:
        for group in report.get("exact_duplicates") or []:
            drop(sorted(_strings(group.get("paths")))[1:], "exact duplicate")
    if "near-duplicates" in chosen:
        for group in report.get("near_duplicates") or []:
            drop(sorted(_strings(group.get("paths")))[1:], "near duplicate")
    if "corrupt" in chosen:
        drop((item.get("path") for item in report.get("corrupt") or []), "cannot be decoded")
        drop(report.get("empty") or [], "empty")
    if "wrong-extension" in chosen:
        drop((item.get("path") for item in report.get("wrong_extension") or []), "wrong extension")
    if "leaks" in chosen:
        for pair in report.get("leaks") or []:
            drop((path for path in pair.get("paths") or [] if not _in_training(path)), "leak across splits")
    if "conflicts" in chosen:
        for group in report.get("label_conflicts") or []:
            drop(group.get("paths") or [], "label conflict")
    if "label-issues" in chosen:
        drop((item.get("path") for item in report.get("label_issues") or []), "label issue")
    return dropped


def flagged_paths(report: dict[str, Any]) -> dict[str, str]:
    """Every file the report names, → why: those `clean` may drop when chosen one by one (the
    first file of a group of duplicates too: which copy stays is then the chooser's)."""
    flagged = dropped_paths(report, DROP_KINDS)
    for key, why in (("exact_duplicates", "exact duplicate"), ("near_duplicates", "near duplicate")):
        for group in report.get(key) or []:
            for path in _strings(group.get("paths") if isinstance(group, dict) else None):
                flagged.setdefault(path, why)
    for pair in report.get("leaks") or []:
        for path in _strings(pair.get("paths") if isinstance(pair, dict) else None):
            flagged.setdefault(path, "leak across splits")
    return flagged


def _chosen(report: dict[str, Any], kinds: Iterable[str], paths: list[str]) -> dict[str, str]:
    """The files `clean` drops: every one of the kinds, and those chosen, each of which the report must name."""
    dropped = dropped_paths(report, kinds)
    if paths:
        flagged = flagged_paths(report)
        for index, path in enumerate(paths):
            if path not in flagged:
                raise InvalidRequest(f"{path[:200]!r} is not a file this report names", field=f"paths.{index}")
            dropped.setdefault(path, f"{flagged[path]} (chosen)")
    return dropped


def _strings(values: object) -> list[str]:
    return [value for value in values if isinstance(value, str)] if isinstance(values, list) else []


def _in_training(path: object) -> bool:
    return isinstance(path, str) and path.split("/", 1)[0].lower() in ("train", "training")


def clean(database: Database, store, principal: auth.Principal, project: str, name: str, reference: str,
          request: CleanRequest) -> VersionCreated:
    """A child of the version without the files its newest report finds wrong in the kinds asked."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.reading() as session:
        dataset = access.seen(session, principal, project, name)
        auth.require_role(principal, project, auth.Role.MEMBER, f"add versions to dataset {project}/{name}")
        parent = aliases.resolve(session, dataset, reference)
        report = session.scalars(select(DatasetCheckRow.report).where(
            DatasetCheckRow.version_id == parent.id, DatasetCheckRow.state == "done")
            .order_by(DatasetCheckRow.id.desc())).first()
        if not isinstance(report, dict):
            raise Conflict(f"{project}/{name}:{version_name(parent.number)} has no finished cleaning report; "
                           f"`mlyard datasets check {project}/{name}:{version_name(parent.number)}` makes one",
                           field="version")
        dropped = _chosen(report, request.drop, request.paths)
        files = session.execute(select(DatasetFileRow.path, DatasetFileRow.digest, DatasetFileRow.size,
                                       DatasetFileRow.media_type)
                                .where(DatasetFileRow.version_id == parent.id).order_by(DatasetFileRow.path)).all()
        entries = [manifests.Entry(path=path, digest=digest, size=size, media_type=media_type)
                   for path, digest, size, media_type in files if path not in dropped]
        if len(entries) == len(files):
            return VersionCreated(version=versions.info(session, dataset, parent), created=False)
        parent_id = parent.id
    figures = manifests.statistics(entries, store.path_for)  # reads files: outside any transaction
    with database.transaction() as session:
        dataset = access.writable(session, principal, project, name)
        parent = session.get(DatasetVersionRow, parent_id)
        if parent is None or parent.dataset_id != dataset.id:
            raise Conflict(f"{project}/{name}:{reference} was removed meanwhile", field="version")
        row = versions.add_version(session, store, dataset, number=versions.next_number(session, dataset),
                                   parent=parent, message=request.message or _message(
                                       dropped, [*request.drop, *(["chosen files"] if request.paths else [])]),
                                   entries=entries, figures=figures, created_by=principal.user_id, by=principal.name)
        return VersionCreated(version=versions.info(session, dataset, row), created=True)


def _message(dropped: dict[str, str], kinds: Iterable[str]) -> str:
    reasons: dict[str, int] = {}
    for why in dropped.values():
        reasons[why] = reasons.get(why, 0) + 1
    said = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
    return f"cleaned ({', '.join(kinds)}): dropped {len(dropped)} file{'s' if len(dropped) != 1 else ''}: {said}"

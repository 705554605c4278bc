"""The dataset versions a job reads: pinned when it is submitted, recorded as its lineage, and
read back when it starts; and the datasets it writes, checked when it is submitted.

A job names `datasets: [{name, version}]` with a version or an alias. Submission resolves each
to a version the submitter may read and stores the version and its fingerprint in the job's
spec, so a restart or a resubmission reads the same files even after `latest` moved; a
resubmitted spec whose version no longer has that fingerprint is refused rather than run on
other data. Each pinned version also becomes a `dataset_reads` row: which jobs read a version.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.api.datasets import version_name
from mlyard.errors import InvalidRequest, MlyardError
from mlyard.server import auth
from mlyard.server.services.datasets import access, aliases
from mlyard.server.store.dataset_rows import DatasetFileRow, DatasetRow, DatasetVersionRow
from mlyard.spec import DatasetInput, DatasetOutput, JobSpec


@dataclass(frozen=True)
class Pinned:
    """A job's input as the controller materializes it."""

    directory: str
    """Relative to the replica's working directory."""
    version_id: int
    fingerprint: str
    files: tuple[tuple[str, str], ...] = ()
    """(path, digest) of each file, read when the job starts."""


def pin(session: Session, principal: auth.Principal, spec: JobSpec,
        cache: dict[tuple[str, str, str], DatasetVersionRow]) -> list[DatasetInput]:
    """The job's inputs with their project, version and fingerprint filled in; `cache` holds
    what one transaction resolved already (a batch names the same version many times)."""
    pinned = []
    for index, item in enumerate(spec.datasets):
        project = item.project or spec.project
        key = (project, item.name, item.version)
        try:
            if key not in cache:
                dataset = access.readable(session, principal, project, item.name)
                cache[key] = aliases.resolve(session, dataset, item.version)
            version = cache[key]
            if item.fingerprint is not None and item.fingerprint != version.fingerprint:
                raise InvalidRequest(f"{version_name(version.number)} of dataset {project}/{item.name} is not the "
                                     "version this spec read (its fingerprint differs)", field="fingerprint")
        except MlyardError as error:
            error.field = f"datasets.{index}.{error.field or 'name'}"
            raise
        cache[(project, item.name, version_name(version.number))] = version  # what `reads` looks up
        pinned.append(item.model_copy(update={"project": project, "version": version_name(version.number),
                                              "fingerprint": version.fingerprint}))
    return pinned


def reads(job_id: int, spec: JobSpec, cache: dict[tuple[str, str, str], DatasetVersionRow]) -> list[dict]:
    """The `dataset_reads` rows of a job whose spec `pin` pinned with this cache."""
    return [{"version_id": cache[(item.project, item.name, item.version)].id, "job_id": job_id}
            for item in spec.datasets]


def pin_outputs(session: Session, principal: auth.Principal, spec: JobSpec) -> list[DatasetOutput]:
    """The job's outputs with their project filled in, once the submitter may add versions to
    each (a member of its project); a dataset that does not exist yet is made when the job succeeds."""
    pinned = []
    for index, item in enumerate(spec.outputs):
        project = item.project or spec.project
        try:
            auth.require_role(principal, project, auth.Role.MEMBER, f"write dataset {project}/{item.dataset}")
            if session.scalar(select(DatasetRow.id).where(DatasetRow.project == project,
                                                          DatasetRow.name == item.dataset)) is not None:
                access.seen(session, principal, project, item.dataset)
        except MlyardError as error:
            error.field = f"outputs.{index}.{error.field or 'dataset'}"
            raise
        if any((earlier.project, earlier.dataset) == (project, item.dataset) for earlier in pinned):
            # Only now does each name its project: `a` and `{project: P, dataset: a}` may be one dataset.
            raise InvalidRequest(f"outputs: {project}/{item.dataset} written twice; a job makes one version of each",
                                 field=f"outputs.{index}.dataset")
        pinned.append(item.model_copy(update={"project": project}))
    return pinned


def outputs(job_id: int, spec: JobSpec) -> list[dict]:
    """The `dataset_outputs` rows of a job, `pending` until it ends."""
    return [{"job_id": job_id, "position": position, "project": item.project, "dataset": item.dataset,
             "path": item.path or "", "state": "pending", "message": ""}
            for position, item in enumerate(spec.outputs)]


def version_ids(session: Session, inputs: list[DatasetInput]) -> list[int]:
    """The versions pinned inputs name (as stored: project, version and fingerprint set)."""
    ids = []
    for item in inputs:
        found = session.scalar(
            select(DatasetVersionRow.id).join(DatasetRow, DatasetRow.id == DatasetVersionRow.dataset_id)
            .where(DatasetRow.project == item.project, DatasetRow.name == item.name,
                   DatasetVersionRow.number == int((item.version or "v0")[1:]),
                   DatasetVersionRow.fingerprint == item.fingerprint))
        if found is None:
            raise InvalidRequest(f"dataset {item.project}/{item.name} no longer has the {item.version} this job "
                                 "read", field="datasets")
        ids.append(found)
    return ids


def files_of(session: Session, version_id: int) -> tuple[tuple[str, str], ...]:
    return tuple((path, digest) for path, digest in session.execute(
        select(DatasetFileRow.path, DatasetFileRow.digest).where(DatasetFileRow.version_id == version_id)
        .order_by(DatasetFileRow.path)))

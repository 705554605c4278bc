"""Aliases: movable names of a dataset's versions (`latest`, `clean`, `production`). Every move
is recorded with who made it and when; `latest` moves to each new version by itself."""

from __future__ import annotations

import time

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.api.datasets import AliasInfo, AliasMove, version_name, version_number
from mlyard.errors import InvalidRequest, NotFound
from mlyard.server import auth
from mlyard.server.services.datasets import access
from mlyard.server.store.db import Database
from mlyard.server.store.dataset_rows import DatasetAliasMoveRow, DatasetAliasRow, DatasetRow, DatasetVersionRow


def resolve(session: Session, dataset: DatasetRow, reference: str, *, field: str = "version") -> DatasetVersionRow:
    """The version `reference` names: `vN`, or an alias."""
    number = version_number(reference)
    if number is not None:
        row = session.scalars(select(DatasetVersionRow).where(DatasetVersionRow.dataset_id == dataset.id,
                                                              DatasetVersionRow.number == number)).first()
    else:
        row = session.scalars(select(DatasetVersionRow)
                              .join(DatasetAliasRow, DatasetAliasRow.version_id == DatasetVersionRow.id)
                              .where(DatasetAliasRow.dataset_id == dataset.id,
                                     DatasetAliasRow.name == reference)).first()
    if row is None:
        raise NotFound(f"dataset {dataset.project}/{dataset.name} has no version or alias {reference!r}", field=field)
    return row


def move(session: Session, dataset: DatasetRow, alias: str, version: DatasetVersionRow, by: str) -> None:
    """Points `alias` at `version`, recording the move (none when it points there already)."""
    row = session.get(DatasetAliasRow, (dataset.id, alias))
    if row is not None and row.version_id == version.id:
        return
    before = session.get(DatasetVersionRow, row.version_id).number if row is not None else None
    now = time.time()
    if row is None:
        session.add(DatasetAliasRow(dataset_id=dataset.id, name=alias, version_id=version.id, moved_at=now))
    else:
        row.version_id, row.moved_at = version.id, now
    session.add(DatasetAliasMoveRow(dataset_id=dataset.id, alias=alias, from_version=before,
                                    to_version=version.number, moved_by=by, at=now))


def _info(session: Session, dataset: DatasetRow, alias: str) -> AliasInfo:
    row = session.get(DatasetAliasRow, (dataset.id, alias))
    if row is None:
        raise NotFound(f"dataset {dataset.project}/{dataset.name} has no alias {alias!r}", field="alias")
    moves = session.scalars(select(DatasetAliasMoveRow).where(
        DatasetAliasMoveRow.dataset_id == dataset.id, DatasetAliasMoveRow.alias == alias)
        .order_by(DatasetAliasMoveRow.id))
    return AliasInfo(alias=alias, version=version_name(session.get(DatasetVersionRow, row.version_id).number),
                     moves=[AliasMove(alias=alias, before=_name(move.from_version), after=_name(move.to_version),
                                      moved_by=move.moved_by, at=move.at) for move in moves])


def _name(number: int | None) -> str | None:
    return None if number is None else version_name(number)


def set_alias(database: Database, principal: auth.Principal, project: str, name: str, alias: str,
              version: str) -> AliasInfo:
    """Points `alias` at `version` (members of the dataset's project)."""
    auth.authorize(principal, auth.Action.WRITE)
    if version_number(alias) is not None:
        raise InvalidRequest(f"{alias!r} reads as a version; an alias starts with a letter other than a v and "
                             "digits", field="alias")
    with database.transaction() as session:
        dataset = access.writable(session, principal, project, name)
        move(session, dataset, alias, resolve(session, dataset, version), principal.name)
        session.flush()
        return _info(session, dataset, alias)


def list_aliases(database: Database, principal: auth.Principal, project: str, name: str) -> list[AliasInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.seen(session, principal, project, name)
        names = session.scalars(select(DatasetAliasRow.name).where(DatasetAliasRow.dataset_id == dataset.id)
                                .order_by(DatasetAliasRow.name))
        return [_info(session, dataset, alias) for alias in names]

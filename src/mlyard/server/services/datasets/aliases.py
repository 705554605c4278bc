"""Aliases: movable names of a dataset's versions (`latest`, `clean`, `production`). Every move
is recorded with who made it and when; `latest` moves to each new version by itself. The rows
are written by `services/version_aliases.py`, which models share."""

from __future__ import annotations

from sqlalchemy.orm import Session

from mlyard.api.datasets import AliasInfo
from mlyard.server import auth
from mlyard.server.services import version_aliases
from mlyard.server.services.datasets import access
from mlyard.server.store.db import Database
from mlyard.server.store.dataset_rows import DatasetAliasMoveRow, DatasetAliasRow, DatasetRow, DatasetVersionRow

FAMILY = version_aliases.Family(version=DatasetVersionRow, alias=DatasetAliasRow, move=DatasetAliasMoveRow,
                                owner="dataset_id")


def _label(dataset: DatasetRow) -> str:
    return f"dataset {dataset.project}/{dataset.name}"


def resolve(session: Session, dataset: DatasetRow, reference: str, *, field: str = "version") -> DatasetVersionRow:
    """The version `reference` names: `vN`, or an alias."""
    return version_aliases.resolve(session, FAMILY, dataset.id, _label(dataset), reference, field=field)


def move(session: Session, dataset: DatasetRow, alias: str, version: DatasetVersionRow, by: str) -> None:
    """Points `alias` at `version`, recording the move (none when it points there already)."""
    version_aliases.move(session, FAMILY, dataset.id, alias, version, by)


def set_alias(database: Database, principal: auth.Principal, project: str, name: str, alias: str,
              version: str) -> AliasInfo:
    """Points `alias` at `version` (members of the dataset's project)."""
    auth.authorize(principal, auth.Action.WRITE)
    version_aliases.check_name(alias)
    with database.transaction() as session:
        dataset = access.writable(session, principal, project, name)
        return version_aliases.point(session, FAMILY, dataset.id, _label(dataset), alias, version, principal.name)


def list_aliases(database: Database, principal: auth.Principal, project: str, name: str) -> list[AliasInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        dataset = access.seen(session, principal, project, name)
        return version_aliases.infos(session, FAMILY, dataset.id, _label(dataset))

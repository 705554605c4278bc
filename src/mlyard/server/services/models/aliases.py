"""Aliases of a model's versions (`production`, `staging`, `champion`; `latest` moves to each new
version by itself). Every move is a row (who, when, from which version to which) and, being a
PUT, an audit-log entry; the rows are `services/version_aliases.py`'s, shared with datasets."""

from __future__ import annotations

from sqlalchemy.orm import Session

from mlyard.api.datasets import AliasInfo
from mlyard.server import auth
from mlyard.server.services import version_aliases
from mlyard.server.services.models import access
from mlyard.server.store.db import Database
from mlyard.server.store.model_rows import ModelAliasMoveRow, ModelAliasRow, ModelRow, ModelVersionRow

FAMILY = version_aliases.Family(version=ModelVersionRow, alias=ModelAliasRow, move=ModelAliasMoveRow,
                                owner="model_id")


def label(model: ModelRow) -> str:
    return f"model {model.project}/{model.name}"


def resolve(session: Session, model: ModelRow, reference: str, *, field: str = "version") -> ModelVersionRow:
    """The version `reference` names: `vN`, or an alias."""
    return version_aliases.resolve(session, FAMILY, model.id, label(model), reference, field=field)


def move(session: Session, model: ModelRow, alias: str, version: ModelVersionRow, by: str) -> None:
    version_aliases.move(session, FAMILY, model.id, alias, version, by)


def names(session: Session, version: ModelVersionRow) -> list[str]:
    return version_aliases.names_of(session, FAMILY, version.id)


def set_alias(database: Database, principal: auth.Principal, project: str, name: str, alias: str,
              version: str) -> AliasInfo:
    """Points `alias` at `version` (members of the model's project); the move is recorded."""
    auth.authorize(principal, auth.Action.WRITE)
    version_aliases.check_name(alias)
    with database.transaction() as session:
        model = access.writable(session, principal, project, name)
        return version_aliases.point(session, FAMILY, model.id, label(model), alias, version, principal.name)


def list_aliases(database: Database, principal: auth.Principal, project: str, name: str) -> list[AliasInfo]:
    auth.authorize(principal, auth.Action.READ)
    with database.reading() as session:
        model = access.seen(session, principal, project, name)
        return version_aliases.infos(session, FAMILY, model.id, label(model))

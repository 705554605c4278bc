"""Removing a model version, and a model that has none left.

By the model's owner, its project's maintainers or an administrator, and never from under
something that needs it: a version is kept while an alias other than `latest` names it (move the
alias first) and while another version's lineage names it as its parent (fine-tuned from it);
`latest` moves back to the newest version left. The version's rows go, then every blob that no
version and no code snapshot keeps (`blob_refs.Removal`)."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from mlyard.api.models import LATEST
from mlyard.errors import Conflict
from mlyard.server import auth
from mlyard.server.services import blob_refs
from mlyard.server.services.models import access, aliases, versions
from mlyard.server.store.db import Database
from mlyard.server.store.model_rows import ModelAliasRow, ModelFileRow, ModelRow, ModelVersionRow
from mlyard.storage import BlobStore


def _refuse_if_needed(session: Session, model: ModelRow, version: ModelVersionRow) -> None:
    label = versions.reference(session, version)
    named = [name for name in aliases.names(session, version) if name != LATEST]
    if named:
        raise Conflict(f"alias {', '.join(named)} names {label}; move it first", field="version")
    children = [versions.reference(session, child) for child in session.scalars(
        select(ModelVersionRow).where(ModelVersionRow.parent_id == version.id).order_by(ModelVersionRow.id))]
    if children:
        raise Conflict(f"{label} is the parent of {', '.join(children)} (fine-tuned from it); a version's lineage "
                       "keeps it", field="version")


def remove_version(database: Database, store: BlobStore, principal: auth.Principal, project: str, name: str,
                   reference: str) -> None:
    auth.authorize(principal, auth.Action.WRITE)
    with blob_refs.Removal(store) as removal, database.transaction() as session:
        model = access.removable(session, principal, project, name)
        version = aliases.resolve(session, model, reference)
        _refuse_if_needed(session, model, version)
        digests = list(session.scalars(select(ModelFileRow.digest).where(ModelFileRow.version_id == version.id)
                                       .distinct()))
        session.execute(delete(ModelFileRow).where(ModelFileRow.version_id == version.id))
        session.execute(delete(ModelAliasRow).where(ModelAliasRow.version_id == version.id))
        session.delete(version)
        session.flush()
        newest = session.scalars(select(ModelVersionRow).where(ModelVersionRow.model_id == model.id)
                                 .order_by(ModelVersionRow.number.desc())).first()
        if newest is not None:
            aliases.move(session, model, LATEST, newest, principal.name)
        removal.take(session, digests)


def remove_model(database: Database, principal: auth.Principal, project: str, name: str) -> None:
    """A model without versions (remove those first: each is checked on its own)."""
    auth.authorize(principal, auth.Action.WRITE)
    with database.transaction() as session:
        model = access.removable(session, principal, project, name)
        left = session.scalar(select(func.count()).where(ModelVersionRow.model_id == model.id)) or 0
        if left:
            raise Conflict(f"model {project}/{name} still has {left} version{'s' if left > 1 else ''}; remove "
                           "them first", field="name")
        session.execute(delete(ModelRow).where(ModelRow.id == model.id))  # its rows go with it

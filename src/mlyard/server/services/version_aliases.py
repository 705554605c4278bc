"""Aliases of immutable versions, shared by datasets and models: a movable name (`latest`,
`production`) of one version of its owner (a dataset, a model), and a row for every move
(who, when, from which version to which).

A `Family` names the three rows a kind of owner keeps: its versions (`id`, `number`), its
aliases (primary key `(<owner>, name)`, `version_id`, `moved_at`) and its alias moves
(`<owner>`, `alias`, `from_version`, `to_version`, `moved_by`, `at`), where `<owner>` is the
column naming the owner (`dataset_id`, `model_id`). `move` is the only writer of those rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from mlyard.api.datasets import AliasInfo, AliasMove, version_name, version_number
from mlyard.errors import InvalidRequest, NotFound


@dataclass(frozen=True)
class Family:
    version: type
    alias: type
    move: type
    owner: str
    """The column of the alias and move rows naming the owner."""


def check_name(alias: str) -> None:
    if version_number(alias) is not None:
        raise InvalidRequest(f"{alias!r} reads as a version; an alias starts with a letter other than a v and "
                             "digits", field="alias")


def resolve(session: Session, family: Family, owner_id: int, label: str, reference: str, *,
            field: str = "version"):
    """The version `reference` names: `vN`, or an alias. `label` names the owner in the error."""
    versions, aliases = family.version, family.alias
    number = version_number(reference)
    if number is not None:
        row = session.scalars(select(versions).where(getattr(versions, family.owner) == owner_id,
                                                     versions.number == number)).first()
    else:
        row = session.scalars(select(versions).join(aliases, aliases.version_id == versions.id)
                              .where(getattr(aliases, family.owner) == owner_id, aliases.name == reference)).first()
    if row is None:
        raise NotFound(f"{label} has no version or alias {reference!r}", field=field)
    return row


def move(session: Session, family: Family, owner_id: int, alias: str, version, by: str) -> None:
    """Points `alias` at `version`, recording the move (none when it points there already)."""
    row = session.get(family.alias, (owner_id, alias))
    if row is not None and row.version_id == version.id:
        return
    before = session.get(family.version, row.version_id).number if row is not None else None
    now = time.time()
    if row is None:
        session.add(family.alias(**{family.owner: owner_id}, name=alias, version_id=version.id, moved_at=now))
    else:
        row.version_id, row.moved_at = version.id, now
    session.add(family.move(**{family.owner: owner_id}, alias=alias, from_version=before,
                            to_version=version.number, moved_by=by, at=now))


def point(session: Session, family: Family, owner_id: int, label: str, alias: str, reference: str,
          by: str) -> AliasInfo:
    """Moves `alias` to the version `reference` names (`move`); the alias with its moves."""
    move(session, family, owner_id, alias, resolve(session, family, owner_id, label, reference), by)
    session.flush()
    return info(session, family, owner_id, label, alias)


def info(session: Session, family: Family, owner_id: int, label: str, alias: str) -> AliasInfo:
    row = session.get(family.alias, (owner_id, alias))
    if row is None:
        raise NotFound(f"{label} has no alias {alias!r}", field="alias")
    moves = family.move
    found = session.scalars(select(moves).where(getattr(moves, family.owner) == owner_id, moves.alias == alias)
                            .order_by(moves.id))
    return AliasInfo(alias=alias, version=version_name(session.get(family.version, row.version_id).number),
                     moves=[AliasMove(alias=alias, before=_name(move.from_version), after=_name(move.to_version),
                                      moved_by=move.moved_by, at=move.at) for move in found])


def infos(session: Session, family: Family, owner_id: int, label: str) -> list[AliasInfo]:
    """Every alias of the owner, by name, with its moves."""
    aliases = family.alias
    names = session.scalars(select(aliases.name).where(getattr(aliases, family.owner) == owner_id)
                            .order_by(aliases.name))
    return [info(session, family, owner_id, label, alias) for alias in names]


def names_of(session: Session, family: Family, version_id: int) -> list[str]:
    """The aliases naming a version, by name."""
    return list(session.scalars(select(family.alias.name).where(family.alias.version_id == version_id)
                                .order_by(family.alias.name)))


def _name(number: int | None) -> str | None:
    return None if number is None else version_name(number)
